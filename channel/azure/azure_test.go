package azure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/channel"
	"github.com/switchyard-gw/switchyard/protocols"
)

const (
	resource   = "contoso-res-7f3a"
	deployment = "gpt4o-prod-eu"
	apiKey     = "azkey-0123456789abcdef0123"
	tenant     = "tenant-5e1d-4c2b"
)

var (
	chat      = protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindChat}
	responses = protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindResponses}
	messages  = protocols.Operation{Family: protocols.FamilyB, Kind: protocols.KindMessages}
	count     = protocols.Operation{Family: protocols.FamilyB, Kind: protocols.KindMessagesCountTokens}
)

func newChannel(t *testing.T, cfg Config) *Channel {
	t.Helper()
	c, err := New(cfg)
	require.NoError(t, err)
	return c
}

func clientHeader() http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "OpenAI/Go 3.0")
	h.Set("OpenAI-Organization", "org-client")
	return h
}

func TestTheClassicAPICallsTheDeploymentWithItsVersionAndKey(t *testing.T) {
	c := newChannel(t, Config{Resource: resource, Deployment: deployment, APIKey: apiKey})
	body := []byte(`{"model":"up-model","messages":[{"role":"user","content":"hi"}]}`)
	req, err := c.NewRequest(context.Background(), chat, body, false, clientHeader())
	require.NoError(t, err)
	assert.Equal(t, "https://"+resource+".openai.azure.com/openai/deployments/"+deployment+"/chat/completions?api-version=2024-10-21", req.URL.String())
	assert.Equal(t, http.MethodPost, req.Method)
	assert.Equal(t, apiKey, req.Header.Get("Api-Key"))
	assert.Empty(t, req.Header.Get("Authorization"))
	assert.Empty(t, req.Header.Get("OpenAI-Organization"), "no OpenAI account selector goes to Azure")
	assert.Equal(t, "OpenAI/Go 3.0", req.Header.Get("User-Agent"))
	sent, _ := io.ReadAll(req.Body)
	assert.Equal(t, string(body), string(sent))
	assert.Equal(t, int64(len(body)), req.ContentLength)

	assert.True(t, c.Offers(chat))
	assert.False(t, c.Offers(responses), "the classic API's Responses route is not deployment-based")
	assert.False(t, c.Offers(messages))

	other := newChannel(t, Config{Resource: resource, Deployment: "d", APIVersion: "2025-04-01-preview", APIKey: apiKey})
	req, err = other.NewRequest(context.Background(), chat, body, true, http.Header{})
	require.NoError(t, err)
	assert.Equal(t, "api-version=2025-04-01-preview", req.URL.RawQuery)
	assert.Equal(t, "application/json", req.Header.Get("Content-Type"))
}

func TestTheV1APIServesChatAndResponsesUnderItsPrefix(t *testing.T) {
	c := newChannel(t, Config{Endpoint: "http://127.0.0.1:9/", Mode: ModeV1, APIKey: apiKey})
	assert.Equal(t, "http://127.0.0.1:9", c.Endpoint().String())
	for op, path := range map[protocols.Operation]string{chat: "/openai/v1/chat/completions", responses: "/openai/v1/responses"} {
		assert.True(t, c.Offers(op))
		req, err := c.NewRequest(context.Background(), op, []byte(`{"model":"dep"}`), false, clientHeader())
		require.NoError(t, err)
		assert.Equal(t, "http://127.0.0.1:9"+path, req.URL.String(), "no api-version on v1")
		assert.Equal(t, apiKey, req.Header.Get("Api-Key"))
	}
	assert.False(t, c.Offers(protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindResponsesInputTokens}))
}

func TestFoundryTakesMessagesWithXAPIKey(t *testing.T) {
	c := newChannel(t, Config{Resource: resource, Mode: ModeFoundry, APIKey: apiKey})
	assert.True(t, c.Offers(messages))
	assert.False(t, c.Offers(count))
	assert.False(t, c.Offers(chat))
	h := http.Header{}
	h.Set("Anthropic-Version", "2023-06-01")
	h.Set("Anthropic-Beta", "tools-2024")
	req, err := c.NewRequest(context.Background(), messages, []byte(`{"model":"claude-dep","max_tokens":5}`), true, h)
	require.NoError(t, err)
	assert.Equal(t, "https://"+resource+".services.ai.azure.com/anthropic/v1/messages", req.URL.String())
	assert.Equal(t, apiKey, req.Header.Get("X-Api-Key"))
	assert.Empty(t, req.Header.Get("Api-Key"))
	assert.Equal(t, "tools-2024", req.Header.Get("Anthropic-Beta"))
	assert.Equal(t, "2023-06-01", req.Header.Get("Anthropic-Version"))
}

// fakeToken is an Entra ID token source that records the scopes it was asked for.
type fakeToken struct {
	mu     sync.Mutex
	scopes []string
	fail   bool
}

func (f *fakeToken) GetToken(_ context.Context, o policy.TokenRequestOptions) (azcore.AccessToken, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scopes = append(f.scopes, o.Scopes...)
	if f.fail {
		return azcore.AccessToken{}, errors.New("AADSTS700016: application not found in tenant " + tenant)
	}
	return azcore.AccessToken{Token: "entra-token-xyz"}, nil
}

func TestWithoutAKeyTheChannelSendsAnEntraTokenOfItsScope(t *testing.T) {
	tok := &fakeToken{}
	c := newChannel(t, Config{Resource: resource, Mode: ModeV1, Token: tok})
	req, err := c.NewRequest(context.Background(), chat, []byte(`{}`), false, clientHeader())
	require.NoError(t, err)
	assert.Equal(t, "Bearer entra-token-xyz", req.Header.Get("Authorization"))
	assert.Empty(t, req.Header.Get("Api-Key"))

	f := newChannel(t, Config{Resource: resource, Mode: ModeFoundry, Token: tok})
	req, err = f.NewRequest(context.Background(), messages, []byte(`{}`), false, http.Header{})
	require.NoError(t, err)
	assert.Equal(t, "Bearer entra-token-xyz", req.Header.Get("Authorization"))
	assert.Empty(t, req.Header.Get("X-Api-Key"))
	assert.Equal(t, []string{ScopeOpenAI, ScopeFoundry}, tok.scopes)
}

func TestATokenThatCannotBeHadIsACredentialErrorThatNamesNoTenant(t *testing.T) {
	c := newChannel(t, Config{Resource: resource, Mode: ModeV1, Token: &fakeToken{fail: true}})
	_, err := c.NewRequest(context.Background(), chat, []byte(`{}`), false, http.Header{})
	require.Error(t, err)
	assert.ErrorIs(t, err, channel.ErrCredential)
	assert.NotContains(t, err.Error(), tenant)
}

func TestAClientSecretCredentialNeedsAllThreeFields(t *testing.T) {
	_, err := New(Config{Resource: resource, Mode: ModeV1, TenantID: tenant, ClientID: "app-1"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "client_secret")
	assert.NotContains(t, err.Error(), tenant)
	c, err := New(Config{Resource: resource, Mode: ModeV1, TenantID: tenant, ClientID: "app-1234", ClientSecret: "s3cr3t-value"})
	require.NoError(t, err, "a client secret credential is set up without a call")
	assert.Subset(t, c.Secrets(), []string{tenant, "app-1234", "s3cr3t-value"})
}

func TestConfigurationMistakesNameTheFieldNotTheValue(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Resource: resource, APIKey: apiKey}, "deployment"},
		{Config{Deployment: deployment, APIKey: apiKey}, "resource"},
		{Config{Resource: resource, Mode: "classic", APIKey: apiKey}, "mode"},
		{Config{Resource: resource + ".openai.azure.com", Deployment: deployment, APIKey: apiKey}, "resource"},
		{Config{Endpoint: "ftp://" + resource, Deployment: deployment, APIKey: apiKey}, "endpoint"},
		{Config{Resource: resource, Mode: ModeV1, APIVersion: "2024-10-21", APIKey: apiKey}, "api_version"},
	} {
		_, err := New(tc.cfg)
		require.Error(t, err, tc.field)
		assert.True(t, strings.HasPrefix(err.Error(), tc.field), "%q names %s", err, tc.field)
		for _, s := range []string{apiKey, deployment, resource} {
			assert.NotContains(t, err.Error(), s)
		}
	}
}

func TestTheKeyIsASecretAndTheResourceAndDeploymentAreNames(t *testing.T) {
	c := newChannel(t, Config{Resource: resource, Deployment: deployment, APIKey: apiKey})
	assert.ElementsMatch(t, []string{apiKey}, c.Secrets())
	assert.ElementsMatch(t, []string{resource, deployment}, c.Names(), "masked in errors, not in generated text")
	assert.Equal(t, "azure", c.Name())
}

func answer(status int, contentType, body string, header ...string) *http.Response {
	h := http.Header{}
	h.Set("Content-Type", contentType)
	for i := 0; i+1 < len(header); i += 2 {
		h.Set(header[i], header[i+1])
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func TestAzures429BecomesOpenAIsWithTheWaitFromItsMessage(t *testing.T) {
	c := newChannel(t, Config{Resource: resource, Deployment: deployment, APIKey: apiKey})
	resp := answer(429, "application/json", `{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 20 seconds."}}`)
	c.Response(chat, resp)
	assert.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, "20", resp.Header.Get("Retry-After"))
	body := readAll(t, resp)
	assert.Equal(t, int64(len(body)), resp.ContentLength)
	e := gjson.Get(body, "error")
	assert.Equal(t, "rate_limit_error", e.Get("type").Str)
	assert.Equal(t, "rate_limit_exceeded", e.Get("code").Str)
	assert.Equal(t, gjson.Null, e.Get("param").Type)
	assert.True(t, e.Get("param").Exists())
	assert.NotContains(t, body, "Azure")
	assert.NotContains(t, body, "S0")

	// A retry-after header the answer has wins over the message.
	resp = answer(429, "application/json", `{"error":{"code":"429","message":"Rate limit is exceeded. Try again in 2 seconds."}}`, "Retry-After", "7")
	c.Response(chat, resp)
	assert.Equal(t, "7", resp.Header.Get("Retry-After"))
	resp = answer(429, "application/json", `{"error":{"code":"429","message":"Rate limit is exceeded. Try again in 2 seconds."}}`)
	c.Response(chat, resp)
	assert.Equal(t, "2", resp.Header.Get("Retry-After"))
}

func TestAContentFilterRefusalReachesTheClientWithoutAzuresInnerError(t *testing.T) {
	c := newChannel(t, Config{Resource: resource, Mode: ModeV1, APIKey: apiKey})
	resp := answer(400, "application/json", `{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy.","type":null,"param":"prompt","code":"content_filter","status":400,"innererror":{"code":"ResponsibleAIPolicyViolation","content_filter_result":{"hate":{"filtered":true,"severity":"high"}}}}}`)
	c.Response(chat, resp)
	assert.Equal(t, 400, resp.StatusCode)
	body := readAll(t, resp)
	e := gjson.Get(body, "error")
	assert.Equal(t, "content_filter", e.Get("code").Str)
	assert.Equal(t, "invalid_request_error", e.Get("type").Str)
	assert.Equal(t, "prompt", e.Get("param").Str)
	assert.False(t, e.Get("innererror").Exists())
	assert.False(t, e.Get("status").Exists())
	assert.Empty(t, resp.Header.Get("Retry-After"))
}

func TestOtherAzureErrorsTakeOpenAIsEnvelope(t *testing.T) {
	c := newChannel(t, Config{Resource: resource, Deployment: deployment, APIKey: apiKey})
	resp := answer(404, "application/json", `{"error":{"code":"DeploymentNotFound","message":"The API deployment for this resource does not exist."}}`)
	c.Response(chat, resp)
	e := gjson.Get(readAll(t, resp), "error")
	assert.Equal(t, "DeploymentNotFound", e.Get("code").Str)
	assert.Equal(t, "invalid_request_error", e.Get("type").Str)
	resp = answer(401, "application/json", `{"error":{"code":"401","message":"Access denied due to invalid subscription key."}}`)
	c.Response(chat, resp)
	e = gjson.Get(readAll(t, resp), "error")
	assert.Equal(t, "authentication_error", e.Get("type").Str)
	assert.Equal(t, gjson.Null, e.Get("code").Type, "a code that repeats the status is dropped")
	resp = answer(400, "application/json", `{"error":{"message":"Invalid value for 'temperature'.","type":null,"param":"temperature","code":"BadRequest"}}`)
	c.Response(chat, resp)
	e = gjson.Get(readAll(t, resp), "error")
	assert.Equal(t, "invalid_request_error", e.Get("type").Str, "OpenAI's errors always have a type")
	assert.Equal(t, "temperature", e.Get("param").Str)
	native := `{"error":{"message":"Invalid value for 'temperature'.","type":"invalid_request_error","param":"temperature","code":"invalid_value"}}`
	resp = answer(400, "application/json", native)
	c.Response(chat, resp)
	assert.Equal(t, native, readAll(t, resp), "an answer already in OpenAI's envelope goes as it came")
}

func TestFoundryErrorsAreAnthropicsEnvelope(t *testing.T) {
	c := newChannel(t, Config{Resource: resource, Mode: ModeFoundry, APIKey: apiKey})
	native := `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`
	resp := answer(529, "application/json", native)
	c.Response(messages, resp)
	assert.JSONEq(t, native, readAll(t, resp))
	resp = answer(429, "application/json", `{"error":{"code":"429","message":"Rate limit is exceeded. Try again in 3 seconds."}}`)
	c.Response(messages, resp)
	body := readAll(t, resp)
	assert.Equal(t, "error", gjson.Get(body, "type").Str)
	assert.Equal(t, "rate_limit_error", gjson.Get(body, "error.type").Str)
	assert.Equal(t, "3", resp.Header.Get("Retry-After"))
}

const azureStream = "" +
	"data: {\"choices\":[],\"created\":0,\"id\":\"\",\"model\":\"\",\"object\":\"\",\"prompt_filter_results\":[{\"prompt_index\":0,\"content_filter_results\":{\"hate\":{\"filtered\":false,\"severity\":\"safe\"}}}]}\n\n" +
	"data: {\"choices\":[{\"content_filter_results\":{},\"delta\":{\"content\":\"\",\"role\":\"assistant\"},\"finish_reason\":null,\"index\":0}],\"created\":1,\"id\":\"chatcmpl-1\",\"model\":\"gpt-4o\",\"object\":\"chat.completion.chunk\"}\n\n" +
	"data: {\"choices\":[{\"content_filter_results\":{\"hate\":{\"filtered\":false,\"severity\":\"safe\"}},\"delta\":{\"content\":\"Hello\"},\"finish_reason\":null,\"index\":0}],\"created\":1,\"id\":\"chatcmpl-1\",\"model\":\"gpt-4o\",\"object\":\"chat.completion.chunk\"}\r\n\r\n" +
	"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\",\"index\":0}],\"created\":1,\"id\":\"chatcmpl-1\",\"model\":\"gpt-4o\",\"object\":\"chat.completion.chunk\"}\n\n" +
	"data: {\"choices\":[{\"content_filter_offsets\":{\"check_offset\":0,\"start_offset\":0,\"end_offset\":5},\"content_filter_results\":{},\"finish_reason\":null,\"index\":0}],\"created\":0,\"id\":\"\",\"model\":\"\",\"object\":\"\"}\n\n" +
	"data: {\"choices\":[],\"created\":1,\"id\":\"chatcmpl-1\",\"model\":\"gpt-4o\",\"object\":\"chat.completion.chunk\",\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4}}\n\n" +
	"data: [DONE]\n\n"

const openAIStream = "" +
	"data: {\"choices\":[{\"delta\":{\"content\":\"\",\"role\":\"assistant\"},\"finish_reason\":null,\"index\":0}],\"created\":1,\"id\":\"chatcmpl-1\",\"model\":\"gpt-4o\",\"object\":\"chat.completion.chunk\"}\n\n" +
	"data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"},\"finish_reason\":null,\"index\":0}],\"created\":1,\"id\":\"chatcmpl-1\",\"model\":\"gpt-4o\",\"object\":\"chat.completion.chunk\"}\r\n\r\n" +
	"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\",\"index\":0}],\"created\":1,\"id\":\"chatcmpl-1\",\"model\":\"gpt-4o\",\"object\":\"chat.completion.chunk\"}\n\n" +
	"data: {\"choices\":[],\"created\":1,\"id\":\"chatcmpl-1\",\"model\":\"gpt-4o\",\"object\":\"chat.completion.chunk\",\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4}}\n\n" +
	"data: [DONE]\n\n"

func TestAStreamLosesAzuresFilterChunksAndVerdictsWhateverTheReads(t *testing.T) {
	c := newChannel(t, Config{Resource: resource, Mode: ModeV1, APIKey: apiKey})
	for name, wrap := range map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"halves":   iotest.HalfReader,
	} {
		t.Run(name, func(t *testing.T) {
			resp := answer(200, "text/event-stream; charset=utf-8", "")
			resp.Body = io.NopCloser(wrap(strings.NewReader(azureStream)))
			c.Response(chat, resp)
			assert.Equal(t, int64(-1), resp.ContentLength)
			assert.Equal(t, openAIStream, readAll(t, resp))
		})
	}
}

func TestAStreamEventIsPassedOnAsSoonAsItIsComplete(t *testing.T) {
	c := newChannel(t, Config{Resource: resource, Mode: ModeV1, APIKey: apiKey})
	pr, pw := io.Pipe()
	resp := answer(200, "text/event-stream", "")
	resp.Body = pr
	c.Response(chat, resp)
	first := "data: {\"id\":\"chatcmpl-1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n"
	go func() { _, _ = pw.Write([]byte(first)) }() // the stream then stays open
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 4096)
		s := ""
		for len(s) < len(first) {
			n, err := resp.Body.Read(buf)
			if err != nil {
				break
			}
			s += string(buf[:n])
		}
		got <- s
	}()
	select {
	case s := <-got:
		assert.Equal(t, first, s)
	case <-time.After(5 * time.Second):
		t.Error("a complete event was held back while the stream stayed open")
	}
	_ = pw.Close()
}

func TestAJSONAnswerLosesItsVerdicts(t *testing.T) {
	c := newChannel(t, Config{Resource: resource, Deployment: deployment, APIKey: apiKey})
	resp := answer(200, "application/json", `{"choices":[{"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}},"finish_reason":"stop","index":0,"message":{"content":"Hi","role":"assistant"}}],"created":1,"id":"chatcmpl-1","model":"gpt-4o","object":"chat.completion","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}],"usage":{"completion_tokens":1,"prompt_tokens":3,"total_tokens":4}}`, "Content-Length", "999")
	c.Response(chat, resp)
	assert.Empty(t, resp.Header.Get("Content-Length"))
	assert.JSONEq(t, `{"choices":[{"finish_reason":"stop","index":0,"message":{"content":"Hi","role":"assistant"}}],"created":1,"id":"chatcmpl-1","model":"gpt-4o","object":"chat.completion","usage":{"completion_tokens":1,"prompt_tokens":3,"total_tokens":4}}`, readAll(t, resp))
}

func TestResponsesAndFoundryAnswersPassUntouched(t *testing.T) {
	v1 := newChannel(t, Config{Resource: resource, Mode: ModeV1, APIKey: apiKey})
	resp := answer(200, "text/event-stream", azureStream)
	v1.Response(responses, resp)
	assert.Equal(t, azureStream, readAll(t, resp))
	f := newChannel(t, Config{Resource: resource, Mode: ModeFoundry, APIKey: apiKey})
	resp = answer(200, "text/event-stream", "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	f.Response(messages, resp)
	assert.Equal(t, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", readAll(t, resp))
}

// entraServer is a local Entra ID: its tenant's OpenID configuration and token endpoint,
// which hands out one token per client-credentials grant and counts them.
type entraServer struct {
	*httptest.Server
	mu     sync.Mutex
	grants []url.Values
	refuse bool // the token endpoint refuses the client's secret
}

func newEntraServer(t *testing.T) *entraServer {
	e := &entraServer{}
	e.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		base := e.URL + "/" + tenant
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/" + tenant + "/v2.0/.well-known/openid-configuration":
			_, _ = fmt.Fprintf(w, `{"token_endpoint":%q,"authorization_endpoint":%q,"issuer":%q}`,
				base+"/oauth2/v2.0/token", base+"/oauth2/v2.0/authorize", base+"/v2.0")
		case "/" + tenant + "/oauth2/v2.0/token":
			_ = r.ParseForm()
			e.mu.Lock()
			e.grants = append(e.grants, r.PostForm)
			n, refuse := len(e.grants), e.refuse
			e.mu.Unlock()
			if refuse {
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = fmt.Fprintf(w, `{"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret provided for app-1234 in tenant %s."}`, tenant)
				return
			}
			_, _ = fmt.Fprintf(w, `{"token_type":"Bearer","expires_in":3600,"ext_expires_in":3600,"access_token":"entra-access-%d"}`, n)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(e.Close)
	return e
}

func TestAClientSecretGetsOneEntraTokenOfTheScopeAndReusesIt(t *testing.T) {
	e := newEntraServer(t)
	c := newChannel(t, Config{Resource: resource, Mode: ModeV1, TenantID: tenant, ClientID: "app-1234", ClientSecret: "s3cr3t-value",
		entra: azcore.ClientOptions{Cloud: cloud.Configuration{ActiveDirectoryAuthorityHost: e.URL + "/"}, Transport: e.Client()}})
	for range 2 {
		req, err := c.NewRequest(context.Background(), chat, []byte(`{}`), false, http.Header{})
		require.NoError(t, err)
		assert.Equal(t, "Bearer entra-access-1", req.Header.Get("Authorization"))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	require.Len(t, e.grants, 1, "the token is cached until it expires")
	g := e.grants[0]
	assert.Equal(t, "client_credentials", g.Get("grant_type"))
	assert.Equal(t, "app-1234", g.Get("client_id"))
	assert.Equal(t, "s3cr3t-value", g.Get("client_secret"))
	assert.Contains(t, g.Get("scope"), ScopeOpenAI)
}

func TestARefusedClientSecretIsACredentialErrorThatNamesNothing(t *testing.T) {
	e := newEntraServer(t)
	e.refuse = true
	c := newChannel(t, Config{Resource: resource, Mode: ModeV1, TenantID: tenant, ClientID: "app-1234", ClientSecret: "s3cr3t-value",
		entra: azcore.ClientOptions{Cloud: cloud.Configuration{ActiveDirectoryAuthorityHost: e.URL + "/"}, Transport: e.Client()}})
	_, err := c.NewRequest(context.Background(), chat, []byte(`{}`), false, http.Header{})
	require.Error(t, err)
	assert.ErrorIs(t, err, channel.ErrCredential)
	for _, s := range []string{tenant, "app-1234", "s3cr3t-value", "AADSTS"} {
		assert.NotContains(t, err.Error(), s)
	}
}

// An endpoint with a path (a gateway in front of the resource, an APIM route) keeps it
// before Azure's own paths, in every mode.
func TestAnEndpointsPathPrefixIsKept(t *testing.T) {
	cases := []struct {
		cfg  Config
		op   protocols.Operation
		want string
	}{
		{Config{Endpoint: "https://apim.example/some/prefix", Deployment: deployment, APIKey: apiKey}, chat,
			"https://apim.example/some/prefix/openai/deployments/" + deployment + "/chat/completions?api-version=2024-10-21"},
		{Config{Endpoint: "https://apim.example/some/prefix/", Mode: ModeV1, APIKey: apiKey}, responses,
			"https://apim.example/some/prefix/openai/v1/responses"},
		{Config{Endpoint: "https://apim.example/some/prefix", Mode: ModeFoundry, APIKey: apiKey}, messages,
			"https://apim.example/some/prefix/anthropic/v1/messages"},
	}
	for _, tc := range cases {
		c := newChannel(t, tc.cfg)
		req, err := c.NewRequest(context.Background(), tc.op, []byte(`{"model":"dep"}`), false, http.Header{})
		require.NoError(t, err)
		assert.Equal(t, tc.want, req.URL.String(), "mode %q", tc.cfg.Mode)
	}
}

// An Entra ID token sent upstream is a secret of the channel from then on: the current
// one and the one before it, no more.
func TestEntraTokensSentAreRuntimeSecrets(t *testing.T) {
	tok := &rotatingToken{}
	c := newChannel(t, Config{Resource: resource, Mode: ModeV1, Token: tok})
	assert.Empty(t, c.RuntimeSecrets())
	for range 4 {
		_, err := c.NewRequest(context.Background(), chat, []byte(`{}`), false, http.Header{})
		require.NoError(t, err)
	}
	assert.Equal(t, []string{"entra-rotated-4", "entra-rotated-3"}, c.RuntimeSecrets())
	var _ channel.RuntimeSecrets = c
}

// rotatingToken hands out a new Entra ID token each time.
type rotatingToken struct {
	mu sync.Mutex
	n  int
}

func (r *rotatingToken) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	return azcore.AccessToken{Token: fmt.Sprintf("entra-rotated-%d", r.n), ExpiresOn: time.Now().Add(time.Hour)}, nil
}
