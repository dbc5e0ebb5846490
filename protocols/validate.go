package protocols

import (
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
