package relay

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// answerFirst is an upstream transport that answers at once and reads the request body
// only when the test says, after RoundTrip has returned: as an HTTP/2 transport does
// when the answer comes before the body is sent, and HTTP/1's while it finishes writing
// a body the upstream answered early.
type answerFirst struct {
	answer string
	bodies chan io.ReadCloser // every request's body, unread
}

func (t *answerFirst) RoundTrip(r *http.Request) (*http.Response, error) {
	t.bodies <- r.Body
	return &http.Response{
		StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(strings.NewReader(t.answer)),
		ContentLength: int64(len(t.answer)),
		Request:       r,
	}, nil
}

// answeringFirst is a candidate reached through an answerFirst transport.
func answeringFirst(t *testing.T) (*Upstream, *answerFirst) {
	t.Helper()
	rt := &answerFirst{
		answer: `{"id":"r1","object":"response","model":"` + hiddenModel + `","output":[],"usage":{"input_tokens":5,"output_tokens":1}}`,
		bodies: make(chan io.ReadCloser, 4),
	}
	u, err := url.Parse("answer-first://upstream.invalid/v1")
	require.NoError(t, err)
	up := NewUpstream("svc", &routing.Candidate{Name: "first", Protocol: protocols.FamilyA, BaseURL: u,
		UpstreamModel: hiddenModel, Credential: hiddenCred}, Options{})
	up.transport.RegisterProtocol("answer-first", rt)
	return up, rt
}

// A large body lies in a pooled buffer. The transport may read an upstream body after
// RoundTrip has returned, after the answer reached the client and the handler let go of
// the body: the buffer must not serve another request until the transport closes that
// body, or the upstream reads the other request's bytes.
func TestTheTransportReadsTheBodyAfterTheAnswerAsTheClientSentIt(t *testing.T) {
	op := protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindResponses}
	body := []byte(`{"model":"svc","input":"` + strings.Repeat("the first client's prompt ", 8<<10) + `"}`)
	require.GreaterOrEqual(t, len(body), ForwardWhileArrivingMin)
	// Read whole before the relay runs (as for a key with limits, or a body resent whole):
	// the upstream body is a view into the arriving body's buffer.
	arriving := NewArrivingBody(op, len(body))
	parsed, apiErr := arriving.Finish(bytes.NewReader(body))
	require.Nil(t, apiErr)
	want := string(bytes.Replace(body, []byte(`"model":"svc"`), []byte(`"model":"`+hiddenModel+`"`), 1))

	up, rt := answeringFirst(t)
	r := serveRecorded(t, &Request{Op: op, ServiceModel: "svc", Body: arriving, Header: http.Header{}}, up)
	require.Nil(t, r.err)
	require.Equal(t, http.StatusOK, r.rec.Code)
	assert.Contains(t, r.rec.Body.String(), `"model":"svc"`)
	unread := <-rt.bodies

	// The handler lets go of the body, as after an answer that went well.
	buffer := parsed.Body
	arriving.Release(true)
	// The next request with a body of this size takes the buffer from the pool if it is
	// there, and writes its own bytes over it. The pool does not always hand a buffer on
	// (under the race detector it drops a quarter of what it is given); one given back
	// leaves the request that was read into it without a body, and is overwritten here
	// as the next request would overwrite it.
	next := []byte(`{"model":"svc","input":"` + strings.Repeat("X", len(body)-len(`{"model":"svc","input":""}`)) + `"}`)
	_, apiErr = NewArrivingBody(op, len(next)).Finish(bytes.NewReader(next))
	require.Nil(t, apiErr)
	if parsed.Body == nil {
		copy(buffer[:cap(buffer)], bytes.Repeat([]byte("X"), cap(buffer)))
	}

	got, err := io.ReadAll(unread)
	require.NoError(t, err)
	require.NoError(t, unread.Close())
	assert.True(t, string(got) == want, "the upstream read other bytes than the client sent: %.80q…", got)
	assert.Nil(t, parsed.Body, "the buffer is not given back once the transport has closed the body")
}
