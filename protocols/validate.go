package protocols

import (
	"math"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"
)

// Validate runs the checks of op's shape on the request.
func (p *ParsedRequest) Validate(op Operation, h http.Header) *APIError {
	return ShapeOf(op.Kind).Validate(p, op, h)
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

// CheckOutputCap refuses a generation request that asks for more output than the model's
// declared cap (limit; zero means none was declared), naming the field the client sent:
// max_tokens (messages; the older chat completions field), max_completion_tokens (chat
// completions) or max_output_tokens (responses). An upstream would refuse it too, or
// worse, truncate silently; answering here costs the client no upstream call. A value
// that is not a number is left to the family's own validation and the upstream.
func (p *ParsedRequest) CheckOutputCap(op Operation, modelID string, limit int64) *APIError {
	if limit <= 0 {
		return nil
	}
	fields := ShapeOf(op.Kind).outputCaps(p, op.Kind)
	for _, f := range fields {
		if f.value.Type != gjson.Number || f.value.Num <= float64(limit) {
			continue
		}
		if op.Family == FamilyB {
			return InvalidParam(op.Family, f.name, "%s: %s is above the output cap of model '%s' (%d tokens); send %s of at most %d",
				f.name, f.value.Raw, modelID, limit, f.name, limit)
		}
		return InvalidParam(op.Family, f.name, "'%s' is %s, above the output cap of model '%s' (%d tokens); send at most %d",
			f.name, f.value.Raw, modelID, limit, limit)
	}
	return nil
}

// capField is a request field that caps the answer's output.
type capField struct {
	name  string
	value gjson.Result
}

// OutputCap is the most output the request allows itself: the smallest of its cap fields
// that holds a positive whole number (a request may carry both of chat completions' caps).
// A cap beyond int64 counts as math.MaxInt64: it asks for more than anything, not for
// nothing. ok is false when it sets none.
func (p *ParsedRequest) OutputCap(op Operation) (limit int64, ok bool) {
	for _, f := range ShapeOf(op.Kind).outputCaps(p, op.Kind) {
		n := f.value.Num
		if f.value.Type != gjson.Number || n < 1 || n != math.Trunc(n) {
			continue
		}
		v := int64(math.MaxInt64)
		if n < math.MaxInt64 { // float64(MaxInt64) is 2^63, itself out of range
			v = int64(n)
		}
		if !ok || v < limit {
			limit, ok = v, true
		}
	}
	return limit, ok
}
