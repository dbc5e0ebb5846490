package simulator

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// AzureConfig configures the simulated Azure endpoint.
type AzureConfig struct {
	// APIKey, when non-empty, is the resource key it requires: as `api-key` under
	// /openai, as `x-api-key` under /anthropic. A wrong or missing key gets 401.
	APIKey string
	// Observe, when set, is called with every request and its body before it is answered.
	Observe func(r *http.Request, body []byte)
}

// NewAzure returns a handler that acts as one Azure resource, answering as the
// simulator does (same behaviour tokens) on Azure's paths:
//
//	POST /openai/deployments/{deployment}/chat/completions?api-version=…  (the deployment
//	     is the model: its name selects the behaviours; api-version is required)
//	POST /openai/v1/chat/completions, /openai/v1/responses  (the body's model)
//	POST /anthropic/v1/messages  (Claude in Foundry: Anthropic's shapes, x-api-key)
//
// Chat answers carry Azure's content-filter verdicts: prompt_filter_results and each
// choice's content_filter_results; a chat stream starts with a verdict-only chunk
// (`choices: []`, empty id and model) and has an asynchronous-filter chunk (empty id
// and model, no delta) after the chunk that finishes. OpenAI-path errors take Azure's
// envelope ({"error":{"code":"<string>","message":…}}); a 429's says its wait in the
// message as Azure does ("Please retry after N seconds."); content-policy is Azure's
// 400 content_filter with its innererror. One more token:
//
//	retry-in-message      a 429 has no retry-after headers: its wait is only in the message
func NewAzure(cfg AzureConfig) http.Handler {
	return &azureServer{cfg: cfg, inner: New(Config{})}
}

type azureServer struct {
	cfg   AzureConfig
	inner http.Handler
}

// Azure's identifying headers, which a gateway must not pass on.
const (
	AzureRegion       = "Sweden Central"
	AzureModelSession = "d008-20240215231538"
)

func (s *azureServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if s.cfg.Observe != nil {
		s.cfg.Observe(r, body)
	}
	h := w.Header()
	h.Set("apim-request-id", newID("apim-"))
	h.Set("x-ms-region", AzureRegion)
	h.Set("azureml-model-session", AzureModelSession)
	h.Set("x-ratelimit-remaining-tokens", "149000")
	if err != nil {
		writeAzureError(w, http.StatusBadRequest, "400", "Could not read the request body")
		return
	}
	path, anthropic, deployment := "", false, ""
	switch p := r.URL.Path; {
	case p == "/openai/v1/chat/completions" || p == "/openai/v1/responses":
		path = strings.TrimPrefix(p, "/openai")
	case p == "/anthropic/v1/messages":
		path, anthropic = "/v1/messages", true
	case strings.HasPrefix(p, "/openai/deployments/") && strings.HasSuffix(p, "/chat/completions"):
		deployment = strings.TrimSuffix(strings.TrimPrefix(p, "/openai/deployments/"), "/chat/completions")
		if deployment == "" || strings.Contains(deployment, "/") {
			writeAzureError(w, http.StatusNotFound, "404", "Resource not found")
			return
		}
		path = "/v1/chat/completions"
	default:
		writeAzureError(w, http.StatusNotFound, "404", "Resource not found")
		return
	}
	if r.Method != http.MethodPost {
		writeAzureError(w, http.StatusMethodNotAllowed, "405", "Method not allowed")
		return
	}
	if !s.authorized(r, anthropic) {
		if anthropic {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`))
			return
		}
		writeAzureError(w, http.StatusUnauthorized, "401", "Access denied due to invalid subscription key or wrong API endpoint. "+
			"Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.")
		return
	}
	if deployment != "" {
		if r.URL.Query().Get("api-version") == "" {
			writeAzureError(w, http.StatusNotFound, "404", "Resource not found")
			return
		}
		if gjson.ValidBytes(body) {
			// The deployment chooses the model; the body's is ignored, as Azure does.
			body, _ = sjson.SetBytes(body, "model", deployment)
		}
	}
	in := r.Clone(r.Context())
	in.URL.Path, in.URL.RawPath, in.URL.RawQuery = path, "", ""
	in.Body, in.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	in.Header.Del("api-key")
	in.Header.Del("x-api-key")
	in.Header.Del("Authorization")
	aw := &azureWriter{w: w, anthropic: anthropic, chat: path == "/v1/chat/completions",
		retryInMessage: hasToken(gjson.GetBytes(body, "model").String(), "retry-in-message")}
	s.inner.ServeHTTP(aw, in)
	aw.finish()
}

func (s *azureServer) authorized(r *http.Request, anthropic bool) bool {
	if s.cfg.APIKey == "" {
		return true
	}
	if anthropic {
		return sameKey(r.Header.Get("x-api-key"), s.cfg.APIKey)
	}
	return sameKey(r.Header.Get("api-key"), s.cfg.APIKey)
}

func hasToken(model, token string) bool {
	for part := range strings.SplitSeq(model, "+") {
		if part == token {
			return true
		}
	}
	return false
}

// writeAzureError sends Azure's error envelope: a string code and a message, no type.
func writeAzureError(w http.ResponseWriter, status int, code, message string) {
	b := mustJSON(obj{{"error", obj{{"code", code}, {"message", message}}}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// Azure's verdicts, as it writes them.
const (
	azureVerdicts       = `{"hate":{"filtered":false,"severity":"safe"},"self_harm":{"filtered":false,"severity":"safe"},"sexual":{"filtered":false,"severity":"safe"},"violence":{"filtered":false,"severity":"safe"}}`
	azurePromptVerdicts = `[{"prompt_index":0,"content_filter_results":` + azureVerdicts + `}]`
	azurePromptChunk    = `{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":` + azurePromptVerdicts + `}`
	azureAsyncChunk     = `{"choices":[{"content_filter_offsets":{"check_offset":0,"start_offset":0,"end_offset":36},"content_filter_results":` + azureVerdicts + `,"finish_reason":null,"index":0}],"created":0,"id":"","model":"","object":""}`
)

// azureWriter turns the simulator's answer into Azure's as it is written: errors in
// Azure's envelope, verdicts in chat answers and streams.
type azureWriter struct {
	w              http.ResponseWriter
	anthropic      bool
	chat           bool
	retryInMessage bool

	status int
	mode   int    // how the body is treated, set at WriteHeader
	held   []byte // an error or JSON answer held to be rewritten, or a stream's incomplete event
}

const (
	passThrough = iota
	holdError
	holdJSON
	chatStream
)

func (a *azureWriter) Header() http.Header { return a.w.Header() }

func (a *azureWriter) WriteHeader(status int) {
	if a.status != 0 {
		return
	}
	a.status = status
	h := a.w.Header()
	for _, name := range []string{"openai-organization", "openai-project", "x-request-id"} {
		h.Del(name) // OpenAI's own account headers: Azure sends its own
	}
	ct := h.Get("Content-Type")
	switch {
	case status >= 400 && !a.anthropic:
		a.mode = holdError
		return
	case status == http.StatusOK && a.chat && strings.HasPrefix(ct, "application/json"):
		a.mode = holdJSON
		return
	case status == http.StatusOK && a.chat && strings.HasPrefix(ct, "text/event-stream"):
		a.mode = chatStream
		h.Del("Content-Length") // tail-at-once declares one; the verdicts change it
		a.w.WriteHeader(status)
		_, _ = a.w.Write([]byte("data: " + azurePromptChunk + "\n\n"))
		return
	}
	a.w.WriteHeader(status)
}

func (a *azureWriter) Write(p []byte) (int, error) {
	if a.status == 0 {
		a.WriteHeader(http.StatusOK)
	}
	switch a.mode {
	case holdError, holdJSON:
		a.held = append(a.held, p...)
		return len(p), nil
	case chatStream:
		a.held = append(a.held, p...)
		for {
			end := bytes.Index(a.held, []byte("\n\n"))
			if end < 0 {
				break
			}
			ev := a.held[:end+2]
			if _, err := a.w.Write(azureChunk(ev)); err != nil {
				return 0, err
			}
			a.held = a.held[end+2:]
		}
		return len(p), nil
	}
	return a.w.Write(p)
}

// Flush implements http.Flusher for the simulator's stream writes.
func (a *azureWriter) Flush() {
	if a.mode == holdError || a.mode == holdJSON {
		return
	}
	_ = http.NewResponseController(a.w).Flush()
}

// azureChunk adds Azure's verdicts to one event of a chat stream; after the chunk that
// finishes a choice it adds the asynchronous filter's chunk.
func azureChunk(ev []byte) []byte {
	data, ok := bytes.CutPrefix(ev, []byte("data: "))
	if !ok || !gjson.ValidBytes(bytes.TrimSpace(data)) {
		return ev
	}
	data = bytes.TrimSpace(data)
	finished := false
	for i, ch := range gjson.GetBytes(data, "choices").Array() {
		data, _ = sjson.SetRawBytes(data, "choices."+strconv.Itoa(i)+".content_filter_results", []byte(azureVerdicts))
		finished = finished || ch.Get("finish_reason").String() != ""
	}
	out := append(append([]byte("data: "), data...), "\n\n"...)
	if finished {
		out = append(out, "data: "+azureAsyncChunk+"\n\n"...)
	}
	return out
}

// finish sends what was held: an error in Azure's envelope, a JSON answer with its
// verdicts, the rest of a stream.
func (a *azureWriter) finish() {
	switch a.mode {
	case holdError:
		a.writeError()
	case holdJSON:
		b := a.held
		if gjson.ValidBytes(b) {
			b, _ = sjson.SetRawBytes(b, "prompt_filter_results", []byte(azurePromptVerdicts))
			for i := range gjson.GetBytes(b, "choices").Array() {
				b, _ = sjson.SetRawBytes(b, "choices."+strconv.Itoa(i)+".content_filter_results", []byte(azureVerdicts))
			}
		}
		a.w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		a.w.WriteHeader(a.status)
		_, _ = a.w.Write(b)
	case chatStream:
		_, _ = a.w.Write(a.held) // an unterminated last event
	}
}

func (a *azureWriter) writeError() {
	h := a.w.Header()
	e := gjson.GetBytes(a.held, "error")
	message, code := e.Get("message").String(), e.Get("code").String()
	status := a.status
	h.Del("Content-Length")
	switch {
	case status == http.StatusTooManyRequests:
		wait := h.Get("Retry-After")
		if a.retryInMessage {
			h.Del("Retry-After")
			h.Del("Retry-After-Ms")
		}
		if wait == "" {
			message = "Rate limit is exceeded. Try again later."
		} else {
			message = "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have " +
				"exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after " + wait +
				" seconds. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit."
		}
		writeAzureError(a.w, status, "429", message)
	case code == "content_policy_violation":
		b := mustJSON(obj{{"error", obj{
			{"message", "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. " +
				"Please modify your prompt and retry."},
			{"type", nil}, {"param", "prompt"}, {"code", "content_filter"}, {"status", 400},
			{"innererror", obj{{"code", "ResponsibleAIPolicyViolation"},
				{"content_filter_result", obj{{"hate", obj{{"filtered", true}, {"severity", "high"}}}}}}},
		}}})
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(b)))
		a.w.WriteHeader(status)
		_, _ = a.w.Write(b)
	default:
		if code == "" {
			code = strconv.Itoa(status)
		}
		if message == "" {
			message = http.StatusText(status)
		}
		writeAzureError(a.w, status, code, message)
	}
}
