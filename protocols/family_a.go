package protocols

import (
	"encoding/json"
	"net/http"

	"github.com/tidwall/gjson"
)

// familyA holds what chat completions and responses share: OpenAI's error envelope
// {"error":{"message","type","param","code"}} and Bearer authentication.
type familyA struct{}

func (familyA) errorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusServiceUnavailable:
		return "service_unavailable"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

type familyAEnvelope struct {
	Error familyAError `json:"error"`
}

type familyAError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (familyA) errorBody(e *APIError, _ string) []byte {
	out, _ := json.Marshal(familyAEnvelope{Error: familyAError{
		Message: e.Message, Type: e.nativeType(), Param: optional(e.Param), Code: optional(e.Code),
	}})
	return out
}

func (familyA) upstreamAuth(out, _ http.Header, credential string) {
	if credential != "" {
		out["Authorization"] = []string{"Bearer " + credential}
	}
}

// familyAUsage names, in a shape's words, the five counts of a Family A usage object:
// input, the cached part of it, the cache-write part of it, output, the reasoning part
// of it. Both shapes count the parts inside the totals.
type familyAUsage [5]string

func (o *Observation) setFamilyAUsage(u gjson.Result, names familyAUsage) {
	f := gjson.GetMany(u.Raw, names[:]...)
	o.Usage = Usage{Input: f[0].Int(), CachedInput: f[1].Int(), CacheWrite: f[2].Int(), Output: f[3].Int(), Reasoning: f[4].Int(),
		ToolUses: o.Usage.ToolUses} // counted from the answer's items, not its usage
	o.UsageReported, o.ReasoningReported = true, true
}

// answerFamilyA reads a Family A JSON answer: model and usage at its top level.
func answerFamilyA(body []byte, names familyAUsage) (gjson.Result, Observation) {
	obs := Observation{Complete: true, Billable: true}
	if u := getView(body, "usage"); u.IsObject() {
		obs.setFamilyAUsage(u, names)
		obs.UsageFinal = true // a whole answer's usage is its last word
	}
	return getView(body, "model"), obs
}
