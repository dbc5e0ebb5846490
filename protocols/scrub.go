package protocols

import (
	"bytes"
	"net/http"
	"regexp"
	"slices"
	"strings"
)

// Scrubber removes what would reveal a candidate from upstream bytes passed back to a
// client. Every body and event passes it: in answers, the candidate's host, credential and
// account ids (the values of its account headers) are masked; error bodies and in-band
// error events, which upstreams write for their own operators, also have the upstream
// model name replaced by the service model id and anything shaped like an account id
// masked, and so are the names of the account's regions, resources and deployments.
// Generated text is not searched for model names, account names or id patterns, which
// would corrupt it (an upstream model "o3" inside "foo3", a region "us-east-1").
type Scrubber struct {
	UpstreamModel string
	ServiceModel  string
	Secrets       []string // upstream host names, credentials, account ids
	Names         []string // regions, resource and deployment names: error bodies only
	// HideRequestID, for a candidate reached through a cloud channel, replaces the
	// request_id an error body or error event carries with RequestID (the gateway's own
	// id): the provider's (req_vrtx_…) would tell the client which channel served it.
	HideRequestID bool
	RequestID     string
}

// accountHeaders carry an upstream's own account identifiers on its responses.
var accountHeaders = []string{"Anthropic-Organization-Id", "Openai-Organization", "Openai-Project"}

// WithAccountIDs adds the account identifiers an upstream response named in its headers
// to the secrets (whatever their form: Family B's are UUIDs, not "org-…").
func (s Scrubber) WithAccountIDs(h http.Header) Scrubber {
	for _, name := range accountHeaders {
		for _, v := range h.Values(name) {
			if v = strings.TrimSpace(v); len(v) >= 3 {
				s.Secrets = append(s.Secrets[:len(s.Secrets):len(s.Secrets)], v)
			}
		}
	}
	return s
}

// accountIDs matches upstream organisation and project identifiers as they appear in
// provider error messages.
var accountIDs = regexp.MustCompile(`\b(org|proj)[-_][A-Za-z0-9]{4,}\b`)

var redacted = []byte("[redacted]")

// ScrubSecrets masks the secrets in an answer. It returns b itself when there is none.
func (s Scrubber) ScrubSecrets(b []byte) []byte { return mask(b, s.Secrets) }

func mask(b []byte, words []string) []byte {
	for _, w := range words {
		if len(w) >= 3 && bytes.Contains(b, []byte(w)) {
			b = bytes.ReplaceAll(b, []byte(w), redacted)
		}
	}
	return b
}

// ScrubHeader masks the secrets in the values of h, the headers a client is about to
// get. An upstream can echo what it was sent (a token in a request id or a cache
// directive), and the allowlist of headers says nothing of their values. Values that
// hold no secret are left as they are, without a copy.
func (s Scrubber) ScrubHeader(h http.Header) {
	for name, values := range h {
		for i, v := range values {
			if !holdsAny(v, s.Secrets) {
				continue
			}
			masked := slices.Clone(values)
			for j := i; j < len(masked); j++ {
				masked[j] = string(mask([]byte(masked[j]), s.Secrets))
			}
			h[name] = masked
			break
		}
	}
}

func holdsAny(v string, words []string) bool {
	for _, w := range words {
		if len(w) >= 3 && strings.Contains(v, w) {
			return true
		}
	}
	return false
}

// Scrub cleans an error body or error event: secrets and account names masked, the
// upstream model named as the service model, account-shaped ids masked. It never
// modifies its input.
func (s Scrubber) Scrub(b []byte) []byte {
	if s.UpstreamModel != "" && s.UpstreamModel != s.ServiceModel {
		b = bytes.ReplaceAll(b, []byte(s.UpstreamModel), []byte(s.ServiceModel))
	}
	b = accountIDs.ReplaceAll(mask(s.ScrubSecrets(b), s.Names), redacted)
	if s.HideRequestID && bytes.Contains(b, []byte(`"request_id"`)) {
		b = requestIDField.ReplaceAllLiteral(b, AppendJSONString([]byte(`"request_id":`), s.RequestID))
	}
	return b
}

// requestIDField matches a request_id key and its string value in an error's JSON.
var requestIDField = regexp.MustCompile(`"request_id"\s*:\s*"(?:[^"\\]|\\.)*"`)
