package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/console"
	"github.com/switchyard-gw/switchyard/store"
)

func newAPI(t *testing.T, requireHeader string) http.Handler {
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite", filepath.Join(t.TempDir(), "keys.db"))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	cache, err := auth.NewCache(ctx, st)
	require.NoError(t, err)
	api := &console.API{
		Keys:          &auth.Manager{Store: st, Cache: cache, ModelExists: func(id string) bool { return id == "m" }},
		RequireHeader: requireHeader,
	}
	return console.New(api)
}

func do(h http.Handler, method, path, body string, headers ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func TestChangesNeedTheConsoleHeader(t *testing.T) {
	h := newAPI(t, console.ConsoleHeader)
	w := do(h, "POST", "/api/keys", `{"name":"forged"}`)
	assert.Equal(t, http.StatusForbidden, w.Code, "a page elsewhere cannot create keys through an operator's browser")
	w = do(h, "GET", "/api/keys", "")
	assert.Equal(t, 200, w.Code, "reading needs no header")
	assert.Equal(t, 0, len(gjson.Get(w.Body.String(), "keys").Array()))

	w = do(h, "POST", "/api/keys", `{"name":"real"}`, console.ConsoleHeader, "1")
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	secret := gjson.Get(w.Body.String(), "secret").Str
	id := gjson.Get(w.Body.String(), "key.id").Str
	assert.Equal(t, "no-store", w.Header().Get("Cache-Control"), "an answer with a secret is never cached")
	assert.Contains(t, w.Header().Get("Content-Security-Policy"), "default-src 'self'")

	list := do(h, "GET", "/api/keys", "").Body.String()
	assert.NotContains(t, list, secret, "the secret is shown once, at creation")
	assert.Equal(t, http.StatusForbidden, do(h, "POST", "/api/keys/"+id+"/revoke", "").Code)
	assert.Equal(t, http.StatusForbidden, do(h, "DELETE", "/api/keys/"+id, "").Code)
	assert.Equal(t, 200, do(h, "POST", "/api/keys/"+id+"/revoke", "", console.ConsoleHeader, "1").Code)
}

func TestBadRequestsAreRefusedClearly(t *testing.T) {
	h := newAPI(t, "")
	for _, c := range []struct{ body, want string }{
		{`{"name":"x","colour":"blue"}`, "colour"},
		{`{"name":"x","expires_in":"soon"}`, "expires_in"},
		{`{"name":"x","expires_at":"tomorrow"}`, "expires_at"},
		{`{"name":"x","expires_in":"1d","expires_at":"2030-01-01T00:00:00Z"}`, "not both"},
		{`{"name":"x","models":["nope"]}`, "nope"},
		{`{"name":"  "}`, "name"},
		{`not json`, "JSON"},
	} {
		w := do(h, "POST", "/api/keys", c.body)
		assert.Equal(t, http.StatusBadRequest, w.Code, c.body)
		assert.Contains(t, gjson.Get(w.Body.String(), "error").Str, c.want, c.body)
	}
	assert.Equal(t, http.StatusNotFound, do(h, "GET", "/api/keys/key_nope", "").Code)
	assert.Equal(t, http.StatusNotFound, do(h, "POST", "/api/keys/key_nope/rotate", "{}").Code)
	assert.Equal(t, http.StatusServiceUnavailable, do(h, "GET", "/api/usage", "").Code, "no usage store: said plainly")
	assert.Equal(t, http.StatusNotFound, do(h, "GET", "/api/nothing", "").Code)

	// Rotating a key twice: the second rotation names the key that replaced it.
	id := gjson.Get(do(h, "POST", "/api/keys", `{"name":"r"}`).Body.String(), "key.id").Str
	w := do(h, "POST", "/api/keys/"+id+"/rotate", `{"grace":"1h"}`)
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	again := do(h, "POST", "/api/keys/"+id+"/rotate", `{}`)
	assert.Equal(t, http.StatusBadRequest, again.Code)
	assert.Contains(t, gjson.Get(again.Body.String(), "error").Str, "already replaced")
}
