package relay

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/protocols"
)

// trickle feeds body through a pipe in random pieces, pausing before the last tail bytes
// until release is closed (nil: no pause). A non-nil stopWith ends the body early with it.
func trickle(body []byte, seed uint64, tail int, release <-chan struct{}, stopWith error) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		r := rand.New(rand.NewPCG(seed, 3))
		head := body[:len(body)-tail]
		for len(head) > 0 {
			n := min(len(head), 1+r.IntN(40<<10))
			if _, err := pw.Write(head[:n]); err != nil {
				return
			}
			head = head[n:]
		}
		if release != nil {
			<-release
		}
		if stopWith != nil {
			pw.CloseWithError(stopWith)
			return
		}
		_, _ = pw.Write(body[len(body)-tail:])
		pw.Close()
	}()
	return pr
}

// forwardAll reads a forwarder to its end on a goroutine, reporting how much it has given.
type forwarded struct {
	mu   sync.Mutex
	got  []byte
	err  error
	done chan struct{}
}

func forwardAll(f *Forwarder) *forwarded {
	out := &forwarded{done: make(chan struct{})}
	go func() {
		defer close(out.done)
		buf := make([]byte, 3000)
		for {
			n, err := f.Read(buf)
			out.mu.Lock()
			out.got = append(out.got, buf[:n]...)
			out.mu.Unlock()
			if err != nil {
				if err != io.EOF {
					out.err = err
				}
				return
			}
		}
	}()
	return out
}

func (f *forwarded) length() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.got)
}

// settle waits until the forwarder has given at least n bytes and then stopped growing.
func (f *forwarded) settle(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return f.length() >= n }, 5*time.Second, time.Millisecond)
	for last := -1; last != f.length(); time.Sleep(20 * time.Millisecond) {
		last = f.length()
	}
}

func TestAnArrivingBodyIsForwardedAsTheWholeBodyWouldBe(t *testing.T) {
	bigText := strings.Repeat("a long prompt with \\\"escapes\\\" and ✓ ", 8000)
	cases := []struct {
		name      string
		op        protocols.Operation
		body      string
		rewritten bool // the whole body needs a change among bytes already sent
		// declaredCap is the model's output cap; capSent what the upstream must get of it.
		declaredCap int64
		capSent     string
	}{
		{"messages", protocols.Operation{Kind: protocols.KindMessages, Family: protocols.FamilyB},
			`{"model":"claude-x","max_tokens":1024,"messages":[{"role":"user","content":"` + bigText + `"}],"stream":true}`, false, 0, ""},
		{"responses", protocols.Operation{Kind: protocols.KindResponses, Family: protocols.FamilyA},
			`{"model":"codex-x","input":"` + bigText + `","store":false}` + "\n", false, 0, ""},
		{"chat, usage asked for", protocols.Operation{Kind: protocols.KindChat, Family: protocols.FamilyA},
			`{"model":"chat-x","messages":[{"role":"user","content":"` + bigText + `"}],"stream":true,"stream_options":{"include_usage":true}}`, false, 0, ""},
		{"chat, usage added at the end", protocols.Operation{Kind: protocols.KindChat, Family: protocols.FamilyA},
			`{"model":"chat-x","messages":[{"role":"user","content":"` + bigText + `"}],"stream":true}`, false, 0, ""},
		{"chat, usage added inside stream_options sent already", protocols.Operation{Kind: protocols.KindChat, Family: protocols.FamilyA},
			`{"model":"chat-x","stream_options":{"include_obfuscation":false},"messages":[{"role":"user","content":"` + bigText + `"}],"stream":true}`, true, 0, ""},
		// A request without a cap gets the model's in place of its closing brace, which the
		// upstream never has before the whole body passed.
		{"responses, the declared cap added", protocols.Operation{Kind: protocols.KindResponses, Family: protocols.FamilyA},
			`{"model":"codex-x","input":"` + bigText + `","store":false  ` + "\n}\n", false, 4096, `,"max_output_tokens":4096}`},
		{"chat, the declared cap added", protocols.Operation{Kind: protocols.KindChat, Family: protocols.FamilyA},
			`{"model":"chat-x","messages":[{"role":"user","content":"` + bigText + `"}]}`, false, 4096, `],"max_completion_tokens":4096}`},
		{"chat, usage and the declared cap added", protocols.Operation{Kind: protocols.KindChat, Family: protocols.FamilyA},
			`{"model":"chat-x","messages":[{"role":"user","content":"` + bigText + `"}],"stream":true}`, false, 4096, `"max_completion_tokens":4096`},
		{"chat with a cap of its own", protocols.Operation{Kind: protocols.KindChat, Family: protocols.FamilyA},
			`{"model":"chat-x","max_tokens":10,"messages":[{"role":"user","content":"` + bigText + `"}]}`, false, 4096, `"max_tokens":10,`},
		{"messages, whose max_tokens is required", protocols.Operation{Kind: protocols.KindMessages, Family: protocols.FamilyB},
			`{"model":"claude-x","max_tokens":1024,"messages":[{"role":"user","content":"` + bigText + `"}]}`, false, 4096, `"max_tokens":1024,`},
		{"responses, a null cap sent already", protocols.Operation{Kind: protocols.KindResponses, Family: protocols.FamilyA},
			`{"model":"codex-x","max_output_tokens":null,"input":"` + bigText + `"}`, true, 4096, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := []byte(c.body)
			want, err := protocols.ParseRequest(c.op.Family, body)
			require.Nil(t, err)
			wantBody, wantInjected := want.Upstream(c.op, "upstream/model-1", c.declaredCap)

			release := make(chan struct{})
			a := NewArrivingBody(c.op, len(body))
			src := trickle(body, 1, 100, release, nil)
			model, ok := a.ReadUntilModel(src)
			require.True(t, ok)
			assert.Equal(t, modelIn(want), model)
			checked := make(chan struct{})
			a.FinishWhileForwarding(src, func(p *protocols.ParsedRequest) *protocols.APIError { close(checked); return nil })
			f := a.Forward("upstream/model-1", c.declaredCap)
			out := forwardAll(f)

			// All but the last 100 bytes arrived: forwarding goes on up to them, no further.
			out.settle(t, len(body)-5<<10) // the scanner is fed every 4 KiB
			assert.Less(t, out.length(), wantBody.Len()-100+len("upstream/model-1"), "forwarded past what arrived")
			close(release)
			<-out.done
			<-checked
			if c.rewritten {
				assert.ErrorIs(t, out.err, ErrBodyRewritten)
				assert.True(t, f.SendWholeAgain())
				return
			}
			require.NoError(t, out.err)
			assert.Equal(t, string(wantBody.Bytes()), string(out.got), "the upstream gets what it gets from a body read whole")
			assert.Contains(t, string(out.got), c.capSent)
			_, err = protocols.ParseRequest(c.op.Family, out.got)
			assert.Nil(t, err, "the upstream gets one JSON object, each key once")
			assert.Equal(t, wantInjected, f.InjectedUsage())
			if f.Length() >= 0 {
				assert.Equal(t, int64(len(out.got)), f.Length())
			}
			assert.True(t, f.Delivered())
			parsed, apiErr := a.Wait()
			require.Nil(t, apiErr)
			assert.Equal(t, modelIn(want), modelIn(parsed))
		})
	}
}

func TestAnArrivingBodyThatFailsNeverReachesItsEnd(t *testing.T) {
	text := strings.Repeat("lorem ipsum ", 20000)
	good := `{"model":"m","messages":[{"role":"user","content":"` + text + `"}]}`
	op := protocols.Operation{Kind: protocols.KindMessages, Family: protocols.FamilyB}
	for _, c := range []struct {
		name    string
		body    string
		stop    error
		refuse  bool
		message string
	}{
		{"a key twice at the end", strings.TrimSuffix(good, "}") + `,"model":"other"}`, nil, false, "more than once"},
		{"bad JSON at the end", strings.TrimSuffix(good, "}") + `,"x":tru}`, nil, false, "not valid JSON"},
		{"a second object after it", good + `{"model":"other"}`, nil, false, "not valid JSON"},
		{"the client stops sending", good, errors.New("connection reset"), false, "could not be read"},
		{"the checks after the scan refuse it", good, nil, true, "refused by check"},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := []byte(c.body)
			release := make(chan struct{})
			a := NewArrivingBody(op, len(body))
			src := trickle(body, 2, 50, release, c.stop)
			_, ok := a.ReadUntilModel(src)
			require.True(t, ok)
			a.FinishWhileForwarding(src, func(*protocols.ParsedRequest) *protocols.APIError {
				if c.refuse {
					return protocols.InvalidParam(protocols.FamilyB, "", "refused by check")
				}
				return nil
			})
			out := forwardAll(a.Forward("up", 0))
			out.settle(t, len(body)-5<<10)
			close(release)
			<-out.done
			assert.ErrorIs(t, out.err, ErrBodyRefused)
			// Everything short of the closing brace may have gone (the check runs once the
			// scan has passed the whole body); the brace itself never does.
			closingInForwarded := bytes.LastIndexByte([]byte(good), '}') - len("m") + len("up")
			assert.LessOrEqual(t, len(out.got), closingInForwarded, "the upstream got the object's end")
			_, apiErr := a.Wait()
			require.NotNil(t, apiErr)
			assert.Contains(t, apiErr.Message, c.message)
		})
	}
}

func TestClosingAForwarderEndsItsWait(t *testing.T) {
	body := []byte(`{"model":"m","input":"` + strings.Repeat("x", 100<<10) + `"}`)
	release := make(chan struct{})
	defer close(release)
	a := NewArrivingBody(protocols.Operation{Kind: protocols.KindResponses, Family: protocols.FamilyA}, len(body))
	src := trickle(body, 3, 10, release, nil)
	_, ok := a.ReadUntilModel(src)
	require.True(t, ok)
	a.FinishWhileForwarding(src, func(*protocols.ParsedRequest) *protocols.APIError { return nil })
	f := a.Forward("up", 0)
	out := forwardAll(f)
	out.settle(t, len(body)-5<<10)
	require.NoError(t, f.Close())
	select {
	case <-out.done:
		assert.ErrorIs(t, out.err, errForwardClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("a closed forwarder still waits for the body")
	}
}

func TestAForwarderGivesUpOnAClientTooSlowToWaitFor(t *testing.T) {
	body := []byte(`{"model":"m","input":"` + strings.Repeat("x", 200<<10) + `"}`)
	op := protocols.Operation{Kind: protocols.KindResponses, Family: protocols.FamilyA}

	t.Run("no byte for the stall limit", func(t *testing.T) {
		release := make(chan struct{})
		a := NewArrivingBody(op, len(body))
		a.patience = patience{stall: 150 * time.Millisecond, minRate: 1 << 30}
		src := trickle(body, 4, 1000, release, nil)
		_, ok := a.ReadUntilModel(src)
		require.True(t, ok)
		a.FinishWhileForwarding(src, func(*protocols.ParsedRequest) *protocols.APIError { return nil })
		f := a.Forward("up", 0)
		out := forwardAll(f)
		select {
		case <-out.done:
		case <-time.After(5 * time.Second):
			t.Fatal("the forwarder still waits on a client that stopped sending")
		}
		assert.ErrorIs(t, out.err, ErrBodyStalled)
		assert.True(t, f.SendWholeAgain())
		assert.False(t, f.Delivered())
		// The body itself is still good once the client sends the rest.
		close(release)
		parsed, apiErr := a.Wait()
		require.Nil(t, apiErr)
		assert.Equal(t, "m", modelIn(parsed))
	})

	t.Run("bytes keep coming, too slowly for the body's length", func(t *testing.T) {
		// At 100 KiB/s a 200 KiB body may take at most 2 s plus the stall limit; this
		// client sends a byte every 50 ms, never stalling.
		pr, pw := io.Pipe()
		go func() {
			if _, err := pw.Write(body[:100<<10]); err != nil {
				return
			}
			for _, c := range body[100<<10:] {
				time.Sleep(50 * time.Millisecond)
				if _, err := pw.Write([]byte{c}); err != nil {
					return
				}
			}
		}()
		defer pw.CloseWithError(errors.New("test over"))
		a := NewArrivingBody(op, len(body))
		a.patience = patience{stall: 300 * time.Millisecond, minRate: 100 << 10}
		_, ok := a.ReadUntilModel(pr)
		require.True(t, ok)
		a.FinishWhileForwarding(pr, func(*protocols.ParsedRequest) *protocols.APIError { return nil })
		f := a.Forward("up", 0)
		begun := time.Now()
		out := forwardAll(f)
		select {
		case <-out.done:
		case <-time.After(10 * time.Second):
			t.Fatal("the forwarder waits on a trickling client without end")
		}
		assert.ErrorIs(t, out.err, ErrBodyStalled)
		assert.Less(t, time.Since(begun), 4*time.Second)
		assert.Greater(t, time.Since(begun), time.Second, "gave up before the body's time was up")
	})
}

// prepareRequestBody is ParsedRequest.Upstream for a body not parsed yet, joined into
// one slice.
func prepareRequestBody(op protocols.Operation, body []byte, upstreamModel string) (out []byte, injectedUsage bool) {
	p, err := protocols.ParseRequest(op.Family, body)
	if err != nil {
		return body, false
	}
	up, injected := p.Upstream(op, upstreamModel, 0)
	return up.Bytes(), injected
}

// modelIn is the model a parsed body names.
func modelIn(p *protocols.ParsedRequest) string {
	m, _ := p.Model(protocols.FamilyA)
	return m
}
