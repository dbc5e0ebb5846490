// Package simulator is a fake upstream LLM provider: a plain net/http handler that answers the
// three native generation shapes (OpenAI Chat Completions, OpenAI Responses, Anthropic Messages)
// as plain JSON and as SSE streams, plus the token-counting and compaction side endpoints.
// The example config, the integration tests and the benchmarks point Switchyard at it.
//
// Every successful generation answers [ReplyText]. Behaviours that tests need (errors, rate
// limits, slow or broken streams, tool calls) are switched on by the model name the request
// sends: the name is split on "+" and each part that is one of the tokens below turns its
// behaviour on; other parts are ignored, so "sim-basic" and "gpt-upstream-x+fail-503" both work.
//
//	fail-NNN              status NNN (400-599) in the family's native error envelope
//	rate-limit            429 with retry-after: 2 and retry-after-ms: 2000
//	slow-headers-<dur>    wait <dur> (a Go duration) before sending anything
//	drip-<dur>            streams: wait <dur> between events (the first event goes at once)
//	stall                 streams: send the first event, then hold until the client leaves
//	cut                   streams: send 3 events and abort the connection;
//	                      JSON: send half the body and abort
//	inband-error          streams: 200 + an error as the first (and only) event; JSON: 500
//	tool-call             answer with a call of the request's first function tool, unless the
//	                      conversation already ends with a tool result
//
// Broken upstreams, for the gateway's failover and scrubbing:
//
//	html-200              200 with a text/html page that names the upstream model, the host
//	                      it was called on, the credential it got and its organisation
//	redirect-302          302 to a login page, with such a page as its body
//	bad-json              200 application/json whose (complete) body is not JSON
//	huge-json             JSON answers: a valid object of more than HugeJSONSize bytes,
//	                      streamed without a declared length
//	reset                 a TCP reset before any byte of the answer
//	account-headers       UUID-shaped organisation and project ids (AccountOrganization,
//	                      AccountProject) in the account headers, and every error message
//	                      also names the model, host, credential and those ids
//	no-subops             404 on count_tokens, input_tokens and compact (no-subops-405: 405)
//
// Stream framing and usage:
//
//	huge-first-event      streams: the first event is padded past HugeEventSize bytes
//	huge-event            streams: a normal first event, then one padded past HugeEventSize
//	comments              streams: two `: keep-alive` comment frames before the first event
//	no-terminator         streams: the last event ends with one newline, not a blank line
//	tail-at-once          streams: the body's length is declared; the first event is sent
//	                      and flushed, then all the others in one write, so the reader's last
//	                      read carries the final events and the end of the body together
//	usage-delay-<dur>     streams: wait <dur> before the event that carries the final usage
//	                      (chat: the usage chunk, or [DONE]; responses: response.completed;
//	                      messages: message_delta), after the answer's text has been sent
//	no-usage              no usage anywhere (chat: no usage chunk even when asked for;
//	                      responses: usage null; messages: no usage objects)
//
// # Token counts
//
// Usage is deterministic so tests can predict it. With tokens(n) = n/4 + 1:
//
//   - input tokens = tokens(len(request body in bytes)); cached tokens are always 0;
//   - output tokens for text = tokens(len(ReplyText)) = 10;
//   - output tokens for a tool call = tokens(len(tool name) + len(arguments JSON));
//   - reasoning/thinking, when requested, adds a fixed 16 tokens to the output tokens
//     (reported as reasoning_tokens / thinking_tokens);
//   - count_tokens and responses/input_tokens report the same input-token figure;
//     compaction reports tokens(len(encrypted_content)) output tokens.
package simulator

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"
)

// ReplyText is the assistant text every successful generation returns.
const ReplyText = "Hello from the Switchyard simulator."

// Config configures the simulator.
type Config struct {
	// APIKey, when non-empty, is the credential the simulator requires: Family A paths accept only
	// `Authorization: Bearer <APIKey>`; Family B paths accept `x-api-key: <APIKey>` or Bearer.
	// A wrong/missing key gets 401 in the family's native envelope.
	APIKey string
	// Observe, when set, is called with every request and its body before it is answered (tests use it).
	Observe func(r *http.Request, body []byte)
}

// New returns the simulator handler.
func New(cfg Config) http.Handler { return &server{cfg: cfg} }

// maxBody bounds a request body (the Anthropic Messages limit).
const maxBody = 32 << 20

type server struct{ cfg Config }

// family is the API family a path belongs to: it picks the error envelope, the auth rule and
// the request-id header.
type family int

const (
	familyOpenAI    family = iota // Family A: OpenAI shapes
	familyAnthropic               // Family B: Anthropic shapes
)

type endpoint int

const (
	epUnknown endpoint = iota
	epChat
	epResponses
	epInputTokens
	epCompact
	epMessages
	epCountTokens
)

// routes is matched by path suffix, longest suffixes first.
var routes = []struct {
	suffix string
	ep     endpoint
}{
	{"/v1/responses/input_tokens", epInputTokens},
	{"/v1/responses/compact", epCompact},
	{"/v1/messages/count_tokens", epCountTokens},
	{"/v1/chat/completions", epChat},
	{"/v1/responses", epResponses},
	{"/v1/messages", epMessages},
}

func route(path string) endpoint {
	for _, rt := range routes {
		if strings.HasSuffix(path, rt.suffix) {
			return rt.ep
		}
	}
	return epUnknown
}

func (ep endpoint) family() family {
	if ep == epMessages || ep == epCountTokens {
		return familyAnthropic
	}
	return familyOpenAI
}

// call is one request being answered.
type call struct {
	w     http.ResponseWriter
	r     *http.Request
	fam   family
	reqID string
	body  []byte
	model string
	beh   behaviours
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ep := route(r.URL.Path)
	c := &call{w: w, r: r, fam: ep.family(), reqID: newID("req_")}
	c.setCommonHeaders()

	body, readErr := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	c.body = body
	if s.cfg.Observe != nil {
		s.cfg.Observe(r, body)
	}

	switch {
	case ep == epUnknown:
		c.writeError(apiError{status: http.StatusNotFound,
			message: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path)})
		return
	case r.Method != http.MethodPost:
		w.Header().Set("Allow", http.MethodPost)
		c.writeError(apiError{status: http.StatusMethodNotAllowed,
			message: fmt.Sprintf("Method %s is not allowed on %s; use POST", r.Method, r.URL.Path)})
		return
	case readErr != nil:
		if _, tooBig := errors.AsType[*http.MaxBytesError](readErr); tooBig {
			c.writeError(apiError{status: http.StatusRequestEntityTooLarge, message: "Request body too large"})
		} else {
			c.writeError(apiError{status: http.StatusBadRequest, message: "Could not read the request body"})
		}
		return
	case !s.authorized(r, c.fam):
		c.writeError(apiError{status: http.StatusUnauthorized, code: "invalid_api_key",
			message: "Incorrect or missing API key provided (simulated upstream)."})
		return
	case ep == epMessages && r.Header.Get("anthropic-version") == "":
		c.writeError(apiError{status: http.StatusBadRequest,
			message: "anthropic-version: header is required"})
		return
	}

	if !json.Valid(body) || !gjson.ParseBytes(body).IsObject() {
		c.writeError(apiError{status: http.StatusBadRequest,
			message: "The request body is not a valid JSON object."})
		return
	}
	model := gjson.GetBytes(body, "model")
	if model.Type != gjson.String || model.Str == "" {
		c.writeError(apiError{status: http.StatusBadRequest, param: "model",
			message: "model: a non-empty string is required"})
		return
	}
	c.model = model.Str
	c.beh = parseBehaviours(c.model)

	if !c.beh.waitHeaders(r.Context()) {
		return
	}
	if c.beh.accountHeaders {
		c.setAccountHeaders()
	}
	if c.beh.reset {
		c.resetConnection()
		return
	}
	if c.beh.noSubops != 0 && ep.isSideEndpoint() {
		c.writeError(apiError{status: c.beh.noSubops,
			message: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path)})
		return
	}
	if c.beh.failStatus != 0 {
		c.writeError(apiError{status: c.beh.failStatus, message: fmt.Sprintf(
			"simulated upstream failure (HTTP %d) for model %s", c.beh.failStatus, c.model)})
		return
	}
	if c.beh.rateLimit {
		w.Header().Set("retry-after", "2")
		w.Header().Set("retry-after-ms", "2000")
		c.writeError(apiError{status: http.StatusTooManyRequests, code: "rate_limit_exceeded", message: fmt.Sprintf(
			"Rate limit reached for model %s (simulated). Please try again in 2s.", c.model)})
		return
	}
	streaming := (ep == epChat || ep == epResponses || ep == epMessages) &&
		gjson.GetBytes(body, "stream").Bool()
	if c.brokenAnswer(streaming) {
		return
	}
	if c.beh.inbandError {
		if streaming {
			c.writeInbandError(ep)
		} else {
			c.writeError(apiError{status: http.StatusInternalServerError, message: fmt.Sprintf(
				"simulated server error for model %s", c.model)})
		}
		return
	}

	switch ep {
	case epChat:
		c.chat(streaming)
	case epResponses:
		c.responses(streaming)
	case epMessages:
		c.messages(streaming)
	case epCountTokens:
		c.writeJSON(obj{{"input_tokens", c.inputTokens()}})
	case epInputTokens:
		c.writeJSON(obj{{"object", "response.input_tokens"}, {"input_tokens", c.inputTokens()}})
	case epCompact:
		c.compact()
	}
}

// authorized applies Config.APIKey: Family A takes only a Bearer token, Family B also x-api-key.
func (s *server) authorized(r *http.Request, fam family) bool {
	if s.cfg.APIKey == "" {
		return true
	}
	if token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && sameKey(token, s.cfg.APIKey) {
		return true
	}
	return fam == familyAnthropic && sameKey(r.Header.Get("x-api-key"), s.cfg.APIKey)
}

func sameKey(got, want string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// setCommonHeaders sets the headers every response carries: upstream identity and rate-limit
// headers a gateway must not leak to its clients, and the family's request id.
func (c *call) setCommonHeaders() {
	h := c.w.Header()
	h.Set("openai-organization", "org-simsecret42")
	h.Set("openai-project", "proj_simsecret42")
	h.Set("x-ratelimit-remaining-requests", "99")
	h.Set("anthropic-organization-id", "5im-0rg-5ecret")
	h.Set("anthropic-ratelimit-requests-remaining", "99")
	h.Set("set-cookie", "sim=1")
	if c.fam == familyAnthropic {
		h.Set("request-id", c.reqID)
	} else {
		h.Set("x-request-id", c.reqID)
	}
}

// tokens is the simulator's token rule for a piece of n bytes.
func tokens(n int) int { return n/4 + 1 }

// reasoningTokens is the fixed reasoning/thinking token count of a reasoning answer.
const reasoningTokens = 16

func (c *call) inputTokens() int { return tokens(len(c.body)) }
