package auth

import (
	"regexp"
	"strings"
)

// Masked is what a key is replaced with wherever it is masked.
const Masked = "REDACTED"

// URIKeyPatterns are the rules by which a key is told in a URI that carries no other
// sign of it: the value of a query parameter named like a key, and any token starting
// with sk- (its s, k or - percent-encoded or not) that starts the URI or follows a
// character other than a letter or digit (so desk-model stays). Caddyfile.example's
// keyless_log masks the access, error and admin logs' URIs with exactly these (a test
// holds it to them), and MaskKeys masks a trace's with them: a key is kept out of both
// alike. Each keeps its first group and masks the rest of the match.
var URIKeyPatterns = [...]string{
	`(?i)([?&;](?:api[_-]?key|x-api-key|key|access_token|token|auth|authorization)=)[^&;#]*`,
	`(?i)(^|%[0-9a-f][0-9a-f]|[^a-z0-9])(?:s|%73)(?:k|%6b)(?:-|%2d)[^/?&;#]*`,
}

var uriKeyRules = func() (rules [len(URIKeyPatterns)]*regexp.Regexp) {
	for i, p := range URIKeyPatterns {
		rules[i] = regexp.MustCompile(p)
	}
	return rules
}()

// maxVerifiedSegments bounds how many segments of one URI are looked up as keys.
const maxVerifiedSegments = 16

// MaskKeys returns s with every key in it replaced by Masked: what URIKeyPatterns
// find, each of known (the secrets the client sent in its key headers), and each
// /-separated segment that isKey says is a key of this gateway (a configured key need
// not start with sk-; isKey may be nil). s comes back as it was, not copied, when it
// holds none.
func MaskKeys(s string, known []string, isKey func(string) bool) string {
	for _, k := range known {
		if k != "" && strings.Contains(s, k) {
			s = strings.ReplaceAll(s, k, Masked)
		}
	}
	// Both patterns need a '=', a '-' or an escape: most URIs have none, and skip them.
	if strings.ContainsAny(s, "=-%") {
		for _, re := range uriKeyRules {
			s = re.ReplaceAllString(s, "${1}"+Masked)
		}
	}
	if isKey == nil {
		return s
	}
	verified := 0
	for segment := range strings.SplitSeq(s, "/") {
		if len(segment) < MinKeyLength || segment == Masked {
			continue
		}
		if verified++; verified > maxVerifiedSegments {
			break
		}
		if isKey(segment) {
			s = strings.ReplaceAll(s, segment, Masked)
		}
	}
	return s
}
