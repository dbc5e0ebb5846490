package protocols

import (
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// Validate runs the checks of op's shape on the request.
func (p *ParsedRequest) Validate(op Operation, h http.Header) *APIError {
	return ShapeOf(op.Kind).Validate(p, h)
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

// positiveInt accepts a JSON integer literal of at least 1. One beyond int64 is
// math.MaxInt64: it asks for more than anything, not for nothing.
func positiveInt(r gjson.Result) (int64, bool) {
	if r.Type != gjson.Number || r.Raw == "" || r.Raw[0] == '-' || strings.ContainsAny(r.Raw, ".eE") {
		return 0, false
	}
	v, err := strconv.ParseInt(r.Raw, 10, 64)
	if err != nil { // only a range error: the literal is all digits
		v = math.MaxInt64
	}
	return v, v >= 1
}

// MaxChoices is the most answers chat completions' `n` may ask for, as OpenAI accepts.
const MaxChoices = 128

// positiveIntParam reads an optional Family A integer field that must be 1..most when it
// is present and not null, as OpenAI checks it: a string ("100000"), which lenient
// upstreams read as the number, or a fraction would otherwise pass the gateway's checks
// unread. set is false for a field absent or null.
func positiveIntParam(r gjson.Result, name string, most int64) (v int64, set bool, _ *APIError) {
	if !r.Exists() || r.Type == gjson.Null {
		return 0, false, nil
	}
	v, ok := positiveInt(r)
	switch {
	case r.Type != gjson.Number:
		return 0, false, InvalidParam(FamilyA, name, "Invalid type for '%s': expected an integer, but got %s instead.", name, jsonTypeName(r))
	case !ok && r.Raw[0] != '-' && strings.ContainsAny(r.Raw, ".eE"):
		return 0, false, InvalidParam(FamilyA, name, "Invalid type for '%s': expected an integer, but got a decimal number instead.", name)
	case !ok:
		return 0, false, InvalidParam(FamilyA, name, "Invalid '%s': integer below minimum value. Expected a value >= 1.", name)
	case v > most:
		return 0, false, InvalidParam(FamilyA, name, "Invalid '%s': integer above maximum value. Expected a value <= %d.", name, most)
	}
	return v, true, nil
}

// jsonTypeName names a value's JSON type as OpenAI's messages do.
func jsonTypeName(r gjson.Result) string {
	switch {
	case r.Type == gjson.String:
		return "a string"
	case r.Type == gjson.True || r.Type == gjson.False:
		return "a boolean"
	case r.IsArray():
		return "an array"
	case r.IsObject():
		return "an object"
	}
	return "a number"
}

// checkOutputCaps validates a Family A shape's cap fields: each a positive integer when
// set, and, when a shape has two, both equal if both are set. Upstreams differ on which
// one wins, so two different caps would let the gateway reserve one and the upstream
// write the other.
func checkOutputCaps(caps []capField) *APIError {
	var first *capField
	for i := range caps {
		f := &caps[i]
		if _, set, e := positiveIntParam(f.value, f.name, math.MaxInt64); e != nil {
			return e
		} else if !set {
			continue
		}
		if first != nil && first.value.Raw != f.value.Raw {
			// Integer literals without leading zeros are equal exactly when their bytes are.
			return InvalidParam(FamilyA, "max_tokens", "'max_tokens' and 'max_completion_tokens' disagree (%s and %s); send only 'max_completion_tokens'",
				capRawFor(caps, "max_tokens"), capRawFor(caps, "max_completion_tokens"))
		}
		first = f
	}
	return nil
}

// capRawFor is the value a cap field holds, cut short when it is long.
func capRawFor(caps []capField, name string) string {
	for _, f := range caps {
		if f.name == name {
			if len(f.value.Raw) > 24 {
				return f.value.Raw[:20] + "..."
			}
			return f.value.Raw
		}
	}
	return ""
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
	fields := ShapeOf(op.Kind).outputCaps(p)
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

// OutputCap is the most output the request allows itself for each answer: the largest
// of its cap fields that holds a positive integer (Validate refuses two caps that
// disagree). A cap beyond int64 counts as math.MaxInt64: it asks for more than anything,
// not for nothing. ok is false when it sets none.
func (p *ParsedRequest) OutputCap(op Operation) (limit int64, ok bool) {
	for _, f := range ShapeOf(op.Kind).outputCaps(p) {
		if v, valid := wholeNumber(f.value); valid && (!ok || v > limit) {
			limit, ok = v, true
		}
	}
	return limit, ok
}

// wholeNumber reads a count that admission multiplies by: any whole JSON number of at
// least 1, not only the integer literals Validate accepts, so that a body it was not run
// on still reserves what a lenient upstream would read. Beyond int64 is math.MaxInt64.
func wholeNumber(r gjson.Result) (int64, bool) {
	n := r.Num
	if r.Type != gjson.Number || n < 1 || n != math.Trunc(n) {
		return 0, false
	}
	if n >= math.MaxInt64 { // float64(MaxInt64) is 2^63, itself out of range
		return math.MaxInt64, true
	}
	return int64(n), true
}

// Choices is how many answers the request asks the upstream to write, each up to
// OutputCap: chat completions' `n` (absent or null is 1); 1 for shapes without such a
// multiplier.
func (p *ParsedRequest) Choices(op Operation) int64 {
	if op.Kind != KindChat {
		return 1
	}
	if n, ok := wholeNumber(p.get(fieldChoices)); ok {
		return n
	}
	return 1
}
