package auth_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/auth"
)

func TestCheckKeyName(t *testing.T) {
	cases := []struct {
		in   string
		want string // the accepted name; empty when refused
		err  string // part of the error when refused
	}{
		{"ci-bot", "ci-bot", ""},
		{"  team a / nightly  ", "team a / nightly", ""},
		{"Équipe données", "Équipe données", ""},
		{"東京チーム", "東京チーム", ""},
		{"deploy 🚀", "deploy 🚀", ""},
		{"a\u00a0b", "a\u00a0b", ""}, // a no-break space is a space
		{strings.Repeat("é", 100), strings.Repeat("é", 100), ""},
		{strings.Repeat("鍵", 100), strings.Repeat("鍵", 100), ""}, // 300 bytes, 100 characters

		{"", "", "name: required"},
		{" \t\n ", "", "name: required"},
		{strings.Repeat("a", 101), "", "at most 100 characters"},
		{strings.Repeat("鍵", 101), "", "at most 100 characters"},
		{"bad\x00name", "", "character 4 (U+0000) is a control character"},
		{"red\x1b[31malert", "", "character 4 (U+001B) is a control character"},
		{"tab\tname", "", "U+0009) is a control character"},
		{"two\nlines", "", "U+000A) is a control character"},
		{"del\x7f", "", "U+007F) is a control character"},
		{"c1\u009bcsi", "", "U+009B) is a control character"},
		{"admin\u202egnp.exe", "", "character 6 (U+202E) is an invisible formatting character"},
		{"zero\u200bwidth", "", "U+200B) is an invisible formatting character"},
		{"bom\ufeff", "", "U+FEFF) is an invisible formatting character"},
		{"line\u2028sep", "", "U+2028) is a line break"},
		{"private\ue000use", "", "U+E000) is not a printable character"},
		{"bad\xffutf8", "", "not valid UTF-8"},
	}
	for _, c := range cases {
		got, err := auth.CheckKeyName(c.in)
		if c.err == "" {
			require.NoError(t, err, "%q", c.in)
			assert.Equal(t, c.want, got)
			continue
		}
		require.Error(t, err, "%q must be refused", c.in)
		assert.Contains(t, err.Error(), c.err, "%q", c.in)
		assert.Empty(t, got)
		// The message names the character by its code point; it never carries it.
		for _, r := range err.Error() {
			assert.True(t, r >= 0x20 && r < 0x7f, "error for %q has %U", c.in, r)
		}
	}
}

func TestPrintableName(t *testing.T) {
	cases := map[string]string{
		"ci-bot":                   "ci-bot",
		"東京 チーム 🚀":                 "東京 チーム 🚀",
		"bad\x00name":              `"bad\x00name"`,
		"red\x1b[31malert\x1b[0m":  `"red\x1b[31malert\x1b[0m"`,
		"admin\u202egnp.exe":       `"admin\u202egnp.exe"`,
		"tab\tname":                `"tab\tname"`,
		"bad\xffutf8":              `"bad\xffutf8"`,
		`already "quoted" is fine`: `already "quoted" is fine`,
	}
	for in, want := range cases {
		got := auth.PrintableName(in)
		assert.Equal(t, want, got, "%q", in)
		assert.NotContains(t, got, "\x1b")
		assert.NotContains(t, got, "\x00")
		assert.NotContains(t, got, "\u202e")
	}
}
