package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/switchyard-gw/switchyard/channel"
	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// fakeChannel puts the model in the path, drops it from the body, authorises with a
// header of its own, and answers its errors as {"fault":…} with status 599, which its
// Response turns back into a 503.
type fakeChannel struct {
	endpoint *url.URL
	offers   bool
	broken   bool // no credential to be had
	balks    bool // cannot carry this body
	account  string
	names    []string
}

func (f *fakeChannel) Name() string       { return "fake" }
func (f *fakeChannel) Endpoint() *url.URL { return f.endpoint }
func (f *fakeChannel) Offers(op protocols.Operation) bool {
	return f.offers || op.Kind == protocols.KindChat
}
func (f *fakeChannel) Secrets() []string { return []string{f.account} }
func (f *fakeChannel) Names() []string   { return f.names }

func (f *fakeChannel) NewRequest(ctx context.Context, op protocols.Operation, body []byte, stream bool, header http.Header) (*http.Request, error) {
	if f.broken {
		return nil, fmt.Errorf("fake: %w", channel.ErrCredential)
	}
	if f.balks {
		return nil, errors.New("fake: the body cannot be carried")
	}
	model := gjson.GetBytes(body, "model").Str
	body, _ = sjson.DeleteBytes(body, "model")
	verb := "invoke"
	if stream {
		verb = "stream"
	}
	u := *f.endpoint
	u.Path += "/models/" + model + "/" + verb
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	r.Header = header
	r.Header.Set("X-Fake-Auth", "signed:"+f.account)
	return r, nil
}

func (f *fakeChannel) Response(op protocols.Operation, resp *http.Response) {
	if resp.StatusCode == 599 {
		resp.StatusCode = http.StatusServiceUnavailable
	}
}

type seenByChannel struct {
	mu      sync.Mutex
	path    string
	query   string
	body    []byte
	headers http.Header
}

func channelUpstream(t *testing.T, ch *fakeChannel, answer http.HandlerFunc) (*Upstream, *seenByChannel) {
	t.Helper()
	seen := &seenByChannel{}
	srv := testUpstream(t, "x", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen.mu.Lock()
		seen.path, seen.query, seen.body, seen.headers = r.URL.Path, r.URL.RawQuery, b, r.Header.Clone()
		seen.mu.Unlock()
		answer(w, r)
	}, routing.Timeouts{})
	u, err := url.Parse("http://" + srv.host + "/fake")
	require.NoError(t, err)
	ch.endpoint = u
	up := NewUpstream("svc", &routing.Candidate{Name: "through-fake", Protocol: protocols.FamilyA, BaseURL: u,
		UpstreamModel: hiddenModel}, Options{Channel: ch})
	t.Cleanup(up.Close)
	return up, seen
}

func TestAChannelShapesTheRequestAndTheClientSeesTheFamilysAnswer(t *testing.T) {
	ch := &fakeChannel{account: "acct-123456789"}
	up, seen := channelUpstream(t, ch, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Request-Id", "req_fake_0123456789")
		w.Header().Set("X-Request-Id", "fake-0123456789")
		_, _ = w.Write([]byte(strings.Replace(chatAnswer, `"up-model"`, `"`+hiddenModel+`"`, 1)))
	})
	req := chatRequest(t, protocols.KindChat, plainChat)
	req.RawQuery = "beta=true"
	r := serveRecorded(t, req, up)
	require.Nil(t, r.err)
	assert.Equal(t, 200, r.rec.Code)
	assert.Equal(t, "svc", gjson.Get(r.rec.Body.String(), "model").Str, "the client sees its own model")
	assert.Empty(t, seen.query, "the client's query is not the channel's: its signature covers the URL it built")
	assert.Empty(t, r.rec.Header().Get("Request-Id"), "a provider's request id would tell the channel apart")
	assert.Empty(t, r.rec.Header().Get("X-Request-Id"))
	assert.Equal(t, "/fake/models/"+hiddenModel+"/invoke", seen.path, "the channel put the model in the path")
	assert.False(t, gjson.GetBytes(seen.body, "model").Exists(), "and took it out of the body")
	assert.Equal(t, "signed:acct-123456789", seen.headers.Get("X-Fake-Auth"))
	assert.Empty(t, seen.headers.Get("Authorization"), "no family credential beside the channel's own")
	assert.Equal(t, "api", testUpstream(t, "plain", nil, routing.Timeouts{}).ChannelName())
	assert.Equal(t, "fake", up.ChannelName())
}

func TestAChannelsErrorsAreTurnedBackBeforeTheyAreRead(t *testing.T) {
	ch := &fakeChannel{account: "acct-123456789"}
	up, _ := channelUpstream(t, ch, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(599)
	})
	r := serveRecorded(t, chatRequest(t, protocols.KindChat, plainChat), up)
	require.Len(t, r.out.Attempts, 1)
	assert.Equal(t, 503, r.out.Attempts[0].Status, "599 became 503 before the relay classified it")
	assert.Equal(t, routing.ReasonStatus, r.out.Attempts[0].Reason)
}

func TestAnOperationAChannelLacksMovesOnWithoutBlame(t *testing.T) {
	ch := &fakeChannel{account: "acct-123456789"}
	up, _ := channelUpstream(t, ch, func(w http.ResponseWriter, r *http.Request) {})
	other := testUpstream(t, "plain", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"resp_1","object":"response","model":"m","output":[],"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}`))
	}, routing.Timeouts{})
	r := serveRecorded(t, chatRequest(t, protocols.KindResponses, `{"model":"svc","input":"hi"}`), up, other)
	require.Nil(t, r.err)
	assert.Equal(t, "plain", r.out.Served.Candidate.Name)
	assert.Equal(t, routing.ReasonNotOffered, r.out.Attempts[0].Reason)
	assert.Zero(t, up.Health.Snapshot(time.Now()).RecentFailures)
}

func TestABodyAChannelCannotCarryDoesNotMoveItsHealth(t *testing.T) {
	ch := &fakeChannel{account: "acct-123456789", balks: true}
	up, _ := channelUpstream(t, ch, func(w http.ResponseWriter, r *http.Request) {})
	r := serveRecorded(t, chatRequest(t, protocols.KindChat, plainChat), up)
	require.NotNil(t, r.err)
	assert.True(t, r.out.Attempts[0].Blameless)
	assert.Zero(t, up.Health.Snapshot(time.Now()).RecentFailures, "what a client sent cannot move a candidate's health")
}

func TestAChannelWithoutItsCredentialIsTheCandidatesFailure(t *testing.T) {
	ch := &fakeChannel{account: "acct-123456789", broken: true}
	up, _ := channelUpstream(t, ch, func(w http.ResponseWriter, r *http.Request) {})
	r := serveRecorded(t, chatRequest(t, protocols.KindChat, plainChat), up)
	require.NotNil(t, r.err)
	assert.Equal(t, routing.ReasonConnect, r.out.Attempts[0].Reason)
	assert.Equal(t, 1, up.Health.Snapshot(time.Now()).RecentFailures)
}

// The channel's copies of a body come out of the gateway's body ceiling while they are
// held, and go back once they are sent: a body with no room for them gets the ceiling's
// 503, and the upstream is not called.
func TestAChannelsCopiesOfTheBodyComeOutOfTheCeiling(t *testing.T) {
	body := `{"model":"svc","messages":[{"role":"user","content":"` + strings.Repeat("x", 4000) + `"}]}`
	op := protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindChat}
	read := func(mem *BodyMemory) Body {
		b, apiErr := ReadBody(op, strings.NewReader(body), int64(len(body)), BodyLimits{Max: 1 << 20, Memory: mem}, nil)
		require.Nil(t, apiErr)
		return b
	}
	probe := NewBodyMemory(1<<30, 0)
	read(probe)
	own := probe.Held() // what the body itself holds

	for _, tc := range []struct {
		name   string
		room   int64
		served bool
	}{
		{"room for one copy, not for both", own + int64(len(body)) + 1000, false},
		{"room for them", own + 2*int64(len(body)) + 4096, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := &fakeChannel{account: "acct-123456789"}
			calls := 0
			up, _ := channelUpstream(t, ch, func(w http.ResponseWriter, r *http.Request) {
				calls++
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(chatAnswer))
			})
			mem := NewBodyMemory(tc.room, 0)
			req := &Request{Op: op, ServiceModel: "svc", Body: read(mem), Header: http.Header{}}
			r := serveRecorded(t, req, up)
			if tc.served {
				require.Nil(t, r.err)
				assert.Equal(t, 1, calls)
			} else {
				require.NotNil(t, r.err)
				assert.Equal(t, protocols.CodeBodyMemoryFull, r.err.Code)
				assert.Zero(t, calls, "the upstream is not called")
				assert.Zero(t, up.Health.Snapshot(time.Now()).RecentFailures)
			}
			assert.Equal(t, own, mem.Held(), "the copies' bytes went back; the body's own stay until it is released")
		})
	}
}

// A channel's names (a region, a deployment called like a model) are masked where the
// provider writes them, in errors, and left alone in what the model generated: an answer
// about "us-east-1" keeps its words.
func TestAChannelsNamesAreMaskedInErrorsButNotInGeneratedText(t *testing.T) {
	ch := &fakeChannel{account: "acct-123456789", names: []string{"us-east-1", "gpt-prod"}}
	fail := true
	up, _ := channelUpstream(t, ch, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if fail {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"message":"deployment gpt-prod in us-east-1 refused it","type":"invalid_request_error"}}`))
			return
		}
		answer := strings.Replace(chatAnswer, `"up-model"`, `"`+hiddenModel+`"`, 1)
		_, _ = w.Write([]byte(strings.Replace(answer, `"content":"hi"`, `"content":"us-east-1 and gpt-prod are fine names"`, 1)))
	})
	r := serveRecorded(t, chatRequest(t, protocols.KindChat, plainChat), up)
	assert.Equal(t, 400, r.rec.Code)
	assert.NotContains(t, r.rec.Body.String(), "us-east-1")
	assert.NotContains(t, r.rec.Body.String(), "gpt-prod")

	fail = false
	r = serveRecorded(t, chatRequest(t, protocols.KindChat, plainChat), up)
	require.Nil(t, r.err)
	assert.Contains(t, gjson.Get(r.rec.Body.String(), "choices.0.message.content").Str, "us-east-1 and gpt-prod", "generated text is not searched for names")
}
