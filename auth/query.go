package auth

import (
	"net/url"
	"strings"
)

// queryKeyNames are query parameters that carry an API key in some client or API. A
// gateway key must never travel in a URL: URLs end up in logs, proxies and histories.
var queryKeyNames = []string{"key", "api_key", "api-key", "apikey", "x-api-key", "access_token", "token", "auth", "authorization"}

// maxVerifiedQueryValues bounds how many query values are looked up as keys.
const maxVerifiedQueryValues = 16

// KeyInQuery reports whether a URL's query string carries what looks like an API key: a
// parameter named like one, or a value that is a key this gateway knows (isKey) or has
// the usual secret-key prefix.
func KeyInQuery(rawQuery string, isKey func(string) bool) bool {
	// Split by hand: url.ParseQuery drops a pair it cannot unescape, and such a pair
	// would still be forwarded in the raw query.
	verified := 0
	for pair := range strings.FieldsFuncSeq(rawQuery, func(r rune) bool { return r == '&' || r == ';' }) {
		name, value, _ := strings.Cut(pair, "=")
		name, value = unescapeLoosely(name), unescapeLoosely(value)
		for _, known := range queryKeyNames {
			if strings.EqualFold(name, known) {
				return true
			}
		}
		if strings.HasPrefix(value, "sk-") {
			return true
		}
		// Each lookup hashes the value; a URL with thousands of long values must not
		// cost thousands of hashes. Keys are long, so short values are not looked up.
		if len(value) >= MinKeyLength && verified < maxVerifiedQueryValues {
			verified++
			if isKey(value) {
				return true
			}
		}
	}
	return false
}

// unescapeLoosely unescapes a query component, or leaves it as sent when it is malformed.
func unescapeLoosely(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}
