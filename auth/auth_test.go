package auth_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/auth"
)

func TestKeyFromRequest(t *testing.T) {
	const key = "sk-gw-3f9a1c7e5b2d4f60"
	cases := []struct {
		name string
		h    http.Header
		want string
	}{
		{"bearer", http.Header{"Authorization": {"Bearer " + key}}, key},
		{"bearer lower case", http.Header{"Authorization": {"bearer " + key}}, key},
		{"bearer upper case", http.Header{"Authorization": {"BEARER " + key}}, key},
		{"bearer with extra spaces", http.Header{"Authorization": {"Bearer   " + key + "  "}}, key},
		{"x-api-key", http.Header{"X-Api-Key": {key}}, key},
		{"x-api-key with spaces", http.Header{"X-Api-Key": {" " + key + " "}}, key},
		{"both, same key", http.Header{"Authorization": {"Bearer " + key}, "X-Api-Key": {key}}, key},
		{"both: bearer is used", http.Header{"Authorization": {"Bearer " + key}, "X-Api-Key": {"other"}}, key},
		{"another scheme falls back to x-api-key", http.Header{"Authorization": {"Basic dXNlcjpwYXNz"}, "X-Api-Key": {key}}, key},
		{"another scheme alone", http.Header{"Authorization": {"Basic dXNlcjpwYXNz"}}, ""},
		{"bearer without token", http.Header{"Authorization": {"Bearer"}}, ""},
		{"token without scheme", http.Header{"Authorization": {key}}, ""},
		{"neither", http.Header{"Content-Type": {"application/json"}}, ""},
		{"nil header", nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, auth.KeyFromRequest(tc.h))
		})
	}

	t.Run("header names are case-insensitive on the wire", func(t *testing.T) {
		r, err := http.NewRequest("POST", "http://gw.example/v1/messages", nil)
		require.NoError(t, err)
		r.Header.Set("x-api-key", key)
		assert.Equal(t, key, auth.KeyFromRequest(r.Header))
		r.Header = http.Header{}
		r.Header.Set("authorization", "bearer "+key)
		assert.Equal(t, key, auth.KeyFromRequest(r.Header))
	})
}

func TestStaticKeys(t *testing.T) {
	const (
		aliceKey = "sk-gw-alice-0123456789abcdef"
		botKey   = "sk-gw-ci-bot-fedcba9876543210"
	)
	keys, err := auth.NewStaticKeys([]auth.StaticKey{
		{Name: "alice", Secret: aliceKey},
		{Name: "ci-bot", Secret: botKey, Models: []string{"acme/chat", "acme/sonnet"}},
	})
	require.NoError(t, err)
	var _ auth.Verifier = keys

	alice, ok := keys.Verify(aliceKey)
	require.True(t, ok)
	assert.Equal(t, "alice", alice.Name)
	assert.Equal(t, "static:alice", alice.KeyID)
	assert.NotContains(t, alice.KeyID, aliceKey)
	// No allowlist: every model.
	assert.True(t, alice.MayCall("acme/chat"))
	assert.True(t, alice.MayCall("anything"))

	bot, ok := keys.Verify(botKey)
	require.True(t, ok)
	assert.Equal(t, "static:ci-bot", bot.KeyID)
	assert.True(t, bot.MayCall("acme/chat"))
	assert.True(t, bot.MayCall("acme/sonnet"))
	assert.False(t, bot.MayCall("acme/codex"))
	assert.False(t, bot.MayCall("Acme/Chat"), "model ids are case-sensitive")
	assert.False(t, bot.MayCall(""))

	for _, wrong := range []string{"", "sk-gw-alice", strings.ToUpper(aliceKey), aliceKey + " ", aliceKey[:len(aliceKey)-1], "Bearer " + aliceKey} {
		id, ok := keys.Verify(wrong)
		assert.False(t, ok, "%q", wrong)
		assert.Nil(t, id)
	}
}

func TestNewStaticKeysErrors(t *testing.T) {
	t.Run("short secret", func(t *testing.T) {
		_, err := auth.NewStaticKeys([]auth.StaticKey{{Name: "dev", Secret: "sk-123456789012"}}) // 15 characters
		require.Error(t, err)
		assert.True(t, errors.Is(err, auth.ErrWeakKey))
		assert.Contains(t, err.Error(), `"dev"`)
		assert.NotContains(t, err.Error(), "sk-123456789012", "the secret is not echoed")
	})
	t.Run("sixteen characters are enough", func(t *testing.T) {
		_, err := auth.NewStaticKeys([]auth.StaticKey{{Name: "dev", Secret: "sk-1234567890123"}})
		assert.NoError(t, err)
	})
	t.Run("same secret twice", func(t *testing.T) {
		_, err := auth.NewStaticKeys([]auth.StaticKey{
			{Name: "alice", Secret: "sk-gw-shared-0123456789"},
			{Name: "bob", Secret: "sk-gw-shared-0123456789"},
		})
		require.Error(t, err)
		assert.Contains(t, err.Error(), `"bob"`)
		assert.NotContains(t, err.Error(), "sk-gw-shared")
	})
	t.Run("no name", func(t *testing.T) {
		_, err := auth.NewStaticKeys([]auth.StaticKey{{Secret: "sk-gw-0123456789abcdef"}})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "name")
	})
	t.Run("no keys at all", func(t *testing.T) {
		keys, err := auth.NewStaticKeys(nil)
		require.NoError(t, err)
		_, ok := keys.Verify("sk-gw-0123456789abcdef")
		assert.False(t, ok)
	})
}

func TestHashKey(t *testing.T) {
	assert.Equal(t, auth.HashKey("sk-gw-0123456789abcdef"), auth.HashKey("sk-gw-0123456789abcdef"))
	assert.NotEqual(t, auth.HashKey("sk-gw-0123456789abcdef"), auth.HashKey("sk-gw-0123456789abcdeF"))
}

func TestEmptyBearerDoesNotHideAPIKeyHeader(t *testing.T) {
	h := http.Header{"Authorization": {"Bearer "}, "X-Api-Key": {"sk-from-x-api-key-000"}}
	assert.Equal(t, "sk-from-x-api-key-000", auth.KeyFromRequest(h))
}

func TestStaticKeyNamesAreUnique(t *testing.T) {
	_, err := auth.NewStaticKeys([]auth.StaticKey{
		{Name: "ops", Secret: "sk-first-secret-000000"},
		{Name: "ops", Secret: "sk-second-secret-00000"},
	})
	assert.ErrorContains(t, err, "used twice")
}

// Every header a key may come in is taken off the request, with the secrets in it, so
// that a copy of the key elsewhere can still be told.
func TestTakeKeyHeaders(t *testing.T) {
	h := http.Header{}
	h.Set("Authorization", "Bearer sk-sy-bearer-0123456789")
	h.Set("X-Api-Key", "sk-sy-x-api-key-0123456789")
	h.Set("Api-Key", "short")
	h.Set("X-Goog-Api-Key", "goog-0123456789abcdef")
	h.Set("Proxy-Authorization", "Basic Y29ycDpzZWNyZXQtcGFzc3dvcmQ=")
	h.Set("User-Agent", "my-tool/1.0")
	got := auth.TakeKeyHeaders(h, nil)
	assert.ElementsMatch(t, []string{"sk-sy-bearer-0123456789", "sk-sy-x-api-key-0123456789",
		"goog-0123456789abcdef", "Y29ycDpzZWNyZXQtcGFzc3dvcmQ="}, got,
		"every word long enough to be a key; not Bearer, Basic nor a short value")
	assert.Equal(t, http.Header{"User-Agent": {"my-tool/1.0"}}, h, "only the key headers are taken")

	var room [2]string
	got = auth.TakeKeyHeaders(http.Header{"X-Api-Key": {"sk-sy-x-api-key-0123456789"}}, room[:0])
	assert.Equal(t, "sk-sy-x-api-key-0123456789", room[0], "appended into the room given")
	assert.Len(t, got, 1)
}
