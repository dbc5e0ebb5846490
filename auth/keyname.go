package auth

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxKeyNameChars is the longest key name, in Unicode characters (code points).
const MaxKeyNameChars = 100

// CheckKeyName is the rule for a key's name, wherever a name comes in (the admin API, the
// console, the CLI, the configuration): printable text a person can read in a list and a
// terminal can show as it is. It returns the name without surrounding white space.
//
// A name is valid UTF-8 of 1 to MaxKeyNameChars characters once trimmed, each of them a
// letter, mark, number, punctuation, symbol or space (unicode.IsGraphic). That leaves out
// control characters (NUL, escape sequences, tabs and line breaks), invisible format
// characters (bidirectional overrides, zero-width characters), line and paragraph
// separators, private-use and unassigned code points. The error names the offending
// character by its code point, never by printing it.
func CheckKeyName(name string) (string, error) {
	if !utf8.ValidString(name) {
		return "", fmt.Errorf("name: not valid UTF-8 text")
	}
	name = strings.TrimSpace(name)
	if name == "" {
		return "", fmt.Errorf("name: required")
	}
	pos := 0
	for _, r := range name {
		pos++
		if pos > MaxKeyNameChars {
			return "", fmt.Errorf("name: at most %d characters", MaxKeyNameChars)
		}
		if unicode.IsGraphic(r) {
			continue
		}
		what := "not a printable character"
		switch {
		case unicode.Is(unicode.Cc, r):
			what = "a control character"
		case unicode.Is(unicode.Cf, r):
			what = "an invisible formatting character"
		case unicode.In(r, unicode.Zl, unicode.Zp):
			what = "a line break"
		}
		return "", fmt.Errorf("name: character %d (U+%04X) is %s; use printable text", pos, r, what)
	}
	return name, nil
}

// PrintableName is a stored name as it is safe to print on a terminal: unchanged when it
// is printable text, otherwise quoted with every other character escaped (\x00, \x1b,
// \u202e), so a name stored before CheckKeyName existed cannot move the cursor, recolour
// the screen or reverse the text around it.
func PrintableName(s string) string {
	if !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsGraphic(r) }) >= 0 {
		return strconv.QuoteToGraphic(s)
	}
	return s
}
