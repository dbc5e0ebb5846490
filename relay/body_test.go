package relay

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// gatedReader gives head at once, then the rest only once open is closed; ended is
// closed when it has given its last byte.
type gatedReader struct {
	head, rest  string
	open, ended chan struct{}
}

func (g *gatedReader) Read(p []byte) (int, error) {
	if g.head != "" {
		n := copy(p, g.head)
		g.head = g.head[n:]
		return n, nil
	}
	<-g.open
	if g.rest == "" {
		return 0, io.EOF
	}
	n := copy(p, g.rest)
	g.rest = g.rest[n:]
	if g.rest == "" {
		close(g.ended)
	}
	return n, nil
}

// The handler's reader (net/http's request body) is its caller's again once the handler
// returns: releasing a body still arriving waits until nothing reads it any more.
func TestReleasingABodyStillArrivingWaitsForItsReading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		op := protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindResponses}
		body := `{"model":"m","input":"` + strings.Repeat("y", 128<<10) + `"}`
		src := &gatedReader{head: body[:len(body)/2], rest: body[len(body)/2:], open: make(chan struct{}), ended: make(chan struct{})}
		b, apiErr := ReadBody(op, src, int64(len(body)), BodyLimits{Max: 1 << 20},
			func(string) (func(*protocols.ParsedRequest) *protocols.APIError, bool) { return nil, true })
		require.Nil(t, apiErr)
		require.Nil(t, b.Parsed(), "handed on while it still arrives")

		released := make(chan struct{})
		go func() {
			b.Release(true)
			close(released)
		}()
		synctest.Wait() // everyone is blocked: the reading on the client, Release on it
		select {
		case <-released:
			t.Error("released while the client's body was still being read")
		default:
		}

		close(src.open)
		<-released
		select {
		case <-src.ended:
		default:
			t.Error("released before the body was read to its end")
		}
		parsed, apiErr := b.Wait()
		assert.Nil(t, apiErr)
		assert.NotNil(t, parsed)
	})
}

// The hook that bills an answer reads the request's whole body (the ledger estimates the
// input from it when the upstream reports none): a body forwarded while it arrived has
// passed by then, and the request carries it parsed.
func TestAnAnswerToAForwardedBodyIsFinalizedWithTheWholeBody(t *testing.T) {
	op := protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindChat}
	body := `{"model":"svc","messages":[{"role":"user","content":"` + strings.Repeat("y", 128<<10) + `"}]}`
	b, apiErr := ReadBody(op, strings.NewReader(body), int64(len(body)), BodyLimits{Max: 1 << 20},
		func(string) (func(*protocols.ParsedRequest) *protocols.APIError, bool) { return nil, true })
	require.Nil(t, apiErr)
	t.Cleanup(func() { b.Release(false) })

	up := testUpstream(t, "a", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(chatAnswer))
	}, routing.Timeouts{})
	req := &Request{Op: op, ServiceModel: "svc", Body: b, Header: http.Header{}}
	var atFinalize *protocols.ParsedRequest
	finalized := 0
	req.Finalize = func(*Outcome) { finalized++; atFinalize = req.Body.Parsed() }
	out, err := Serve(context.Background(), httptest.NewRecorder(), req, []*Upstream{up})
	require.Nil(t, err)
	require.NotNil(t, out.Served)
	require.Equal(t, 1, finalized)
	require.NotNil(t, atFinalize, "billed without the request's body")
	assert.Equal(t, len(body), len(atFinalize.Body))
}
