package simulator

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/tidwall/gjson"
)

// Amazon Bedrock's InvokeModel API, for the gateway's bedrock channel. A path with
// /model/{modelId}/invoke or /model/{modelId}/invoke-with-response-stream (after any
// prefix, which carries tokens as on the other paths) is answered as Bedrock would:
//
//   - the request must be signed with SigV4 (service "bedrock") by
//     Config.BedrockAccessKeyID and Config.BedrockSecretKey, or carry
//     `Authorization: Bearer <Config.APIKey>`; otherwise 403 InvalidSignatureException.
//     With neither configured, anything is accepted;
//   - the body must have no `model` and no `stream`, max_tokens, and anthropic_version
//     "bedrock-2023-05-31", else 400 ValidationException;
//   - /model/{modelId}/count-tokens is CountTokens: the body must be
//     {"input":{"invokeModel":{"body":"<base64>"}}} whose decoded body passes the
//     checks of invoke, and the answer is {"inputTokens":N}, N counted from the
//     decoded body as count_tokens counts a Messages body;
//   - the model id from the path (unescaped) turns behaviours on as a model name does,
//     and is the reply's model;
//   - a non-stream answer is the Anthropic Message JSON; a stream is
//     application/vnd.amazon.eventstream chunk frames whose payloads carry each Messages
//     event's JSON in base64, message_stop with amazon-bedrock-invocationMetrics; an
//     inband-error is an exception frame;
//   - errors are {"message":…} with the exception's name in x-amzn-ErrorType;
//     rate-limit is 429 ThrottlingException, without retry-after unless
//     retry-after-<dur> asks for it. Betas are read from the body's anthropic_beta.
//
// A path ending in /anthropic/v1/messages (or …/count_tokens) is Claude in Amazon
// Bedrock's Messages endpoint: the same signature or API key check (SigV4 service
// "bedrock", or "bedrock-mantle" when the Host starts with "bedrock-mantle."), a
// refusal being Bedrock's 403 as above; then the first-party Messages API as the
// simulator answers it (anthropic-version header required, model in the body, SSE
// streams, Anthropic error envelopes), except that InvokeModel's body fields
// (anthropic_version, anthropic_beta) are refused as unknown.

// bedrockAnthropicVersion is the only anthropic_version InvokeModel takes here.
const bedrockAnthropicVersion = "bedrock-2023-05-31"

// bedrockMaxBody is InvokeModel's body limit.
const bedrockMaxBody = 25_000_000

// bedrockSkew is how far a signature's time may be from the simulator's clock.
const bedrockSkew = 15 * time.Minute

// signatureMismatch is AWS's wording of a signature that does not verify.
const signatureMismatch = "The request signature we calculated does not match the signature you provided. " +
	"Check your AWS Secret Access Key and signing method. Consult the service documentation for details."

// The actions of the Messages endpoint's paths; they hold a "/", which an action after
// /model/{id}/ never does.
const (
	actionMessages    = "anthropic/v1/messages"
	actionCountTokens = "anthropic/v1/messages/count_tokens"
)

// bedrockPath splits a Bedrock path: the prefix before /model/, the model id (unescaped)
// and the action after it; or, for the Messages endpoint, the prefix before /anthropic
// and actionMessages or actionCountTokens. ok is false for any other path.
func bedrockPath(u *url.URL) (prefix, model, action string, ok bool) {
	escaped := u.EscapedPath()
	i := strings.Index(escaped, "/model/")
	if i < 0 {
		for _, a := range []string{actionCountTokens, actionMessages} {
			if p, found := strings.CutSuffix(u.Path, "/"+a); found {
				return p, "", a, true
			}
		}
		return "", "", "", false
	}
	prefix, _ = url.PathUnescape(escaped[:i])
	rest := escaped[i+len("/model/"):]
	j := strings.LastIndexByte(rest, '/')
	if j < 0 {
		return prefix, "", "", true
	}
	model, err := url.PathUnescape(rest[:j])
	if err != nil {
		model = ""
	}
	return prefix, model, rest[j+1:], true
}

func (s *server) serveBedrock(w http.ResponseWriter, r *http.Request, prefix, model, action string) {
	if action == actionMessages || action == actionCountTokens {
		s.serveBedrockMessages(w, r, prefix, action == actionCountTokens)
		return
	}
	c := &call{w: w, r: r, fam: familyBedrock, reqID: bedrockRequestID(), idTag: "bdrk"}
	w.Header().Set("x-amzn-RequestId", c.reqID)
	w.Header().Set("x-amzn-bedrock-invocation-latency", "42")

	body, readErr := io.ReadAll(http.MaxBytesReader(w, r.Body, bedrockMaxBody))
	c.body = body
	if s.cfg.Observe != nil {
		s.cfg.Observe(r, body)
	}
	stream := action == "invoke-with-response-stream"
	counting := action == "count-tokens"
	switch {
	case action != "invoke" && !stream && !counting:
		c.writeError(apiError{status: http.StatusNotFound, code: "UnknownOperationException"})
		return
	case r.Method != http.MethodPost:
		w.Header().Set("Allow", http.MethodPost)
		c.writeError(apiError{status: http.StatusMethodNotAllowed, code: "UnknownOperationException"})
		return
	case readErr != nil:
		if _, tooBig := errors.AsType[*http.MaxBytesError](readErr); tooBig {
			c.writeError(apiError{status: http.StatusRequestEntityTooLarge, message: "Request body too large"})
		} else {
			c.writeError(apiError{status: http.StatusBadRequest, message: "Could not read the request body"})
		}
		return
	}
	if msg := s.bedrockAuthorized(r, body, "bedrock"); msg != "" {
		c.writeError(apiError{status: http.StatusForbidden, code: "InvalidSignatureException", message: msg})
		return
	}
	if counting {
		inner, msg := countTokensInput(body)
		if msg != "" {
			c.writeError(apiError{status: http.StatusBadRequest, code: "ValidationException", message: msg})
			return
		}
		body = inner
		c.body = inner // what is counted
	}
	if msg := bedrockBodyProblem(model, body); msg != "" {
		c.writeError(apiError{status: http.StatusBadRequest, code: "ValidationException", message: msg})
		return
	}
	c.model = model
	c.stream = stream
	// messages() reads betas from the header, as the first-party API takes them.
	var betas []string
	for _, b := range gjson.GetBytes(body, "anthropic_beta").Array() {
		betas = append(betas, b.String())
	}
	r.Header.Set("anthropic-beta", strings.Join(betas, ","))

	parts := s.schedules.active(pathKey(prefix), pathParts(prefix))
	parts = append(parts, s.schedules.active(modelKey(model), strings.Split(model, "+"))...)
	c.beh = parseParts(parts)
	if c.beh.retryAfter == 0 {
		c.beh.noRetryAfter = true // Bedrock's throttling says nothing of when
	}
	if counting {
		// The first-party count_tokens answer, behaviours and all, in CountTokens' shape.
		cw := &countWriter{ResponseWriter: w}
		c.w = cw
		s.answer(c, epCountTokens)
		cw.finish()
		return
	}
	s.answer(c, epMessages)
}

// serveBedrockMessages answers the Messages endpoint: Bedrock's authorisation in front
// of the first-party Messages API.
func (s *server) serveBedrockMessages(w http.ResponseWriter, r *http.Request, prefix string, counting bool) {
	c := &call{w: w, r: r, fam: familyBedrock, reqID: bedrockRequestID(), idTag: "bdrk"}
	w.Header().Set("x-amzn-RequestId", c.reqID)
	body, readErr := io.ReadAll(http.MaxBytesReader(w, r.Body, bedrockMaxBody))
	c.body = body
	if s.cfg.Observe != nil {
		s.cfg.Observe(r, body)
	}
	switch {
	case r.Method != http.MethodPost:
		w.Header().Set("Allow", http.MethodPost)
		c.writeError(apiError{status: http.StatusMethodNotAllowed, code: "UnknownOperationException"})
		return
	case readErr != nil:
		c.writeError(apiError{status: http.StatusBadRequest, message: "Could not read the request body"})
		return
	}
	service := "bedrock"
	if strings.HasPrefix(strings.ToLower(r.Host), "bedrock-mantle.") {
		service = "bedrock-mantle"
	}
	if msg := s.bedrockAuthorized(r, body, service); msg != "" {
		c.writeError(apiError{status: http.StatusForbidden, code: "InvalidSignatureException", message: msg})
		return
	}

	// Past AWS's front door, the endpoint is Anthropic's API.
	c.fam = familyAnthropic
	ep := epMessages
	if counting {
		ep = epCountTokens
	}
	model := gjson.GetBytes(body, "model")
	switch {
	case r.Header.Get("anthropic-version") == "":
		c.writeError(apiError{status: http.StatusBadRequest, message: "anthropic-version: header is required"})
		return
	case !gjson.ValidBytes(body) || !gjson.ParseBytes(body).IsObject():
		c.writeError(apiError{status: http.StatusBadRequest, message: "The request body is not a valid JSON object."})
		return
	case model.Type != gjson.String || model.Str == "":
		c.writeError(apiError{status: http.StatusBadRequest, message: "model: a non-empty string is required"})
		return
	}
	for _, k := range []string{"anthropic_version", "anthropic_beta"} {
		if gjson.GetBytes(body, k).Exists() {
			c.writeError(apiError{status: http.StatusBadRequest, message: k + ": Extra inputs are not permitted"})
			return
		}
	}
	c.model = model.Str
	parts := s.schedules.active(pathKey(prefix), pathParts(prefix))
	parts = append(parts, s.schedules.active(modelKey(c.model), strings.Split(c.model, "+"))...)
	c.beh = parseParts(parts)
	s.answer(c, ep)
}

// countTokensInput is the InvokeModel body a CountTokens body carries, or the
// ValidationException text of a body that does not carry one.
func countTokensInput(body []byte) ([]byte, string) {
	const pre = "Malformed input request: "
	if !gjson.ValidBytes(body) || !gjson.ParseBytes(body).IsObject() {
		return nil, pre + "the body is not a JSON object, please reformat your input and try again."
	}
	b64 := gjson.GetBytes(body, "input.invokeModel.body")
	if b64.Type != gjson.String {
		return nil, "1 validation error detected: Value at 'input.invokeModel.body' failed to satisfy constraint: Member must not be null"
	}
	inner, err := base64.StdEncoding.DecodeString(b64.Str)
	if err != nil {
		return nil, "Invalid base64 in input.invokeModel.body"
	}
	return inner, ""
}

// countWriter holds back a 200 count_tokens answer ({"input_tokens":N}) to send it as
// CountTokens does ({"inputTokens":N}); any other answer goes through as written.
type countWriter struct {
	http.ResponseWriter
	status int
	held   []byte
}

func (w *countWriter) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	w.status = code
	if code != http.StatusOK {
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *countWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if w.status == http.StatusOK {
		w.held = append(w.held, p...)
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection (flush, hijack).
func (w *countWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *countWriter) finish() {
	if w.status != http.StatusOK {
		return
	}
	b := mustJSON(obj{{"inputTokens", gjson.GetBytes(w.held, "input_tokens").Int()}})
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.ResponseWriter.WriteHeader(http.StatusOK)
	_, _ = w.ResponseWriter.Write(b)
}

// bedrockBodyProblem is the ValidationException text of a body InvokeModel refuses, or "".
func bedrockBodyProblem(model string, body []byte) string {
	const pre = "Malformed input request: "
	switch {
	case model == "":
		return "The provided model identifier is invalid."
	case !gjson.ValidBytes(body) || !gjson.ParseBytes(body).IsObject():
		return pre + "the body is not a JSON object, please reformat your input and try again."
	}
	for _, k := range []string{"model", "stream"} {
		if gjson.GetBytes(body, k).Exists() {
			return pre + "#: extraneous key [" + k + "] is not permitted, please reformat your input and try again."
		}
	}
	if mt := gjson.GetBytes(body, "max_tokens"); mt.Type != gjson.Number || mt.Int() < 1 {
		return pre + "#: required key [max_tokens] not found, please reformat your input and try again."
	}
	v := gjson.GetBytes(body, "anthropic_version")
	if !v.Exists() {
		return pre + "#: required key [anthropic_version] not found, please reformat your input and try again."
	}
	if v.String() != bedrockAnthropicVersion {
		return pre + "#/anthropic_version: " + v.String() + " is not a valid enum value, please reformat your input and try again."
	}
	return ""
}

// bedrockAuthorized checks the request's signature or Bedrock API key; it returns why it
// is refused, or "".
func (s *server) bedrockAuthorized(r *http.Request, body []byte, service string) string {
	if s.cfg.BedrockAccessKeyID == "" && s.cfg.APIKey == "" {
		return ""
	}
	auth := r.Header.Get("Authorization")
	if token, ok := strings.CutPrefix(auth, "Bearer "); ok {
		if s.cfg.APIKey != "" && sameKey(token, s.cfg.APIKey) {
			return ""
		}
		return "The security token included in the request is invalid."
	}
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok || s.cfg.BedrockAccessKeyID == "" {
		return "Missing Authentication Token"
	}
	fields := map[string]string{}
	for f := range strings.SplitSeq(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/") // AKID/date/region/service/aws4_request
	if len(scope) != 5 || scope[4] != "aws4_request" || fields["SignedHeaders"] == "" {
		return "Authorization header requires 'Credential', 'Signature' and 'SignedHeaders' parameters."
	}
	if !sameKey(scope[0], s.cfg.BedrockAccessKeyID) {
		return "The security token included in the request is invalid."
	}
	if scope[3] != service {
		return "Credential should be scoped to correct service: '" + service + "'."
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header."
	}
	if d := time.Since(at); d > bedrockSkew || d < -bedrockSkew {
		return "Signature expired: the request time is too far from the server's."
	}

	// Sign the request as received, with only the headers it says it signed, and compare.
	again := &http.Request{Method: r.Method, URL: &url.URL{Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery},
		Host: r.Host, Header: http.Header{}, ContentLength: r.ContentLength}
	for name := range strings.SplitSeq(fields["SignedHeaders"], ";") {
		switch name {
		case "host", "content-length", "x-amz-date":
		default:
			if v, ok := r.Header[http.CanonicalHeaderKey(name)]; ok {
				again.Header[http.CanonicalHeaderKey(name)] = v
			}
		}
	}
	cr := aws.Credentials{AccessKeyID: s.cfg.BedrockAccessKeyID, SecretAccessKey: s.cfg.BedrockSecretKey,
		SessionToken: r.Header.Get("X-Amz-Security-Token")}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(r.Context(), cr, again, hex.EncodeToString(sum[:]), scope[3], scope[2], at); err != nil {
		return signatureMismatch
	}
	if !sameKey(again.Header.Get("Authorization"), auth) {
		return signatureMismatch
	}
	return ""
}

// bedrockRequestID is a UUID-shaped request id, as x-amzn-RequestId carries.
func bedrockRequestID() string {
	h := newID("")[:24]
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:] + "0000000"
}

// bedrockException is the exception Bedrock names for an HTTP status.
func bedrockException(status int) string {
	switch status {
	case 400:
		return "ValidationException"
	case 403:
		return "AccessDeniedException"
	case 404:
		return "ResourceNotFoundException"
	case 408:
		return "ModelTimeoutException"
	case 424:
		return "ModelErrorException"
	case 429:
		return "ThrottlingException"
	case 503:
		return "ServiceUnavailableException"
	}
	if status >= 500 {
		return "InternalServerException"
	}
	return "ValidationException"
}

// writeBedrockError sends a REST-JSON error: {"message":…}, the exception in
// x-amzn-ErrorType with the internal namespace Bedrock adds.
func (c *call) writeBedrockError(e apiError) {
	name := e.code
	if !strings.HasSuffix(name, "Exception") { // the other families' codes mean nothing here
		name = bedrockException(e.status)
	}
	msg := e.message
	switch {
	case e.status == http.StatusTooManyRequests:
		msg = "Too many requests, please wait before trying again."
	case msg == "":
		msg = name
	}
	h := c.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("x-amzn-ErrorType", name+":http://internal.amazon.com/coral/com.amazon.bedrock/")
	c.w.WriteHeader(e.status)
	_, _ = c.w.Write(mustJSON(obj{{"message", msg}}))
}

// writeEventStream sends events as Bedrock's event stream, with the stream behaviours of
// writeStream (slow first event, drip, stall, cut, usage delay).
func (c *call) writeEventStream(events []event) {
	h := c.w.Header()
	h.Set("Content-Type", "application/vnd.amazon.eventstream")
	h.Set("X-Amzn-Bedrock-Content-Type", "application/json")
	c.w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(c.w)
	ctx := c.r.Context()
	if c.beh.slowFirstEvent > 0 {
		_ = rc.Flush()
		if !sleep(ctx, c.beh.slowFirstEvent) {
			return
		}
	}
	enc := eventstream.NewEncoder()
	var in, out int64
	for i, ev := range events {
		if !c.pace(ctx, i, ev) {
			return
		}
		data := gjson.ParseBytes(ev.data)
		switch data.Get("type").String() {
		case "message_start":
			in = data.Get("message.usage.input_tokens").Int()
		case "message_delta":
			out = data.Get("usage.output_tokens").Int()
		}
		if err := enc.Encode(c.w, bedrockFrame(ev, in, out)); err != nil {
			return
		}
		_ = rc.Flush()
	}
}

// bedrockFrame is one event as Bedrock frames it: a chunk whose payload holds the
// event's JSON in base64 with padding beside it, or an exception for an error event.
func bedrockFrame(ev event, in, out int64) eventstream.Message {
	var hs eventstream.Headers
	if ev.name == "error" {
		hs.Set(":message-type", eventstream.StringValue("exception"))
		hs.Set(":exception-type", eventstream.StringValue("modelStreamErrorException"))
		hs.Set(":content-type", eventstream.StringValue("application/json"))
		msg := gjson.GetBytes(ev.data, "error.message").String()
		return eventstream.Message{Headers: hs, Payload: mustJSON(obj{
			{"message", "Model stream error: " + msg}, {"originalStatusCode", 529}, {"originalMessage", msg}})}
	}
	return bedrockChunk(ev.data, 4+len(ev.data)%48, in, out)
}
