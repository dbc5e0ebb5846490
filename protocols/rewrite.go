package protocols

import (
	"bytes"
	"regexp"
	"unicode/utf8"

	"github.com/tidwall/sjson"
)

// ValueSpan locates the raw JSON value at path: body[start:end] is the value's bytes
// (quotes included for a string). ok is false when the path is absent.
func ValueSpan(body []byte, path string) (start, end int, ok bool) {
	r := getView(body, path)
	if !r.Exists() || r.Index <= 0 {
		return 0, 0, false
	}
	return r.Index, r.Index + len(r.Raw), true
}

// SetString returns a copy of body with the string value at path set to value. Only that
// value's bytes change; the copy is sized once. A path that is absent is added by sjson.
func SetString(body []byte, path, value string) []byte {
	start, end, ok := ValueSpan(body, path)
	if !ok {
		out, err := sjson.SetBytes(body, path, value)
		if err != nil {
			return body
		}
		return out
	}
	out := make([]byte, 0, len(body)-(end-start)+len(value)+2)
	out = append(out, body[:start]...)
	out = AppendJSONString(out, value)
	return append(out, body[end:]...)
}

// AppendJSONString appends s as a JSON string literal.
func AppendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, `\ufffd`...)
			} else {
				dst = append(dst, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
	}
	return append(dst, '"')
}

// PrepareRequestBody is ParsedRequest.Upstream for a body not parsed yet, joined into
// one slice.
func PrepareRequestBody(op Operation, body []byte, upstreamModel string) (out []byte, injectedUsage bool) {
	p, err := ParseRequest(op.Family, body)
	if err != nil {
		return body, false
	}
	up, injected := p.Upstream(op, upstreamModel)
	return up.Bytes(), injected
}

// ResponseModelPath is where the model sits in a non-streamed JSON response of op.
// All three generation shapes carry it at the top level; token counts carry none.
func ResponseModelPath(op Operation) string {
	switch op.Kind {
	case KindChat, KindResponses, KindMessages, KindResponsesCompact:
		return "model"
	}
	return ""
}

// Scrubber removes what would reveal a candidate from upstream text that is passed back
// to a client (error bodies and in-band error events): the upstream model name becomes the
// service model id, and hosts, credentials and account identifiers are masked.
type Scrubber struct {
	UpstreamModel string
	ServiceModel  string
	Secrets       []string // upstream host names, credentials
}

// accountIDs matches upstream organisation and project identifiers as they appear in
// provider error messages.
var accountIDs = regexp.MustCompile(`\b(org|proj)[-_][A-Za-z0-9]{4,}\b`)

// Scrub returns b with every sensitive value replaced. It only copies when it must.
func (s Scrubber) Scrub(b []byte) []byte {
	if s.UpstreamModel != "" && s.UpstreamModel != s.ServiceModel {
		b = bytes.ReplaceAll(b, []byte(s.UpstreamModel), []byte(s.ServiceModel))
	}
	for _, secret := range s.Secrets {
		if len(secret) >= 3 {
			b = bytes.ReplaceAll(b, []byte(secret), []byte("[redacted]"))
		}
	}
	return accountIDs.ReplaceAll(b, []byte("[redacted]"))
}
