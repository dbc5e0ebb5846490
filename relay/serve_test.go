package relay

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// Distinctive values an upstream may put in its bytes that no client may see.
const (
	hiddenModel = "zz-hidden-upstream-model"
	hiddenCred  = "zz-hidden-credential-7f3a"
	orgUUID     = "6b1f9c7e-2d4a-4c1e-9a55-0c3e5b8d2f10"
)

func testUpstream(t *testing.T, name string, handler http.HandlerFunc, timeouts routing.Timeouts) *Upstream {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL + "/v1")
	require.NoError(t, err)
	up := NewUpstream("svc", &routing.Candidate{Name: name, Protocol: protocols.FamilyA, BaseURL: u,
		UpstreamModel: hiddenModel, Credential: hiddenCred, Timeouts: timeouts}, Options{})
	t.Cleanup(up.Close)
	return up
}

func chatRequest(t *testing.T, kind protocols.Kind, body string) *Request {
	t.Helper()
	family := protocols.FamilyA
	if kind == protocols.KindMessages || kind == protocols.KindMessagesCountTokens {
		family = protocols.FamilyB
	}
	parsed, apiErr := protocols.ParseRequest(family, []byte(body))
	require.Nil(t, apiErr)
	op := protocols.Operation{Family: family, Kind: kind}
	return &Request{Op: op, ServiceModel: "svc", Body: WholeBody(op, parsed), Header: http.Header{}}
}

const streamedChat = `{"model":"svc","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello there"}]}`

// chatStream is a complete upstream chat stream; its last event is [DONE].
func chatStream(model string) string {
	return "data: {\"id\":\"c1\",\"model\":\"" + model + "\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n" +
		"data: {\"id\":\"c1\",\"model\":\"" + model + "\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
		"data: {\"id\":\"c1\",\"model\":\"" + model + "\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":1,\"total_tokens\":8}}\n\n" +
		"data: [DONE]\n\n"
}

// recorded serves req and notes what the client had received when Finalize ran.
type recorded struct {
	rec        *httptest.ResponseRecorder
	out        *Outcome
	err        *protocols.APIError
	atFinalize string
	finalized  int
	// attemptsAtFinalize is how many attempts the record could count, the serving one included.
	attemptsAtFinalize int
}

func serveRecorded(t *testing.T, req *Request, ups ...*Upstream) *recorded {
	t.Helper()
	for i, up := range ups {
		up.Candidate.Priority = i // tried in the order given
	}
	r := &recorded{rec: httptest.NewRecorder()}
	req.Finalize = func(o *Outcome) {
		r.finalized++
		r.atFinalize = r.rec.Body.String()
		r.attemptsAtFinalize = len(o.Attempts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r.out, r.err = Serve(ctx, r.rec, req, ups)
	return r
}

func sseHandler(body string, contentLength bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		if contentLength {
			// With a length, Go's client hands over the last bytes together with EOF.
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		}
		_, _ = w.Write([]byte(body))
	}
}

func TestStreamEndsExactlyAsTheUpstreamSentIt(t *testing.T) {
	full := chatStream(hiddenModel)
	cases := []struct {
		name, upstream string
		contentLength  bool
	}{
		{"last events and end of body in one read", full, true},
		{"chunked", full, false},
		{"last event without its blank line", strings.TrimSuffix(full, "\n"), false},
		{"last event without any line end", strings.TrimSuffix(full, "\n\n"), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := testUpstream(t, "a", sseHandler(tc.upstream, tc.contentLength), routing.Timeouts{})
			r := serveRecorded(t, chatRequest(t, protocols.KindChat, streamedChat), up)
			require.Nil(t, r.err)
			want := strings.ReplaceAll(tc.upstream, `"model":"`+hiddenModel+`"`, `"model":"svc"`)
			assert.Equal(t, want, r.rec.Body.String(), "only the model may change, and nothing may be added")
			assert.Equal(t, 1, r.finalized)
			assert.NotContains(t, r.atFinalize, "[DONE]", "the usage record must exist before the last event is written")
			assert.True(t, r.out.Obs.Complete)
			assert.Equal(t, protocols.Usage{Input: 7, Output: 1}, r.out.Obs.Usage)
		})
	}
}

func TestAnswersThatAreNotWhatWasAskedForFailOver(t *testing.T) {
	good := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"x","model":"` + hiddenModel + `","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`))
	}
	bad := map[string]http.HandlerFunc{
		"200 text/html": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte("<html>LEAK " + hiddenModel + "</html>"))
		},
		"302 with a body": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Location", "http://elsewhere.invalid/")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusFound)
			_, _ = w.Write([]byte(`{"LEAK":"` + hiddenModel + `"}`))
		},
		"200 JSON that does not parse": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"LEAK":"` + hiddenModel + `",`))
		},
		"200 without a content type": func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Type"] = nil
			_, _ = w.Write([]byte(`{"LEAK":"x"}`))
		},
		"a JSON body cut before its end": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "1000")
			_, _ = w.Write([]byte(`{"LEAK":"`))
		},
		"a stream that ends before any event": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte(": just a comment\n\n"))
		},
	}
	for name, handler := range bad {
		t.Run(name, func(t *testing.T) {
			req := chatRequest(t, protocols.KindChat, `{"model":"svc","messages":[]}`)
			if strings.Contains(name, "stream") {
				req = chatRequest(t, protocols.KindChat, streamedChat)
			}
			broken := testUpstream(t, "broken", handler, routing.Timeouts{})
			r := serveRecorded(t, req, broken, testUpstream(t, "good", good, routing.Timeouts{}))
			require.Nil(t, r.err)
			if strings.Contains(name, "stream") {
				// The good candidate answers JSON to a streamed request: passed as is.
				assert.Equal(t, "good", r.out.Served.Candidate.Name)
			} else {
				assert.Equal(t, "good", r.out.Served.Candidate.Name)
				assert.JSONEq(t, `{"id":"x","model":"svc","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`, r.rec.Body.String())
			}
			assert.NotContains(t, r.rec.Body.String(), "LEAK")
			require.Len(t, r.out.Attempts, 2)
			assert.NotEqual(t, routing.ReasonNone, r.out.Attempts[0].Reason)

			// Alone, the broken candidate gives the client the gateway's 503, never its bytes.
			alone := serveRecorded(t, req, testUpstream(t, "broken", handler, routing.Timeouts{}))
			require.NotNil(t, alone.err)
			assert.Equal(t, http.StatusServiceUnavailable, alone.err.Status)
			assert.Empty(t, alone.rec.Body.String())
		})
	}
}

func TestOversizedEvents(t *testing.T) {
	huge := "data: {\"x\":\"" + strings.Repeat("a", protocols.MaxEventSize+1) + "\"}\n\n"
	t.Run("a first event over the limit fails over", func(t *testing.T) {
		r := serveRecorded(t, chatRequest(t, protocols.KindChat, streamedChat),
			testUpstream(t, "huge", sseHandler(huge, false), routing.Timeouts{}),
			testUpstream(t, "good", sseHandler(chatStream(hiddenModel), false), routing.Timeouts{}))
		require.Nil(t, r.err)
		assert.Equal(t, "good", r.out.Served.Candidate.Name)
		assert.Equal(t, routing.ReasonBadResponse, r.out.Attempts[0].Reason)
		assert.Equal(t, 2, r.attemptsAtFinalize, "the record counts the failed attempt and the serving one")
	})
	t.Run("a later event over the limit ends the stream with the native error", func(t *testing.T) {
		first := "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n"
		up := testUpstream(t, "huge", sseHandler(first+huge, false), routing.Timeouts{})
		r := serveRecorded(t, chatRequest(t, protocols.KindChat, streamedChat), up)
		require.Nil(t, r.err)
		body := r.rec.Body.String()
		require.Less(t, len(body), 4096, "no part of the oversized event reaches the client")
		assert.True(t, strings.HasPrefix(body, strings.Replace(first, `"model":"m"`, `"model":"svc"`, 1)))
		assert.Contains(t, body, `"error"`)
		assert.Contains(t, body, "larger than the gateway's limit")
		assert.ErrorIs(t, r.out.StreamError, errEventTooLarge)
		assert.Equal(t, 1, r.finalized)
		assert.NotContains(t, r.atFinalize, `"error"`, "the record precedes the error event")
	})
}

func TestSubOperationNotOfferedLeavesHealthAlone(t *testing.T) {
	notFound := func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"message":"no such route"}}`, http.StatusNotFound)
	}
	counted := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"input_tokens":12}`))
	}
	body := `{"model":"svc","messages":[{"role":"user","content":"hi"}]}`
	lacking := testUpstream(t, "lacking", notFound, routing.Timeouts{})
	for range 20 {
		r := serveRecorded(t, chatRequest(t, protocols.KindMessagesCountTokens, body), lacking)
		require.NotNil(t, r.err)
		assert.Equal(t, http.StatusNotFound, r.err.Status, "a sub-operation nobody offers is a 404, not a 503")
		assert.Equal(t, routing.ReasonNotOffered, r.out.Attempts[0].Reason)
	}
	now := time.Now()
	assert.Equal(t, "closed", lacking.Health.Snapshot(now).State, "generation health untouched")
	assert.Equal(t, "closed", lacking.SubHealth.Snapshot(now).State, "not offering is not failing")
	assert.Zero(t, lacking.SubHealth.Snapshot(now).RecentFailures)

	r := serveRecorded(t, chatRequest(t, protocols.KindMessagesCountTokens, body), lacking, testUpstream(t, "offers", counted, routing.Timeouts{}))
	require.Nil(t, r.err)
	assert.Equal(t, "offers", r.out.Served.Candidate.Name)
	assert.JSONEq(t, `{"input_tokens":12}`, r.rec.Body.String())
}

func TestSubOperationFailuresDoNotMoveGenerationHealth(t *testing.T) {
	failing := testUpstream(t, "a", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}, routing.Timeouts{})
	for range 10 {
		serveRecorded(t, chatRequest(t, protocols.KindResponsesInputTokens, `{"model":"svc","input":"x"}`), failing)
	}
	now := time.Now()
	assert.NotEqual(t, "closed", failing.SubHealth.Snapshot(now).State, "the sub-operation's own circuit opens")
	assert.Equal(t, "closed", failing.Health.Snapshot(now).State, "generation is judged on its own")
}

func TestErrorBodiesAreScrubbed(t *testing.T) {
	up := testUpstream(t, "a", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Anthropic-Organization-Id", orgUUID)
		w.Header().Set("Openai-Project", "proj_Zz9Qq8Ww7Ee6")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":{"message":"model ` + hiddenModel + ` at ` + r.Host + ` for key ` + hiddenCred +
			` in organization ` + orgUUID + ` and project proj_Zz9Qq8Ww7Ee6 rejected this"}}`))
	}, routing.Timeouts{})
	r := serveRecorded(t, chatRequest(t, protocols.KindChat, `{"model":"svc","messages":[]}`), up)
	require.Nil(t, r.err)
	assert.Equal(t, http.StatusBadRequest, r.rec.Code)
	body := r.rec.Body.String()
	for _, secret := range []string{hiddenModel, up.host, hiddenCred, orgUUID, "proj_Zz9Qq8Ww7Ee6"} {
		assert.NotContains(t, body, secret)
	}
	assert.Contains(t, body, "model svc at [redacted]")
	assert.Empty(t, r.rec.Header().Get("Anthropic-Organization-Id"))
}

func TestAnswersAreScrubbedOfTheCandidatesSecrets(t *testing.T) {
	up := testUpstream(t, "a", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Openai-Organization", orgUUID)
		_, _ = w.Write([]byte(`{"id":"x","model":"` + hiddenModel + `","system_fingerprint":"` + orgUUID + `@` + r.Host + `","choices":[]}`))
	}, routing.Timeouts{})
	r := serveRecorded(t, chatRequest(t, protocols.KindChat, `{"model":"svc","messages":[]}`), up)
	require.Nil(t, r.err)
	assert.JSONEq(t, `{"id":"x","model":"svc","system_fingerprint":"[redacted]@[redacted]","choices":[]}`, r.rec.Body.String())
	assert.Equal(t, strconv.Itoa(r.rec.Body.Len()), r.rec.Header().Get("Content-Length"))
}

func TestKeepAliveCommentsBeforeTheFirstEvent(t *testing.T) {
	stream := ": keep-alive\n\n: keep-alive\n\n" + chatStream(hiddenModel)
	r := serveRecorded(t, chatRequest(t, protocols.KindChat, streamedChat), testUpstream(t, "a", sseHandler(stream, false), routing.Timeouts{}))
	require.Nil(t, r.err)
	assert.True(t, strings.HasPrefix(r.rec.Body.String(), ": keep-alive\n\n: keep-alive\n\ndata: "), "held comments are sent with the first event")

	inBand := ": from the failed attempt\n\ndata: {\"error\":{\"message\":\"overloaded\"}}\n\n"
	r = serveRecorded(t, chatRequest(t, protocols.KindChat, streamedChat),
		testUpstream(t, "erring", sseHandler(inBand, false), routing.Timeouts{}),
		testUpstream(t, "good", sseHandler(chatStream(hiddenModel), false), routing.Timeouts{}))
	require.Nil(t, r.err)
	assert.Equal(t, routing.ReasonInBand, r.out.Attempts[0].Reason)
	assert.NotContains(t, r.rec.Body.String(), "failed attempt", "a failed attempt's comments are dropped with it")
}

func TestFailureAfterTheFirstByteCountsAgainstTheCandidate(t *testing.T) {
	up := testUpstream(t, "cut", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n"))
		w.(http.Flusher).Flush()
		// Hijack and close: the stream breaks without its end.
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}, routing.Timeouts{})
	r := serveRecorded(t, chatRequest(t, protocols.KindChat, streamedChat), up)
	require.Nil(t, r.err)
	require.Error(t, r.out.StreamError)
	assert.Contains(t, r.rec.Body.String(), "interrupted")
	snap := up.Health.Snapshot(time.Now())
	assert.Equal(t, 1, snap.RecentFailures)
	assert.Equal(t, string(routing.ReasonBrokenBody), snap.LastFailure)
}

func TestIdleLimitWhileReadingAJSONAnswer(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	stalling := testUpstream(t, "stalling", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "100")
		_, _ = w.Write([]byte(`{"id":"x",`))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}, routing.Timeouts{Idle: 100 * time.Millisecond})
	good := testUpstream(t, "good", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"y","model":"m"}`))
	}, routing.Timeouts{})
	req := chatRequest(t, protocols.KindChat, `{"model":"svc","messages":[]}`)
	req.FailoverAfterTimeout = true
	r := serveRecorded(t, req, stalling, good)
	require.Nil(t, r.err)
	assert.Equal(t, "good", r.out.Served.Candidate.Name)
	assert.Equal(t, routing.ReasonTimeout, r.out.Attempts[0].Reason)
}

func TestErrorBodyOverTheLimitFailsOver(t *testing.T) {
	huge := testUpstream(t, "huge", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write(bytes.Repeat([]byte("x"), MaxErrorBody+10))
	}, routing.Timeouts{})
	r := serveRecorded(t, chatRequest(t, protocols.KindChat, `{"model":"svc","messages":[]}`), huge)
	require.NotNil(t, r.err, "%+v %d", r.out.Attempts, r.rec.Body.Len())
	assert.Equal(t, routing.ReasonBadResponse, r.out.Attempts[0].Reason)
}

// goneWriter is a client that leaves as soon as it has read a chunk with finish_reason.
type goneWriter struct {
	*httptest.ResponseRecorder
	mu    sync.Mutex
	leave context.CancelFunc
	gone  bool
}

func (g *goneWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gone {
		return 0, errors.New("client closed the connection")
	}
	n, err := g.ResponseRecorder.Write(p)
	if bytes.Contains(p, []byte(`"finish_reason":"stop"`)) {
		g.gone = true
		g.leave()
	}
	return n, err
}

func TestAClientThatLeavesEarlyIsBilledFromTheUpstreamsUsage(t *testing.T) {
	upstream := func(withUsage bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			parts := strings.SplitAfter(chatStream(hiddenModel), "\n\n")
			_, _ = w.Write([]byte(parts[0] + parts[1]))
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond) // the usage chunk comes after finish_reason
			if withUsage {
				_, _ = w.Write([]byte(parts[2]))
			}
			_, _ = w.Write([]byte(parts[3]))
		}
	}
	for _, withUsage := range []bool{true, false} {
		t.Run("usage sent: "+strconv.FormatBool(withUsage), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w := &goneWriter{ResponseRecorder: httptest.NewRecorder(), leave: cancel}
			req := chatRequest(t, protocols.KindChat, streamedChat)
			var final *Outcome
			req.Finalize = func(o *Outcome) { c := *o; final = &c }
			out, apiErr := Serve(ctx, w, req, []*Upstream{testUpstream(t, "a", upstream(withUsage), routing.Timeouts{})})
			require.Nil(t, apiErr)
			require.NotNil(t, final, "an answer the client saw is always recorded")
			assert.True(t, out.ClientGone)
			if withUsage {
				assert.Equal(t, protocols.Usage{Input: 7, Output: 1}, final.Obs.Usage,
					"the gateway reads on after the client left and bills real counts")
			} else {
				assert.False(t, final.Obs.UsageReported)
			}
			assert.Nil(t, out.StreamError, "a departed client is not the candidate's failure")
		})
	}
}

// The usage record exists before the bytes that end an answer, on every way one ends.
func TestTheRecordPrecedesTheLastBytesOnEveryEnding(t *testing.T) {
	messages := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"" + hiddenModel + "\",\"usage\":{\"input_tokens\":5}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":1}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	responses := "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"model\":\"" + hiddenModel + "\"}}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"delta\":\"Hi\"}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":{\"model\":\"" + hiddenModel + "\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n"
	cases := []struct {
		name     string
		kind     protocols.Kind
		body     string
		handler  http.HandlerFunc
		lastSeen string // must not be in what the client had when the record was made
	}{
		{"messages, message_stop", protocols.KindMessages, `{"model":"svc","stream":true,"max_tokens":9,"messages":[]}`, sseHandler(messages, true), "message_stop"},
		{"responses, response.completed", protocols.KindResponses, `{"model":"svc","stream":true,"input":"x"}`, sseHandler(responses, false), "response.completed"},
		{"chat cut after the first event", protocols.KindChat, streamedChat, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte(strings.SplitAfter(chatStream("m"), "\n\n")[0]))
			w.(http.Flusher).Flush()
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
			}
		}, "interrupted"},
		{"chat stalled past the idle limit", protocols.KindChat, streamedChat, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte(strings.SplitAfter(chatStream("m"), "\n\n")[0]))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}, "stalled"},
		{"a JSON answer", protocols.KindChat, `{"model":"svc","messages":[]}`, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":"x","model":"m","choices":[]}`))
		}, `"id"`},
		{"an error body", protocols.KindChat, `{"model":"svc","messages":[]}`, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = w.Write([]byte(`{"error":{"message":"bad"}}`))
		}, "bad"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := testUpstream(t, "a", tc.handler, routing.Timeouts{Idle: 200 * time.Millisecond})
			r := serveRecorded(t, chatRequest(t, tc.kind, tc.body), up)
			require.Nil(t, r.err)
			assert.Equal(t, 1, r.finalized, "exactly one record per answer")
			assert.Contains(t, r.rec.Body.String(), tc.lastSeen, "the client got the end")
			assert.NotContains(t, r.atFinalize, tc.lastSeen, "the record was made before the end was written")
		})
	}
}

func TestFirstByteLimitFailsOverASilentStream(t *testing.T) {
	silent := testUpstream(t, "silent", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.(http.Flusher).Flush() // headers, then nothing
		<-r.Context().Done()
	}, routing.Timeouts{FirstByte: 150 * time.Millisecond})
	req := chatRequest(t, protocols.KindChat, streamedChat)
	req.FailoverAfterTimeout = true
	r := serveRecorded(t, req, silent,
		testUpstream(t, "good", sseHandler(chatStream(hiddenModel), false), routing.Timeouts{}))
	require.Nil(t, r.err)
	assert.Equal(t, "good", r.out.Served.Candidate.Name)
	assert.Equal(t, routing.ReasonTimeout, r.out.Attempts[0].Reason)
	assert.NotContains(t, r.rec.Body.String(), hiddenModel)
}

func TestJSONAnswerOverTheLimitFailsOver(t *testing.T) {
	huge := testUpstream(t, "huge", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"x":"`))
		chunk := bytes.Repeat([]byte("a"), 1<<20)
		for range MaxJSONBody>>20 + 1 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		_, _ = w.Write([]byte(`"}`))
	}, routing.Timeouts{})
	r := serveRecorded(t, chatRequest(t, protocols.KindChat, `{"model":"svc","messages":[]}`), huge)
	require.NotNil(t, r.err)
	assert.Equal(t, routing.ReasonBadResponse, r.out.Attempts[0].Reason)
	assert.Zero(t, r.rec.Body.Len())
}

// An upstream event that is not one JSON object cannot be spliced or scrubbed as the
// shape would: it is the candidate's failure and never reaches the client as it came.
func TestUnreadableEventsNeverReachTheClient(t *testing.T) {
	first := "data: {\"id\":\"c1\",\"model\":\"" + hiddenModel + "\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n"
	for name, bad := range map[string]string{
		"a doubled comma":  "data: {\"id\":\"c1\",,\"model\":\"" + hiddenModel + "\",\"choices\":[]}\n\n",
		"text, not JSON":   "data: served by " + hiddenModel + "\n\n",
		"a JSON array":     "data: [\"" + hiddenModel + "\"]\n\n",
		"an unclosed tail": "data: {\"model\":\"" + hiddenModel + "\"",
	} {
		t.Run(name+": first event fails over", func(t *testing.T) {
			r := serveRecorded(t, chatRequest(t, protocols.KindChat, streamedChat),
				testUpstream(t, "bad", sseHandler(bad+chatStream(hiddenModel), false), routing.Timeouts{}),
				testUpstream(t, "good", sseHandler(chatStream(hiddenModel), false), routing.Timeouts{}))
			require.Nil(t, r.err)
			assert.Equal(t, "good", r.out.Served.Candidate.Name)
			assert.Equal(t, routing.ReasonBadResponse, r.out.Attempts[0].Reason)
			assert.NotContains(t, r.rec.Body.String(), hiddenModel)
		})
		t.Run(name+": a later event ends the stream with the native error", func(t *testing.T) {
			up := testUpstream(t, "bad", sseHandler(first+bad+chatStream(hiddenModel), false), routing.Timeouts{})
			r := serveRecorded(t, chatRequest(t, protocols.KindChat, streamedChat), up)
			require.Nil(t, r.err)
			body := r.rec.Body.String()
			assert.NotContains(t, body, hiddenModel, "the unreadable event reached the client")
			assert.True(t, strings.HasPrefix(body, strings.Replace(first, hiddenModel, "svc", 1)))
			assert.Contains(t, body, `"error"`)
			assert.NotContains(t, body, "[DONE]", "nothing after the unreadable event is relayed")
			assert.ErrorIs(t, r.out.StreamError, errUnreadableEvent)
			assert.Equal(t, 1, r.finalized)
		})
	}
}
