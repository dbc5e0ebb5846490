package protocols

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fillOnce runs one Fill on a goroutine and fails the test if it does not return soon:
// a Fill that waits while a complete event is in hand holds that event back.
func fillOnce(t *testing.T, s *EventStream, r io.Reader) int {
	t.Helper()
	done := make(chan int, 1)
	go func() {
		n, _ := s.Fill(r)
		done <- n
	}()
	select {
	case n := <-done:
		return n
	case <-time.After(2 * time.Second):
		t.Fatal("Fill waited with a complete event in hand")
		return 0
	}
}

func TestFillGivesEveryCompleteEventWithoutWaitingForMore(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	s := NewEventStream(KindChat, "svc", false, Scrubber{})
	chunk := func(b string) {
		go func() { _, _ = pw.Write([]byte(b)) }()
	}

	// Two events in one upstream write: both come out of one Fill, though the pipe has
	// nothing after them.
	chunk("data: {\"a\":1}\n\ndata: {\"b\":2}\n\n")
	fillOnce(t, s, pr)
	var got []string
	for ev, ok := s.Next(); ok; ev, ok = s.Next() {
		got = append(got, string(ev.Data))
	}
	assert.Equal(t, []string{`{"a":1}`, `{"b":2}`}, got)

	// Between events the stream holds no buffer of its own.
	s.Release()
	assert.Nil(t, s.buf, "an idle stream holds a buffer")

	// An event cut in two writes: the first part is held, the second completes it.
	chunk("data: {\"c\":")
	fillOnce(t, s, pr)
	_, ok := s.Next()
	assert.False(t, ok)
	s.Release()
	require.NotNil(t, s.buf, "bytes of an incomplete event were let go")
	chunk("3}\n\n")
	fillOnce(t, s, pr)
	ev, ok := s.Next()
	require.True(t, ok)
	assert.Equal(t, `{"c":3}`, string(ev.Data))

	// A blank line sent on its own ends the event before it.
	chunk("data: {\"d\":4}\n")
	fillOnce(t, s, pr)
	chunk("\n")
	fillOnce(t, s, pr)
	ev, ok = s.Next()
	require.True(t, ok)
	assert.Equal(t, `{"d":4}`, string(ev.Data))
}

func TestASecretIsFoundWhereverItMeetsTheHeadEventsRepeat(t *testing.T) {
	secret := "secret.host:8443"
	scrub := Scrubber{UpstreamModel: "up-x", ServiceModel: "svc", Secrets: []string{secret, "cred-123"}}
	head := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model":"up-x","choices":[{"delta":{"content":"`
	// The first event is clean but ends its head with the secret's first k bytes; the
	// second repeats all of that and goes on with the rest of the secret, so the secret
	// begins inside the bytes the two share.
	for k := 0; k < len(secret); k++ {
		clean := head + secret[:k] + `~plain words"}}]}` + "\n\n"
		second := head + secret + `"}}]}` + "\n\n"
		s := NewEventStream(KindChat, "svc", false, scrub)
		s.Push([]byte(clean + second))
		var out []byte
		for ev, ok := s.Next(); ok; ev, ok = s.Next() {
			out, _ = s.AppendRewritten(out, ev)
		}
		assert.NotContains(t, string(out), secret, "the first %d bytes of the secret shared", k)
		assert.Contains(t, string(out), "plain words")
	}
}
