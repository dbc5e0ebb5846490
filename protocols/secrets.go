package protocols

import (
	"bytes"
	"slices"
	"strings"
)

// secretFinder tells whether bytes hold any of a candidate's secrets. A stream asks it of
// every event, so each secret is searched by its least common byte in SSE and JSON text
// (a host's dot rather than its digits), which the event holds few times or none, and
// a secret that holds another is not searched at all: finding the shorter one is enough.
type secretFinder []anchoredSecret

type anchoredSecret struct {
	text   string
	anchor int // index in text of the byte searched for
}

func newSecretFinder(secrets []string) secretFinder {
	var unique []string
	for _, s := range secrets {
		if len(s) >= 3 && !slices.Contains(unique, s) {
			unique = append(unique, s)
		}
	}
	var f secretFinder
	for _, s := range unique {
		if slices.ContainsFunc(unique, func(other string) bool { return len(other) < len(s) && strings.Contains(s, other) }) {
			continue
		}
		best := 0
		for i := 1; i < len(s); i++ {
			if byteCommonness(s[i]) < byteCommonness(s[best]) {
				best = i
			}
		}
		f = append(f, anchoredSecret{text: s, anchor: best})
	}
	return f
}

// longest is the length of the longest secret searched.
func (f secretFinder) longest() int {
	n := 0
	for _, s := range f {
		n = max(n, len(s.text))
	}
	return n
}

// in reports whether b holds one of the secrets.
func (f secretFinder) in(b []byte) bool {
	for _, s := range f {
		c := s.text[s.anchor]
		for i := s.anchor; i < len(b); {
			k := bytes.IndexByte(b[i:], c)
			if k < 0 {
				break
			}
			if start := i + k - s.anchor; start+len(s.text) <= len(b) && string(b[start:start+len(s.text)]) == s.text {
				return true
			}
			i += k + 1
		}
	}
	return false
}

// byteCommonness ranks how often a byte appears in SSE events of JSON: structure,
// digits and lower-case letters (by English frequency) most, upper case and
// punctuation least.
func byteCommonness(c byte) int {
	switch {
	case strings.IndexByte(`":,{}[] `, c) >= 0:
		return 100
	case c >= '0' && c <= '9':
		return 90
	case c >= 'a' && c <= 'z':
		return 60 + 26 - strings.IndexByte("etaoinsrhldcumfpgwybvkxjqz", c)
	case c >= 'A' && c <= 'Z':
		return 20
	}
	return 10
}
