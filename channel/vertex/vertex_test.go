package vertex_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/channel"
	"github.com/switchyard-gw/switchyard/channel/vertex"
	"github.com/switchyard-gw/switchyard/protocols"
)

var (
	messagesOp = protocols.Operation{Family: protocols.FamilyB, Kind: protocols.KindMessages}
	countOp    = protocols.Operation{Family: protocols.FamilyB, Kind: protocols.KindMessagesCountTokens}
)

// newChannel is a channel whose service account gets its tokens from ts.
func newChannel(t *testing.T, ts *tokenServer, cfg vertex.Config) *vertex.Channel {
	t.Helper()
	cfg.CredentialsJSON = serviceAccountJSON(t, ts.URL+"/token")
	ch, err := vertex.New(context.Background(), cfg)
	require.NoError(t, err)
	return ch
}

func TestURLPerRegionKind(t *testing.T) {
	ts := newTokenServer(t, 3600)
	cases := []struct{ region, want string }{
		{"us-east5", "https://us-east5-aiplatform.googleapis.com/v1/projects/my-proj/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict"},
		{"global", "https://aiplatform.googleapis.com/v1/projects/my-proj/locations/global/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict"},
		{"us", "https://aiplatform.us.rep.googleapis.com/v1/projects/my-proj/locations/us/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict"},
		{"eu", "https://aiplatform.eu.rep.googleapis.com/v1/projects/my-proj/locations/eu/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict"},
	}
	for _, tc := range cases {
		t.Run(tc.region, func(t *testing.T) {
			ch := newChannel(t, ts, vertex.Config{Project: "my-proj", Region: tc.region})
			req, err := ch.NewRequest(context.Background(), messagesOp, []byte(`{"model":"claude-sonnet-4-5@20250929","max_tokens":5}`), false, http.Header{})
			require.NoError(t, err)
			assert.Equal(t, tc.want, req.URL.String())
			assert.Equal(t, http.MethodPost, req.Method)
			assert.Contains(t, ch.Secrets(), strings.TrimPrefix(strings.SplitN(tc.want, "/v1/", 2)[0], "https://"), "the region's host is a secret")
		})
	}

	ch := newChannel(t, ts, vertex.Config{Project: "my proj", Region: "europe-west1"})
	req, err := ch.NewRequest(context.Background(), messagesOp, []byte(`{"model":"odd/model x","stream":true}`), true, http.Header{})
	require.NoError(t, err)
	assert.Equal(t, "https://europe-west1-aiplatform.googleapis.com/v1/projects/my%20proj/locations/europe-west1/publishers/anthropic/models/odd%2Fmodel%20x:streamRawPredict",
		req.URL.String(), "stream picks streamRawPredict; project and model are escaped as one path segment each")
}

func TestEndpointOverrideKeepsItsPath(t *testing.T) {
	ts := newTokenServer(t, 3600)
	ch := newChannel(t, ts, vertex.Config{Project: "p", Region: "us-east5", Endpoint: "http://127.0.0.1:9/base/"})
	req, err := ch.NewRequest(context.Background(), messagesOp, []byte(`{"model":"m"}`), false, http.Header{})
	require.NoError(t, err)
	assert.Equal(t, "http://127.0.0.1:9/base/v1/projects/p/locations/us-east5/publishers/anthropic/models/m:rawPredict", req.URL.String())
	assert.Equal(t, "http://127.0.0.1:9/base", ch.Endpoint().String())
}

func TestMessagesBodyAndHeaders(t *testing.T) {
	ts := newTokenServer(t, 3600)
	ch := newChannel(t, ts, vertex.Config{Project: "p", Region: "us-east5"})
	h := http.Header{}
	h.Set("Anthropic-Version", "2023-06-01")
	h.Set("Anthropic-Beta", "interleaved-thinking-2025-05-14")
	h.Set("X-Api-Key", "sk-client")
	req, err := ch.NewRequest(context.Background(), messagesOp,
		[]byte(`{"model":"claude-x@1","max_tokens":9,"stream":true,"messages":[{"role":"user","content":"hi"}]}`), true, h)
	require.NoError(t, err)
	body, err := io.ReadAll(req.Body)
	require.NoError(t, err)
	doc := gjson.ParseBytes(body)
	assert.False(t, doc.Get("model").Exists(), "the model goes in the URL, not the body")
	assert.Equal(t, "vertex-2023-10-16", doc.Get("anthropic_version").Str)
	assert.True(t, doc.Get("stream").Bool(), "stream stays in the body")
	assert.Equal(t, int64(9), doc.Get("max_tokens").Int())
	assert.Equal(t, "hi", doc.Get("messages.0.content").Str)
	assert.Empty(t, req.Header.Get("Anthropic-Version"), "the version travels in the body")
	assert.Empty(t, req.Header.Get("X-Api-Key"))
	assert.Equal(t, "interleaved-thinking-2025-05-14", req.Header.Get("Anthropic-Beta"))
	assert.Equal(t, "Bearer tok-1", req.Header.Get("Authorization"))
	assert.Equal(t, "application/json", req.Header.Get("Content-Type"))
	assert.Equal(t, "2023-06-01", h.Get("Anthropic-Version"), "the caller's headers are not changed")
}

func TestCountTokensKeepsModel(t *testing.T) {
	ts := newTokenServer(t, 3600)
	ch := newChannel(t, ts, vertex.Config{Project: "p", Region: "us-east5"})
	assert.True(t, ch.Offers(countOp))
	assert.False(t, ch.Offers(protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindChat}))
	req, err := ch.NewRequest(context.Background(), countOp, []byte(`{"model":"claude-x@1","messages":[]}`), false, http.Header{})
	require.NoError(t, err)
	assert.Equal(t, "https://us-east5-aiplatform.googleapis.com/v1/projects/p/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict", req.URL.String())
	body, _ := io.ReadAll(req.Body)
	assert.Equal(t, "claude-x@1", gjson.GetBytes(body, "model").Str)
	assert.Equal(t, "vertex-2023-10-16", gjson.GetBytes(body, "anthropic_version").Str)
}

func TestTokenIsReusedUntilItExpires(t *testing.T) {
	ts := newTokenServer(t, 3600)
	ch := newChannel(t, ts, vertex.Config{Project: "p", Region: "us-east5"})
	for range 3 {
		req, err := ch.NewRequest(context.Background(), messagesOp, []byte(`{"model":"m"}`), false, http.Header{})
		require.NoError(t, err)
		assert.Equal(t, "Bearer tok-1", req.Header.Get("Authorization"))
	}
	assert.Equal(t, 1, ts.count(), "one token for an hour's requests")
	form := ts.forms[0]
	assert.Equal(t, "urn:ietf:params:oauth:grant-type:jwt-bearer", form.Get("grant_type"))
	claims := strings.Split(form.Get("assertion"), ".")
	require.Len(t, claims, 3, "a signed JWT")
}

func TestTokenIsRefreshedBeforeExpiry(t *testing.T) {
	// A token that lives 5 s is already inside the refresh margin: every request gets
	// a new one, as a token about to expire would.
	ts := newTokenServer(t, 5)
	ch := newChannel(t, ts, vertex.Config{Project: "p", Region: "us-east5"})
	for i := 1; i <= 2; i++ {
		req, err := ch.NewRequest(context.Background(), messagesOp, []byte(`{"model":"m"}`), false, http.Header{})
		require.NoError(t, err)
		assert.Equal(t, "Bearer tok-"+strconv.Itoa(i), req.Header.Get("Authorization"))
	}
	assert.Equal(t, 2, ts.count())
}

func TestTokenFailureIsACredentialError(t *testing.T) {
	ts := newTokenServer(t, 3600)
	ts.status = http.StatusBadRequest
	ch := newChannel(t, ts, vertex.Config{Project: "p", Region: "us-east5"})
	_, err := ch.NewRequest(context.Background(), messagesOp, []byte(`{"model":"m"}`), false, http.Header{})
	require.Error(t, err)
	assert.True(t, errors.Is(err, channel.ErrCredential))
	assert.NotContains(t, err.Error(), saEmail, "the token endpoint's text is not repeated")
	assert.NotContains(t, err.Error(), "BEGIN")
}

func TestUnreachableTokenEndpointIsACredentialError(t *testing.T) {
	ts := newTokenServer(t, 3600)
	ch := newChannel(t, ts, vertex.Config{Project: "p", Region: "us-east5"})
	ts.Close()
	_, err := ch.NewRequest(context.Background(), messagesOp, []byte(`{"model":"m"}`), false, http.Header{})
	require.Error(t, err)
	assert.ErrorIs(t, err, channel.ErrCredential)
	assert.NotContains(t, err.Error(), "127.0.0.1", "the token endpoint is not named")
}

func TestTokenWaitEndsWithTheRequest(t *testing.T) {
	release := make(chan struct{})
	ts := newTokenServer(t, 3600)
	inner := ts.Config.Handler
	entered := make(chan struct{}, 1)
	ts.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		inner.ServeHTTP(w, r)
	})
	defer close(release)
	ch := newChannel(t, ts, vertex.Config{Project: "p", Region: "us-east5"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := ch.NewRequest(ctx, messagesOp, []byte(`{"model":"m"}`), false, http.Header{})
		done <- err
	}()
	<-entered
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
}

func TestSecrets(t *testing.T) {
	ts := newTokenServer(t, 3600)
	ch := newChannel(t, ts, vertex.Config{Region: "us-east5"})
	s := ch.Secrets()
	assert.Contains(t, s, saProject, "the project comes from the credentials when not configured")
	assert.Contains(t, s, saEmail)
	assert.Contains(t, s, "us-east5-aiplatform.googleapis.com")
	assert.NotContains(t, s, "us-east5", "a region is masked in errors only")
	assert.Equal(t, []string{"us-east5"}, ch.Names())
	g := newChannel(t, ts, vertex.Config{Project: "p", Region: "global"})
	assert.Empty(t, g.Names(), "an ordinary word is not masked")
}

func TestLoadErrors(t *testing.T) {
	ts := newTokenServer(t, 3600)
	good := serviceAccountJSON(t, ts.URL+"/token")
	badKey := []byte(strings.Replace(string(good), "PRIVATE KEY-----\\n", "PRIVATE KEY-----\\nZZZZ", 1))
	cases := []struct {
		name string
		cfg  vertex.Config
		want string
	}{
		{"no region", vertex.Config{Project: "p", CredentialsJSON: good}, "region: is required"},
		{"bad region", vertex.Config{Project: "p", Region: "evil.example.com/", CredentialsJSON: good}, "region: must be"},
		{"missing file", vertex.Config{Project: "p", Region: "us-east5", CredentialsFile: "/nonexistent/sa.json"}, "credentials: cannot be read"},
		{"not json", vertex.Config{Project: "p", Region: "us-east5", CredentialsJSON: []byte("secret-not-json-xyz")}, "credentials: not a JSON object"},
		{"external account", vertex.Config{Project: "p", Region: "us-east5",
			CredentialsJSON: []byte(`{"type":"external_account","audience":"secret-aud-xyz"}`)}, `credentials: type "external_account" is not accepted`},
		{"broken key", vertex.Config{Project: "p", Region: "us-east5", CredentialsJSON: badKey}, "credentials: private_key"},
		{"bad endpoint", vertex.Config{Project: "p", Region: "us-east5", CredentialsJSON: good, Endpoint: "ftp://x"}, "endpoint: must be"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := vertex.New(context.Background(), tc.cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			for _, secret := range []string{"secret-not-json-xyz", "secret-aud-xyz", saEmail, "ZZZZ"} {
				assert.NotContains(t, err.Error(), secret)
			}
		})
	}
}

func TestApplicationDefaultCredentials(t *testing.T) {
	ts := newTokenServer(t, 3600)
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", writeFile(t, "adc.json", serviceAccountJSON(t, ts.URL+"/token")))
	ch, err := vertex.New(context.Background(), vertex.Config{Region: "us-east5"})
	require.NoError(t, err)
	req, err := ch.NewRequest(context.Background(), messagesOp, []byte(`{"model":"m"}`), false, http.Header{})
	require.NoError(t, err)
	assert.Equal(t, "Bearer tok-1", req.Header.Get("Authorization"))
	assert.Contains(t, req.URL.Path, "/projects/"+saProject+"/")
	assert.Contains(t, ch.Secrets(), saEmail)
}

func TestCredentialsFile(t *testing.T) {
	ts := newTokenServer(t, 3600)
	path := writeFile(t, "sa.json", serviceAccountJSON(t, ts.URL+"/token"))
	ch, err := vertex.New(context.Background(), vertex.Config{Project: "p", Region: "us-east5", CredentialsFile: path})
	require.NoError(t, err)
	req, err := ch.NewRequest(context.Background(), messagesOp, []byte(`{"model":"m"}`), false, http.Header{})
	require.NoError(t, err)
	assert.Equal(t, "Bearer tok-1", req.Header.Get("Authorization"))
}

func TestAuthorizedUserCredentials(t *testing.T) {
	ts := newTokenServer(t, 3600)
	raw := `{"type":"authorized_user","client_id":"cid","client_secret":"csecret","refresh_token":"rtok","token_uri":"` + ts.URL + `/token"}`
	ch, err := vertex.New(context.Background(), vertex.Config{Project: "p", Region: "us-east5", CredentialsJSON: []byte(raw)})
	require.NoError(t, err)
	req, err := ch.NewRequest(context.Background(), messagesOp, []byte(`{"model":"m"}`), false, http.Header{})
	require.NoError(t, err)
	assert.Equal(t, "Bearer tok-1", req.Header.Get("Authorization"))
	assert.Equal(t, "refresh_token", ts.forms[0].Get("grant_type"))
	assert.Equal(t, "rtok", ts.forms[0].Get("refresh_token"))
}

func errorResponse(status int, body string) *http.Response {
	return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}, "Content-Length": {"999"}},
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: 999}
}

func TestGoogleErrorsBecomeAnthropicEnvelopes(t *testing.T) {
	ts := newTokenServer(t, 3600)
	ch := newChannel(t, ts, vertex.Config{Project: "p", Region: "us-east5"})
	quota := `{"error":{"code":429,"message":"Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model with base model: anthropic-claude. Please submit a quota increase request.","status":"RESOURCE_EXHAUSTED"}}`
	cases := []struct {
		name     string
		status   int
		body     string
		wantType string
		wantMsg  string
	}{
		{"object 429", 429, quota, "rate_limit_error", "Quota exceeded"},
		{"array 429", 429, "[" + quota + "]", "rate_limit_error", "Quota exceeded"},
		{"503", 503, `[{"error":{"code":503,"message":"The service is currently unavailable.","status":"UNAVAILABLE"}}]`, "overloaded_error", "currently unavailable"},
		{"400", 400, `{"error":{"code":400,"message":"Invalid JSON payload","status":"INVALID_ARGUMENT"}}`, "invalid_request_error", "Invalid JSON payload"},
		{"401", 401, `{"error":{"code":401,"message":"Request had invalid authentication credentials.","status":"UNAUTHENTICATED"}}`, "authentication_error", "invalid authentication"},
		{"403", 403, `{"error":{"code":403,"message":"Permission denied","status":"PERMISSION_DENIED"}}`, "permission_error", "Permission denied"},
		{"404 names the project", 404, `{"error":{"code":404,"message":"Publisher Model ` + "`projects/4815162342/locations/us-east5/publishers/anthropic/models/claude-x`" + ` was not found or your project does not have access to it.","status":"NOT_FOUND"}}`, "not_found_error", "was not found"},
		{"500", 500, `{"error":{"code":500,"message":"Internal error encountered.","status":"INTERNAL"}}`, "api_error", "Internal error"},
		{"html", 502, `<html><body>Bad Gateway</body></html>`, "api_error", "HTTP 502"},
		{"too long", 500, `{"error":{"code":500,"message":"` + strings.Repeat("x", 1<<20) + `"}}`, "api_error", "HTTP 500"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := errorResponse(tc.status, tc.body)
			ch.Response(messagesOp, resp)
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, tc.status, resp.StatusCode, "the status is kept")
			doc := gjson.ParseBytes(b)
			assert.Equal(t, "error", doc.Get("type").Str, string(b))
			assert.Equal(t, tc.wantType, doc.Get("error.type").Str)
			assert.Contains(t, doc.Get("error.message").Str, tc.wantMsg)
			assert.NotContains(t, string(b), "4815162342", "a project number is not passed on")
			assert.Equal(t, int64(len(b)), resp.ContentLength)
			assert.Equal(t, len(b), mustAtoi(t, resp.Header.Get("Content-Length")))
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		})
	}
}

// endless is an error body that never ends; it counts what was read from it.
type endless struct{ read int }

func (e *endless) Read(p []byte) (int, error) {
	if e.read > 4<<20 {
		return 0, errors.New("read far past any bound")
	}
	for i := range p {
		p[i] = 'x'
	}
	e.read += len(p)
	return len(p), nil
}

func TestErrorBodyReadIsBounded(t *testing.T) {
	ts := newTokenServer(t, 3600)
	ch := newChannel(t, ts, vertex.Config{Project: "p", Region: "us-east5"})
	body := &endless{}
	resp := &http.Response{StatusCode: 500, Header: http.Header{}, Body: io.NopCloser(body)}
	ch.Response(messagesOp, resp)
	b, _ := io.ReadAll(resp.Body)
	assert.LessOrEqual(t, body.read, 1<<20+1, "at most 1 MiB of an error is read")
	assert.Equal(t, "api_error", gjson.GetBytes(b, "error.type").Str)
}

func TestAnthropicErrorsPassThrough(t *testing.T) {
	ts := newTokenServer(t, 3600)
	ch := newChannel(t, ts, vertex.Config{Project: "p", Region: "us-east5"})
	body := `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"},"request_id":"req_vrtx_1"}`
	resp := errorResponse(400, body)
	ch.Response(messagesOp, resp)
	b, _ := io.ReadAll(resp.Body)
	assert.JSONEq(t, strings.Replace(body, "req_vrtx_1", "req_1", 1), string(b), "as it came, but for the channel's tag in the request id")

	ok := errorResponse(200, `{"type":"message"}`)
	ch.Response(messagesOp, ok)
	b, _ = io.ReadAll(ok.Body)
	assert.Equal(t, `{"type":"message"}`, string(b), "a success is not touched")
}
