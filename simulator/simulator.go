// Package simulator is a fake upstream LLM provider: a plain net/http handler that answers the
// three native generation shapes (OpenAI Chat Completions, OpenAI Responses, Anthropic Messages)
// as plain JSON and as SSE streams, plus the token-counting and compaction side endpoints and
// the model list (GET /v1/models: OpenAI's shape, or Anthropic's when the request carries
// anthropic-version; the credential is checked as on the family's other paths).
// The example config, the integration tests and the benchmarks point Switchyard at it.
// Amazon Bedrock's InvokeModel paths (…/model/{modelId}/invoke and
// …/invoke-with-response-stream) are answered as Bedrock answers them, SigV4 checked: see
// bedrock.go.
//
// Every successful generation answers [ReplyText]. Behaviours that tests need (errors, rate
// limits, slow or broken streams, tool calls) are switched on by the model name the request
// sends: the name is split on "+" and each part that is one of the tokens below turns its
// behaviour on; other parts are ignored, so "sim-basic" and "gpt-upstream-x+fail-503" both work.
// The path may carry tokens too: the part of the path before /v1/… is split on "/" and "+"
// the same way, so a base URL such as http://sim/down+fail-503+for-60s/v1 makes every request
// to it fail, the model list included (which has no model name). A request gets the tokens of
// both.
//
//	fail-NNN              status NNN (400-599) in the family's native error envelope
//	rate-limit            429 with retry-after: 2 and retry-after-ms: 2000
//	retry-after-<dur>     fail-NNN and rate-limit answers carry retry-after (<dur> in whole
//	                      seconds, rounded up) and retry-after-ms (<dur> in milliseconds)
//	no-retry-after        no retry-after or retry-after-ms on any answer (wins over the above)
//	context-length        400 as the vendors word a prompt too long for the context window
//	                      (OpenAI: code context_length_exceeded, param messages or input;
//	                      Anthropic: "prompt is too long: N tokens > 200000 maximum")
//	content-policy        400 as a content-policy refusal (OpenAI: code
//	                      content_policy_violation; Anthropic: a message naming the Usage Policy)
//	slow-headers-<dur>    wait <dur> (a Go duration) before sending anything
//	silent                read the request, then send nothing (not even a status line) until
//	                      the client leaves
//	slow-first-event-<dur> streams: send the status and headers (and comments) at once, then
//	                      wait <dur> before the first event; other answers: as slow-headers
//	drip-<dur>            streams: wait <dur> between events (the first event goes at once)
//	stall                 streams: send the first event, then hold until the client leaves
//	cut                   streams: send 3 events and abort the connection;
//	                      JSON: send half the body and abort
//	malformed-event       streams of more than one event: after the first event, one whose data
//	                      is not JSON and names the model ({"id":"x…",,"model":"<name>"}, with
//	                      the next event's name), then the rest of the stream
//	inband-error          streams: 200 + an error as the first (and only) event; JSON: 500
//	tool-call             answer with a call of the request's first function tool, unless the
//	                      conversation already ends with a tool result
//
// fail-NNN, rate-limit, silent, slow-*, reset and the broken answers below apply to the model
// list too; context-length and content-policy apply to every POST path.
//
// Schedules make the faults of a name transient. They count per simulator and per name (the
// full model name, or the path prefix for tokens in the path; at most 1024 names are
// remembered, the oldest forgotten first, and a forgotten name starts over):
//
//	first-<K>             the faults apply to the first K requests carrying this name (K ≥ 0),
//	                      later ones are answered as if the faults were absent
//	for-<dur>             the faults apply from the first request carrying this name until
//	                      <dur> has passed, then no more
//
// With both, the faults apply while both allow them. The faults a schedule switches off are
// every token except tool-call, account-headers, no-subops(-405), comments, tail-at-once,
// no-terminator, no-done and no-usage, which describe how a working provider answers. So
// "up+fail-500+first-1" answers 500 once and then normally, and "up+rate-limit+first-2+for-10s"
// answers 429 to at most the first two requests of its first ten seconds.
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
//	no-done               chat streams: everything (with the usage chunk when it is asked
//	                      for) but `data: [DONE]`, then a clean end; no effect on Responses
//	                      and Messages streams
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
	"cmp"
	"crypto/rsa"
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
	// BedrockAccessKeyID and BedrockSecretKey, when set, are the AWS credentials whose
	// SigV4 signature (service "bedrock") the Bedrock paths require; those paths also take
	// `Authorization: Bearer <APIKey>` as a Bedrock API key (see bedrock.go).
	BedrockAccessKeyID string
	BedrockSecretKey   string
	// Observe, when set, is called with every request and its body before it is answered (tests use it).
	Observe func(r *http.Request, body []byte)
	// VertexPublicKey verifies the service-account assertions that POST /token exchanges
	// for access tokens to Vertex's paths (see vertex.go). Nil: no assertion is accepted.
	VertexPublicKey *rsa.PublicKey
}

// New returns the simulator handler.
func New(cfg Config) http.Handler {
	return &server{cfg: cfg, schedules: newSchedules(), vertex: newVertexState(cfg.VertexPublicKey)}
}

// maxBody bounds a request body (the Anthropic Messages limit).
const maxBody = 32 << 20

type server struct {
	cfg       Config
	schedules *schedules
	vertex    *vertexState
}

// family is the API family a path belongs to: it picks the error envelope, the auth rule and
// the request-id header.
type family int

const (
	familyOpenAI    family = iota // Family A: OpenAI shapes
	familyAnthropic               // Family B: Anthropic shapes
	familyBedrock                 // Anthropic shapes on Amazon Bedrock's InvokeModel (bedrock.go)
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
	epModels
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
	{"/v1/models", epModels},
}

// route finds the endpoint of path and the prefix before its suffix.
func route(path string) (endpoint, string) {
	for _, rt := range routes {
		if prefix, ok := strings.CutSuffix(path, rt.suffix); ok {
			return rt.ep, prefix
		}
	}
	return epUnknown, ""
}

// family is the family of a request to ep: the path decides, except on the models list,
// which both families share and where Anthropic clients always send anthropic-version.
func (ep endpoint) family(r *http.Request) family {
	if ep == epMessages || ep == epCountTokens || (ep == epModels && r.Header.Get("anthropic-version") != "") {
		return familyAnthropic
	}
	return familyOpenAI
}

func (ep endpoint) method() string {
	if ep == epModels {
		return http.MethodGet
	}
	return http.MethodPost
}

func (ep endpoint) generates() bool { return ep == epChat || ep == epResponses || ep == epMessages }

// call is one request being answered.
type call struct {
	w     http.ResponseWriter
	r     *http.Request
	fam   family
	reqID string
	body  []byte
	model string
	beh   behaviours
	// stream is set when the path, not the body, asks for a stream (Bedrock).
	stream bool
	// idTag is the channel's tag in Claude's message and tool ids ("bdrk", "vrtx"), as
	// Bedrock and Vertex write them.
	idTag string
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if prefix, model, action, ok := bedrockPath(r.URL); ok {
		s.serveBedrock(w, r, prefix, model, action)
		return
	}
	if s.serveVertex(w, r) {
		return
	}
	ep, prefix := route(r.URL.Path)
	c := &call{w: w, r: r, fam: ep.family(r), reqID: newID("req_")}
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
	case r.Method != ep.method():
		w.Header().Set("Allow", ep.method())
		c.writeError(apiError{status: http.StatusMethodNotAllowed,
			message: fmt.Sprintf("Method %s is not allowed on %s; use %s", r.Method, r.URL.Path, ep.method())})
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

	if ep != epModels {
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
	}
	parts := s.schedules.active(pathKey(prefix), pathParts(prefix))
	if c.model != "" {
		parts = append(parts, s.schedules.active(modelKey(c.model), strings.Split(c.model, "+"))...)
	}
	c.beh = parseParts(parts)
	s.answer(c, ep)
}

// answer applies the behaviours to a request that passed the checks, then answers it.
func (s *server) answer(c *call, ep endpoint) {
	r := c.r
	streaming := c.stream || (ep.generates() && gjson.GetBytes(c.body, "stream").Bool())
	if !c.beh.waitHeaders(r.Context(), streaming) {
		return
	}
	if c.beh.silent {
		<-r.Context().Done()
		panic(http.ErrAbortHandler) // never a status line, even to a connection that is gone
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
		if c.beh.retryAfter > 0 && !c.beh.noRetryAfter {
			c.setRetryAfter(c.beh.retryAfter)
		}
		c.writeError(apiError{status: c.beh.failStatus, message: fmt.Sprintf(
			"simulated upstream failure (HTTP %d) for model %s", c.beh.failStatus, c.model)})
		return
	}
	if c.beh.rateLimit {
		when := "later"
		if !c.beh.noRetryAfter {
			wait := cmp.Or(c.beh.retryAfter, defaultRetryAfter)
			c.setRetryAfter(wait)
			when = "in " + wait.String()
		}
		c.writeError(apiError{status: http.StatusTooManyRequests, code: "rate_limit_exceeded", message: fmt.Sprintf(
			"Rate limit reached for model %s (simulated). Please try again %s.", c.model, when)})
		return
	}
	if ep != epModels && c.beh.contextLength {
		c.writeError(c.contextLengthError(ep))
		return
	}
	if ep != epModels && c.beh.contentPolicy {
		c.writeError(c.contentPolicyError())
		return
	}
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
	case epModels:
		c.models()
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
