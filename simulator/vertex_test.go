package simulator

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

var vertexKeys = sync.OnceValue(func() [2]*rsa.PrivateKey {
	var ks [2]*rsa.PrivateKey
	for i := range ks {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		ks[i] = k
	}
	return ks
})

// signJWT is a service account's assertion with the given claims, signed by key.
func signJWT(t *testing.T, key *rsa.PrivateKey, claims map[string]any) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	signed := enc(map[string]string{"alg": "RS256", "typ": "JWT"}) + "." + enc(claims)
	digest := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, digest[:])
	require.NoError(t, err)
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func goodClaims(aud string) map[string]any {
	now := time.Now().Unix()
	return map[string]any{"iss": "sa@p.iam.gserviceaccount.com", "scope": "https://www.googleapis.com/auth/cloud-platform",
		"aud": aud, "iat": now, "exp": now + 3600}
}

func vertexSim(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(New(Config{VertexPublicKey: &vertexKeys()[0].PublicKey}))
	t.Cleanup(srv.Close)
	return srv
}

func postToken(t *testing.T, srv *httptest.Server, form url.Values) (int, gjson.Result) {
	t.Helper()
	resp, err := http.PostForm(srv.URL+"/token", form)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, gjson.ParseBytes(b)
}

func jwtForm(assertion string) url.Values {
	return url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:jwt-bearer"}, "assertion": {assertion}}
}

func TestVertexTokenEndpoint(t *testing.T) {
	srv := vertexSim(t)
	status, doc := postToken(t, srv, jwtForm(signJWT(t, vertexKeys()[0], goodClaims(srv.URL+"/token"))))
	require.Equal(t, http.StatusOK, status, doc.Raw)
	assert.NotEmpty(t, doc.Get("access_token").Str)
	assert.Equal(t, int64(3600), doc.Get("expires_in").Int())
	assert.Equal(t, "Bearer", doc.Get("token_type").Str)

	expired := goodClaims(srv.URL + "/token")
	expired["exp"] = time.Now().Add(-time.Minute).Unix()
	noScope := goodClaims(srv.URL + "/token")
	noScope["scope"] = "https://www.googleapis.com/auth/userinfo.email"
	refused := map[string]url.Values{
		"another key's signature": jwtForm(signJWT(t, vertexKeys()[1], goodClaims(srv.URL+"/token"))),
		"expired":                 jwtForm(signJWT(t, vertexKeys()[0], expired)),
		"no cloud-platform scope": jwtForm(signJWT(t, vertexKeys()[0], noScope)),
		"not a JWT":               jwtForm("abc.def"),
		"another grant": {"grant_type": {"client_credentials"},
			"assertion": {signJWT(t, vertexKeys()[0], goodClaims(srv.URL+"/token"))}},
	}
	for name, form := range refused {
		status, doc := postToken(t, srv, form)
		assert.Equal(t, http.StatusBadRequest, status, name)
		assert.NotEmpty(t, doc.Get("error").Str, name)
		assert.False(t, doc.Get("access_token").Exists(), name)
	}

	keyless := httptest.NewServer(New(Config{}))
	defer keyless.Close()
	status, _ = postToken(t, keyless, jwtForm(signJWT(t, vertexKeys()[0], goodClaims(keyless.URL+"/token"))))
	assert.Equal(t, http.StatusBadRequest, status, "without a known key no assertion is accepted")
}

func vertexToken(t *testing.T, srv *httptest.Server) string {
	status, doc := postToken(t, srv, jwtForm(signJWT(t, vertexKeys()[0], goodClaims(srv.URL+"/token"))))
	require.Equal(t, http.StatusOK, status)
	return doc.Get("access_token").Str
}

const vertexModelPath = "/v1/projects/p/locations/us-east5/publishers/anthropic/models/"

func vertexCall(t *testing.T, srv *httptest.Server, token, path, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func TestVertexModelPaths(t *testing.T) {
	srv := vertexSim(t)
	tok := vertexToken(t, srv)
	const ok = `{"anthropic_version":"vertex-2023-10-16","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`

	resp, b := vertexCall(t, srv, tok, vertexModelPath+"claude-a@1:rawPredict", ok)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	assert.Equal(t, "claude-a@1", gjson.GetBytes(b, "model").Str)
	assert.Equal(t, ReplyText, gjson.GetBytes(b, "content.0.text").Str)

	resp, b = vertexCall(t, srv, tok, vertexModelPath+"claude-a@1:streamRawPredict", strings.Replace(ok, `{`, `{"stream":true,`, 1))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	assert.Contains(t, string(b), "event: message_stop")

	resp, b = vertexCall(t, srv, tok, vertexModelPath+"count-tokens:rawPredict", strings.Replace(ok, `{`, `{"model":"claude-a@1",`, 1))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	assert.Positive(t, gjson.GetBytes(b, "input_tokens").Int())

	for name, tc := range map[string]struct {
		token, path, body string
		status            int
	}{
		"no token":        {"", vertexModelPath + "m:rawPredict", ok, 401},
		"unknown token":   {"ya29.forged", vertexModelPath + "m:rawPredict", ok, 401},
		"model in body":   {tok, vertexModelPath + "m:rawPredict", strings.Replace(ok, `{`, `{"model":"m",`, 1), 400},
		"no version":      {tok, vertexModelPath + "m:rawPredict", `{"max_tokens":5,"messages":[]}`, 400},
		"wrong version":   {tok, vertexModelPath + "m:rawPredict", `{"anthropic_version":"2023-06-01","messages":[]}`, 400},
		"stream on raw":   {tok, vertexModelPath + "m:rawPredict", strings.Replace(ok, `{`, `{"stream":true,`, 1), 400},
		"no stream":       {tok, vertexModelPath + "m:streamRawPredict", ok, 400},
		"count, no model": {tok, vertexModelPath + "count-tokens:rawPredict", ok, 400},
		"bad path":        {tok, "/v1/projects/p/publishers/anthropic/models/m:rawPredict", ok, 404},
		"no locations":    {tok, "/v1/projects/p/regions/us-east5/publishers/anthropic/models/m:rawPredict", ok, 404},
	} {
		resp, b := vertexCall(t, srv, tc.token, tc.path, tc.body)
		assert.Equal(t, tc.status, resp.StatusCode, "%s: %s", name, b)
	}
	resp, b = vertexCall(t, srv, "", vertexModelPath+"m:rawPredict", ok)
	assert.Equal(t, "UNAUTHENTICATED", gjson.GetBytes(b, "error.status").Str, "Google's own shape: %s", b)
}

func TestVertexRateLimitIsGooglesArray(t *testing.T) {
	srv := vertexSim(t)
	tok := vertexToken(t, srv)
	body := `{"anthropic_version":"vertex-2023-10-16","max_tokens":5,"messages":[]}`
	resp, b := vertexCall(t, srv, tok, vertexModelPath+"m+rate-limit+first-1:rawPredict", body)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	doc := gjson.ParseBytes(b)
	require.True(t, doc.IsArray(), string(b))
	assert.Equal(t, "RESOURCE_EXHAUSTED", doc.Get("0.error.status").Str)
	assert.Equal(t, int64(429), doc.Get("0.error.code").Int())

	resp, b = vertexCall(t, srv, tok, vertexModelPath+"m+rate-limit+first-1:rawPredict", body)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "schedules apply as on other paths: %s", b)
}
