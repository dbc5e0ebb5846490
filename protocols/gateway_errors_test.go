package protocols_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/protocols"
)

func TestTheGatewaysOwnErrors(t *testing.T) {
	chat := protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindChat}
	count := protocols.Operation{Family: protocols.FamilyB, Kind: protocols.KindMessagesCountTokens}
	cases := []struct {
		name            string
		err             *protocols.APIError
		status          int
		typ, code, says string
		noRetry         bool
		retryAfter      int
	}{
		{"invalid key", protocols.ErrInvalidKey(), 401, "authentication_error", "invalid_api_key", "missing or invalid API key", false, 0},
		{"key in the query, family B", protocols.ErrKeyInQuery(protocols.FamilyB), 400, "invalid_request_error", "", "never in the URL", false, 0},
		{"unknown path", protocols.ErrUnknownPath(protocols.FamilyB, "POST", "/v1/messages/"), 404, "not_found_error", "unknown_url", "unknown path POST /v1/messages/", false, 0},
		{"method", protocols.ErrMethodNotAllowed(chat, "GET", "/v1/chat/completions"), 405, "invalid_request_error", "", "use POST", false, 0},
		{"stateful", protocols.ErrNotServed(protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindStatefulResponses}), 501, "server_error", "unsupported_operation", "server-side response state", true, 0},
		{"websocket", protocols.ErrNotServed(protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindResponsesWebSocket}), 501, "server_error", "unsupported_operation", "WebSocket", true, 0},
		{"compressed", protocols.ErrCompressedBody(protocols.FamilyB), 415, "invalid_request_error", "", "Content-Encoding", false, 0},
		{"too large", protocols.ErrBodyTooLarge(protocols.FamilyB, 1024), 413, "request_too_large", "", "limit of 1024 bytes", false, 0},
		{"unreadable", protocols.ErrBodyUnreadable(protocols.FamilyA), 400, "invalid_request_error", "", "could not be read", false, 0},
		{"body timed out, family A", protocols.ErrBodyRead(protocols.FamilyA, fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded)), 408, "invalid_request_error", "request_timeout", "did not arrive in time", false, 0},
		{"body timed out, family B", protocols.ErrBodyRead(protocols.FamilyB, fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded)), 408, "invalid_request_error", "request_timeout", "did not arrive in time", false, 0},
		{"body broke off", protocols.ErrBodyRead(protocols.FamilyB, io.ErrUnexpectedEOF), 400, "invalid_request_error", "", "could not be read", false, 0},
		{"model not found", protocols.ErrModelNotFound(protocols.FamilyB, "m-x"), 404, "not_found_error", "model_not_found", "'m-x' does not exist", false, 0},
		{"model not listed", protocols.ErrModelNotListed("m-y"), 404, "invalid_request_error", "model_not_found", "'m-y' does not exist", false, 0},
		{"protocol not offered", protocols.ErrProtocolNotOffered(protocols.FamilyA, "m"), 503, "service_unavailable", protocols.CodeNoChannel, "not offered on the family_a protocol", true, 0},
		{"no channel", protocols.ErrNoChannel(protocols.FamilyB, "m", 0), 503, "overloaded_error", protocols.CodeNoChannel, "no candidate available", false, 1},
		{"no channel, later", protocols.ErrNoChannel(protocols.FamilyA, "m", 7), 503, "service_unavailable", protocols.CodeNoChannel, "retry later", false, 7},
		{"sub-operation", protocols.ErrSubOperationNotOffered(count, "m"), 404, "not_found_error", "unsupported_operation", "does not offer messages.count_tokens", true, 0},
		{"stream ended", protocols.ErrStreamEnded(protocols.FamilyB, protocols.StreamStalled), 502, "api_error", "", "stalled", false, 0},
		{"misconfigured", protocols.ErrMisconfigured(protocols.FamilyA, "x before y"), 500, "server_error", "", "gateway misconfigured: x before y", false, 0},
		{"generic 4xx", protocols.ErrGeneric(protocols.FamilyA, 408), 408, "invalid_request_error", "", "request timeout", false, 0},
		{"generic 5xx hides the cause", protocols.ErrGeneric(protocols.FamilyB, 502), 502, "api_error", "", "the gateway could not complete the request", false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.status, c.err.Status)
			assert.Equal(t, c.noRetry, c.err.NoRetry)
			assert.Equal(t, c.retryAfter, c.err.RetryAfter)
			body := gjson.ParseBytes(c.err.Body("req-1"))
			if c.err.Family == protocols.FamilyB {
				assert.Equal(t, "error", body.Get("type").Str)
				assert.Equal(t, "req-1", body.Get("request_id").Str)
			} else {
				assert.False(t, body.Get("type").Exists(), "family A's envelope has no top-level type")
			}
			assert.Equal(t, c.typ, body.Get("error.type").Str)
			assert.Equal(t, c.code, body.Get("error.code").Str)
			assert.Contains(t, body.Get("error.message").Str, c.says)
		})
	}
}

func TestFamilyOfPathAndAllowedMethods(t *testing.T) {
	assert.Equal(t, protocols.FamilyB, protocols.FamilyOfPath("/v1/messages"))
	assert.Equal(t, protocols.FamilyB, protocols.FamilyOfPath("/v1/messages/count_tokens/"))
	assert.Equal(t, protocols.FamilyA, protocols.FamilyOfPath("/v1/chat/completions"))
	assert.Equal(t, protocols.FamilyA, protocols.FamilyOfPath("/"))
	assert.Equal(t, "GET", protocols.Operation{Kind: protocols.KindModels}.AllowedMethods())
	assert.Equal(t, "POST", protocols.Operation{Kind: protocols.KindResponses}.AllowedMethods())
	for kind, sub := range map[protocols.Kind]bool{
		protocols.KindChat: false, protocols.KindResponses: false, protocols.KindMessages: false,
		protocols.KindResponsesInputTokens: true, protocols.KindResponsesCompact: true, protocols.KindMessagesCountTokens: true,
	} {
		assert.Equal(t, sub, protocols.Operation{Kind: kind}.SubOperation(), kind.String())
	}
}

func TestReadBounded(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 100)
	for _, cl := range []int64{-1, 0, 50, 100, 1 << 40} {
		b, err := protocols.ReadBounded(iotest.OneByteReader(bytes.NewReader(body)), cl, 100)
		require.NoError(t, err, "a body of exactly the limit is whole (claimed length %d)", cl)
		assert.Len(t, b, 100)
		_, err = protocols.ReadBounded(bytes.NewReader(append(body, 'y')), cl, 100)
		assert.ErrorIs(t, err, protocols.ErrTooLarge, "one byte over the limit (claimed length %d)", cl)
	}
	// Never more than limit+1 bytes are read, however much the sender has.
	endless := &countingReader{r: io.LimitReader(neverEnding('z'), 1<<30)}
	_, err := protocols.ReadBounded(endless, -1, 4096)
	assert.ErrorIs(t, err, protocols.ErrTooLarge)
	assert.LessOrEqual(t, endless.n, int64(4097))

	broken := errors.New("connection reset")
	_, err = protocols.ReadBounded(iotest.ErrReader(broken), 10, 100)
	assert.ErrorIs(t, err, broken)
}

type neverEnding byte

func (b neverEnding) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func TestShapeOfAnOperationThatIsNotRelayed(t *testing.T) {
	s := protocols.ShapeOf(protocols.KindModels)
	model, obs := s.Answer([]byte(`{"model":"x","usage":{"input_tokens":3}}`))
	assert.False(t, model.Exists())
	assert.False(t, obs.Billable)
	assert.Nil(t, s.Validate(nil, http.Header{}))
}

func TestABodyThatTimedOutIsAnsweredInItsOwnFamily(t *testing.T) {
	timedOut := fmt.Errorf("read tcp 127.0.0.1:1: %w", os.ErrDeadlineExceeded)
	a := gjson.ParseBytes(protocols.ErrBodyRead(protocols.FamilyA, timedOut).Body("req-1"))
	assert.False(t, a.Get("type").Exists(), "family A's envelope has no top-level type: %s", a.Raw)
	assert.Equal(t, "request_timeout", a.Get("error.code").Str)
	b := gjson.ParseBytes(protocols.ErrBodyRead(protocols.FamilyB, timedOut).Body("req-1"))
	assert.Equal(t, "error", b.Get("type").Str, "family B's envelope: %s", b.Raw)
	assert.Equal(t, "req-1", b.Get("request_id").Str)
}
