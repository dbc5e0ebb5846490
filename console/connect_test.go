package console_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/console"
	"github.com/switchyard-gw/switchyard/store"
)

func connectAPI(t *testing.T) (http.Handler, *auth.Manager) {
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite", filepath.Join(t.TempDir(), "keys.db"))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	cache, err := auth.NewCache(ctx, st)
	require.NoError(t, err)
	models := []console.ModelInfo{
		{ID: "gpt-a", Protocols: []string{"family_a"}, ContextWindow: 400000, MaxOutputTokens: 128000},
		{ID: "msg-b", Protocols: []string{"family_b"}, ContextWindow: 200000, MaxOutputTokens: 64000},
		{ID: "msg-c", Protocols: []string{"family_b"}},
	}
	m := &auth.Manager{Store: st, Cache: cache, ModelExists: func(id string) bool { return id == "msg-c" || id == "gpt-a" }}
	return console.New(&console.API{Keys: m, Models: func() []console.ModelInfo { return models }}), m
}

func TestConnectSetupForAKeysModels(t *testing.T) {
	h, m := connectAPI(t)
	w := do(h, "GET", "/api/connect/claude-code?base_url=https://gw.example.com&key_env=GW_KEY", "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	setup := gjson.Get(w.Body.String(), "setup")
	assert.Equal(t, "claude-code", setup.Get("client").Str)
	assert.Equal(t, `["msg-b","msg-c"]`, setup.Get("models").Raw, "without a key: every Family B model")
	assert.Contains(t, setup.Get("text").Str, "export CLAUDE_CODE_MAX_CONTEXT_TOKENS=200000")
	assert.Contains(t, setup.Get("text").Str, `"$GW_KEY"`)

	// A key limited to some models gets a set-up for those only.
	created, err := m.Create(context.Background(), auth.CreateRequest{Name: "ci", Models: []string{"msg-c", "gpt-a"}})
	require.NoError(t, err)
	w = do(h, "GET", "/api/connect/claude-code?base_url=https://gw.example.com&key="+created.Key.ID, "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	setup = gjson.Get(w.Body.String(), "setup")
	assert.Equal(t, `["msg-c"]`, setup.Get("models").Raw)
	assert.NotContains(t, w.Body.String(), created.Secret, "the key itself is never in a set-up")
	assert.Contains(t, setup.Get("text").Str, "declares no context window for msg-c")

	// A revoked key, an unknown key, a bad request: said so.
	_, err = m.Revoke(context.Background(), created.Key.ID)
	require.NoError(t, err)
	w = do(h, "GET", "/api/connect/codex?base_url=https://gw.example.com&key="+created.Key.ID, "")
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.Contains(t, gjson.Get(w.Body.String(), "error").Str, "revoked")
	w = do(h, "GET", "/api/connect/codex?base_url=https://gw.example.com&key=key_nope", "")
	assert.Equal(t, http.StatusNotFound, w.Code)
	w = do(h, "GET", "/api/connect/codex?base_url=https://gw.example.com/v1", "")
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.Contains(t, gjson.Get(w.Body.String(), "error").Str, "without /v1")
	w = do(h, "GET", "/api/connect/vim?base_url=https://gw.example.com", "")
	assert.Equal(t, http.StatusBadRequest, w.Code)
	w = do(h, "POST", "/api/connect/codex?base_url=https://gw.example.com", "{}")
	assert.NotEqual(t, http.StatusOK, w.Code, "GET only")
}

func TestModelsCarryTheirLimits(t *testing.T) {
	h, _ := connectAPI(t)
	w := do(h, "GET", "/api/models", "")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, int64(400000), gjson.Get(w.Body.String(), "models.0.context_window").Int())
	assert.Equal(t, int64(128000), gjson.Get(w.Body.String(), "models.0.max_output_tokens").Int())
	assert.False(t, gjson.Get(w.Body.String(), "models.2.context_window").Exists(), "left out when not declared")
}
