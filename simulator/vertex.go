package simulator

// Google Vertex AI, as a channel sees it.
//
// POST /token is the OAuth token endpoint a service-account file can name as its
// token_uri: it takes grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer with an RS256
// assertion signed by the key whose public half is Config.VertexPublicKey (without one it
// refuses every assertion) and answers an access token valid for an hour.
//
// A path holding /publishers/anthropic/models/ is Vertex's Claude endpoint:
// [prefix]/v1/projects/{p}/locations/{l}/publishers/anthropic/models/{model}:rawPredict
// (or :streamRawPredict, or models/count-tokens:rawPredict). It requires
// `Authorization: Bearer <a token /token issued>` (else Google's 401), a body with
// anthropic_version "vertex-2023-10-16", no `model` (count-tokens: one, which picks the
// behaviours) and `stream` true exactly on :streamRawPredict; then it answers as the
// Messages endpoint does, for the model in the URL, whose tokens switch behaviours on as
// everywhere else. rate-limit answers Google's 429 RESOURCE_EXHAUSTED wrapped in a JSON
// array, as Vertex often does; the other errors are Anthropic's envelope, as Vertex passes
// the model server's errors through.

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"
)

// VertexAnthropicVersion is the anthropic_version Vertex requires in the body.
const VertexAnthropicVersion = "vertex-2023-10-16"

// vertexTokenLifetime is how long an issued access token is honoured.
const vertexTokenLifetime = time.Hour

// maxVertexTokens bounds the issued tokens remembered; the oldest is forgotten first.
const maxVertexTokens = 4096

type vertexState struct {
	key    *rsa.PublicKey
	mu     sync.Mutex
	tokens map[string]time.Time // access token -> expiry
	order  []string
}

func newVertexState(key *rsa.PublicKey) *vertexState {
	return &vertexState{key: key, tokens: make(map[string]time.Time)}
}

// serveVertex answers the token endpoint and Vertex's paths; it reports whether the
// request was one of them.
func (s *server) serveVertex(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case r.URL.Path == "/token":
		s.vertex.serveToken(w, r)
		return true
	case strings.Contains(r.URL.Path, "/publishers/anthropic/models/"):
		s.serveVertexModel(w, r)
		return true
	}
	return false
}

func (v *vertexState) serveToken(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, code, desc string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(mustJSON(obj{{"error", code}, {"error_description", desc}}))
	}
	if r.Method != http.MethodPost {
		fail(http.StatusMethodNotAllowed, "invalid_request", "POST only")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		fail(http.StatusBadRequest, "invalid_request", "the form cannot be read")
		return
	}
	if r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		fail(http.StatusBadRequest, "unsupported_grant_type", "only the JWT bearer grant is served")
		return
	}
	if err := v.verify(r.PostForm.Get("assertion")); err != nil {
		fail(http.StatusBadRequest, "invalid_grant", err.Error())
		return
	}
	token := newID("ya29.sim-")
	v.mu.Lock()
	if len(v.order) >= maxVertexTokens {
		delete(v.tokens, v.order[0])
		v.order = v.order[1:]
	}
	v.tokens[token] = time.Now().Add(vertexTokenLifetime)
	v.order = append(v.order, token)
	v.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(mustJSON(obj{{"access_token", token}, {"expires_in", int(vertexTokenLifetime / time.Second)}, {"token_type", "Bearer"}}))
}

// verify checks a service account's JWT as Google does: RS256 by the known key, the
// cloud-platform scope, an issuer, an audience that is a token endpoint, not expired.
func (v *vertexState) verify(assertion string) error {
	if v.key == nil {
		return errors.New("no service account key is known to this simulator")
	}
	parts := strings.Split(assertion, ".")
	if len(parts) != 3 {
		return errors.New("the assertion is not a JWT")
	}
	header, err1 := base64.RawURLEncoding.DecodeString(parts[0])
	claims, err2 := base64.RawURLEncoding.DecodeString(parts[1])
	sig, err3 := base64.RawURLEncoding.DecodeString(parts[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return errors.New("the assertion is not base64url")
	}
	if gjson.GetBytes(header, "alg").Str != "RS256" {
		return errors.New("the assertion must be RS256")
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(v.key, crypto.SHA256, digest[:], sig) != nil {
		return errors.New("invalid JWT signature")
	}
	c := gjson.ParseBytes(claims)
	switch {
	case c.Get("iss").Str == "":
		return errors.New("the assertion has no issuer")
	case !strings.Contains(" "+c.Get("scope").Str+" ", " https://www.googleapis.com/auth/cloud-platform "):
		return errors.New("the assertion does not ask for the cloud-platform scope")
	case !strings.HasSuffix(c.Get("aud").Str, "/token"):
		return errors.New("the assertion's audience is not a token endpoint")
	case c.Get("exp").Int() <= time.Now().Unix():
		return errors.New("the assertion has expired")
	}
	return nil
}

// issued reports whether token is one this simulator issued and is still valid.
func (v *vertexState) issued(token string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	exp, ok := v.tokens[token]
	return ok && time.Now().Before(exp)
}

// writeGoogleError answers in Google's error shape, wrapped in an array when asked.
func writeGoogleError(w http.ResponseWriter, status int, gstatus, message string, array bool) {
	var body any = obj{{"error", obj{{"code", status}, {"message", message}, {"status", gstatus}}}}
	if array {
		body = []any{body}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(mustJSON(body))
}

func (s *server) serveVertexModel(w http.ResponseWriter, r *http.Request) {
	c := &call{w: w, r: r, fam: familyAnthropic, reqID: newID("req_vrtx_"), idTag: "vrtx"}
	c.setCommonHeaders()
	body, readErr := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	c.body = body
	if s.cfg.Observe != nil {
		s.cfg.Observe(r, body)
	}
	prefix, project, location, model, verb, ok := vertexPath(r.URL.EscapedPath())
	switch {
	case !ok:
		writeGoogleError(w, http.StatusNotFound, "NOT_FOUND", "The requested URL was not found on this server.", false)
		return
	case r.Method != http.MethodPost:
		writeGoogleError(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "Method not allowed: use POST.", false)
		return
	case readErr != nil:
		writeGoogleError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "The request body cannot be read.", false)
		return
	}
	token, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !bearer || !s.vertex.issued(token) {
		writeGoogleError(w, http.StatusUnauthorized, "UNAUTHENTICATED",
			"Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.", false)
		return
	}
	if !json.Valid(body) || !gjson.ParseBytes(body).IsObject() {
		c.writeError(apiError{status: http.StatusBadRequest, message: "The request body is not a valid JSON object."})
		return
	}
	req := gjson.ParseBytes(body)
	if v := req.Get("anthropic_version").Str; v != VertexAnthropicVersion {
		c.writeError(apiError{status: http.StatusBadRequest, message: fmt.Sprintf(
			"anthropic_version: %q is not a supported version; use %q", v, VertexAnthropicVersion)})
		return
	}
	ep := epMessages
	if model == "count-tokens" {
		ep = epCountTokens
		model = req.Get("model").Str
		switch {
		case verb != "rawPredict":
			writeGoogleError(w, http.StatusNotFound, "NOT_FOUND", "count-tokens is served on :rawPredict only.", false)
			return
		case model == "":
			c.writeError(apiError{status: http.StatusBadRequest, message: "model: Field required"})
			return
		}
	} else {
		stream := req.Get("stream").Bool()
		switch {
		case req.Get("model").Exists():
			c.writeError(apiError{status: http.StatusBadRequest, message: "model: Extra inputs are not permitted"})
			return
		case verb != "rawPredict" && verb != "streamRawPredict":
			writeGoogleError(w, http.StatusNotFound, "NOT_FOUND", "Unknown method :"+verb+".", false)
			return
		case stream != (verb == "streamRawPredict"):
			c.writeError(apiError{status: http.StatusBadRequest, message: fmt.Sprintf(
				"stream must be true exactly on :streamRawPredict (got stream %t on :%s)", stream, verb)})
			return
		}
	}
	c.model = model
	parts := s.schedules.active(pathKey(prefix), pathParts(prefix))
	parts = append(parts, s.schedules.active(modelKey(model), strings.Split(model, "+"))...)
	c.beh = parseParts(parts)
	if c.beh.rateLimit {
		writeGoogleError(w, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED", fmt.Sprintf(
			"Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model with base model: %s. "+
				"Please submit a quota increase request. (projects/%s/locations/%s)", model, project, location), true)
		return
	}
	s.answer(c, ep)
}

// vertexPath splits [prefix]/v1/projects/{p}/locations/{l}/publishers/anthropic/models/{m}:{verb}.
func vertexPath(escaped string) (prefix, project, location, model, verb string, ok bool) {
	prefix, rest, found := strings.Cut(escaped, "/v1/projects/")
	if !found {
		return
	}
	seg := strings.Split(rest, "/")
	if len(seg) != 7 || seg[1] != "locations" || seg[3] != "publishers" || seg[4] != "anthropic" || seg[5] != "models" {
		return
	}
	m, verb, found := strings.Cut(seg[6], ":")
	if !found {
		return
	}
	var err1, err2, err3 error
	project, err1 = url.PathUnescape(seg[0])
	location, err2 = url.PathUnescape(seg[2])
	model, err3 = url.PathUnescape(m)
	ok = errors.Join(err1, err2, err3) == nil && project != "" && location != "" && model != ""
	return
}
