package protocols

import (
	"net/http"
	"strings"

	"github.com/tidwall/gjson"
)

// minThinkingBudget is the smallest extended-thinking budget Family B accepts.
const minThinkingBudget = 1024

// RequestModel checks that body is one JSON object with a non-empty string `model` and
// returns that model. It does not decode the rest of the body.
func RequestModel(family Family, body []byte) (string, *APIError) {
	p, err := ParseRequest(family, body)
	if err != nil {
		return "", err
	}
	return p.Model(family)
}

// VersionHeader returns the Family B version a client sent, from the native header or the
// specification's name for it.
func VersionHeader(h http.Header) string {
	if v := h.Get("Anthropic-Version"); v != "" {
		return v
	}
	return h.Get("Family-B-Version")
}

// Validate runs the family-specific checks for op on a body that RequestModel accepted.
func Validate(op Operation, body []byte, h http.Header) *APIError {
	p, err := ParseRequest(op.Family, body)
	if err != nil {
		return err
	}
	return p.Validate(op, h)
}

// Validate runs the family-specific checks for op.
func (p *ParsedRequest) Validate(op Operation, h http.Header) *APIError {
	switch op.Kind {
	case KindChat:
		return p.validateChat()
	case KindResponses, KindResponsesInputTokens, KindResponsesCompact:
		return p.validateResponses(op)
	case KindMessages, KindMessagesCountTokens:
		return p.validateMessages(op, h)
	}
	return nil
}

func (p *ParsedRequest) validateChat() *APIError {
	if !p.messages.IsArray() {
		return InvalidParam(FamilyA, "messages", "'messages' is required and must be an array")
	}
	if e := optionalBool(FamilyA, p.stream, "stream"); e != nil {
		return e
	}
	if p.streamOptions.Exists() && p.streamOptions.Type != gjson.Null && !p.streamOptions.IsObject() {
		return InvalidParam(FamilyA, "stream_options", "'stream_options' must be an object")
	}
	return nil
}

func (p *ParsedRequest) validateResponses(op Operation) *APIError {
	if e := optionalBool(FamilyA, p.stream, "stream"); e != nil {
		return e
	}
	if op.Kind == KindResponses && p.background.Type == gjson.True {
		return InvalidParam(FamilyA, "background", "'background' responses are not supported: this gateway keeps no server-side response state; send the request without 'background'")
	}
	if present(p.previousResponseID) {
		return InvalidParam(FamilyA, "previous_response_id", "'previous_response_id' is not supported: this gateway keeps no server-side response state; send the full conversation in 'input' instead")
	}
	if present(p.conversation) {
		return InvalidParam(FamilyA, "conversation", "'conversation' is not supported: this gateway keeps no server-side conversation state; send the full conversation in 'input' instead")
	}
	return nil
}

func (p *ParsedRequest) validateMessages(op Operation, h http.Header) *APIError {
	version := VersionHeader(h)
	if version == "" {
		return InvalidParam(FamilyB, "", "the anthropic-version (or family-b-version) header is required, for example 'anthropic-version: 2023-06-01'")
	}
	if !isDate(version) {
		return InvalidParam(FamilyB, "", "the anthropic-version (or family-b-version) header must be a date in the form YYYY-MM-DD")
	}
	if !p.messages.IsArray() {
		return InvalidParam(FamilyB, "messages", "messages: field required and must be an array")
	}
	if op.Kind == KindMessagesCountTokens {
		return nil
	}
	maxTokens, ok := positiveInt(p.maxTokens)
	if !ok {
		return InvalidParam(FamilyB, "max_tokens", "max_tokens: field required and must be a positive integer")
	}
	if e := optionalBool(FamilyB, p.stream, "stream"); e != nil {
		return e
	}
	if p.thinking.Get("type").Str == "enabled" {
		budget, ok := positiveInt(p.thinking.Get("budget_tokens"))
		switch {
		case !ok:
			return InvalidParam(FamilyB, "thinking.budget_tokens", "thinking.budget_tokens: required integer when thinking is enabled")
		case budget < minThinkingBudget:
			return InvalidParam(FamilyB, "thinking.budget_tokens", "thinking.budget_tokens: must be at least %d", minThinkingBudget)
		case budget >= maxTokens:
			return InvalidParam(FamilyB, "thinking.budget_tokens", "thinking.budget_tokens: must be less than max_tokens (%d)", maxTokens)
		}
	}
	return nil
}

// present reports a field that is set to something other than null or an empty string.
func present(r gjson.Result) bool {
	return r.Exists() && r.Type != gjson.Null && !(r.Type == gjson.String && r.Str == "")
}

func optionalBool(family Family, r gjson.Result, name string) *APIError {
	if r.Exists() && r.Type != gjson.True && r.Type != gjson.False {
		return InvalidParam(family, name, "'%s' must be a boolean", name)
	}
	return nil
}

// positiveInt accepts a JSON integer literal of at least 1.
func positiveInt(r gjson.Result) (int64, bool) {
	if r.Type != gjson.Number || strings.ContainsAny(r.Raw, ".eE") {
		return 0, false
	}
	v := r.Int()
	return v, v >= 1
}

func isDate(s string) bool {
	if len(s) != 10 || s[4] != '-' || s[7] != '-' {
		return false
	}
	for i, c := range []byte(s) {
		if i == 4 || i == 7 {
			continue
		}
		if c < '0' || c > '9' {
			return false
		}
	}
	month := (s[5]-'0')*10 + s[6] - '0'
	day := (s[8]-'0')*10 + s[9] - '0'
	return month >= 1 && month <= 12 && day >= 1 && day <= 31
}
