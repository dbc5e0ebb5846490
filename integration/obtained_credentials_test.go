package integration

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echoUpstream answers as Anthropic's Messages API does, and writes back the credentials
// it was sent (the bearer token, or SigV4's access key id and session token) in the
// answer's text, in a stream event and in the Cache-Control header: an endpoint that
// repeats its request, as a proxy's error page or a debugging echo would.
type echoUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	sent []string // the credentials each request carried, as echoed
}

var sigV4KeyID = regexp.MustCompile(`Credential=([^/]+)/`)

func newEchoUpstream(t *testing.T) *echoUpstream {
	e := &echoUpstream{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		auth := r.Header.Get("Authorization")
		creds := strings.TrimPrefix(auth, "Bearer ")
		if m := sigV4KeyID.FindStringSubmatch(auth); m != nil {
			creds = m[1] + " " + r.Header.Get("X-Amz-Security-Token")
		}
		e.mu.Lock()
		e.sent = append(e.sent, creds)
		e.mu.Unlock()
		text, _ := json.Marshal("you sent " + creds)
		w.Header().Set("Cache-Control", "private, echo="+creds)
		streamed := strings.Contains(r.URL.Path, "streamRawPredict") || strings.Contains(string(body), `"stream":true`)
		if !streamed {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"msg_01","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":%s}],`+
				`"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":4}}`, text)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{
			`event: message_start` + "\n" + `data: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":1}}}`,
			`event: content_block_start` + "\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":` + string(text) + `}}`,
			`event: content_block_stop` + "\n" + `data: {"type":"content_block_stop","index":0}`,
			`event: message_delta` + "\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":4}}`,
			`event: message_stop` + "\n" + `data: {"type":"message_stop"}`,
		} {
			fmt.Fprint(w, ev+"\n\n")
		}
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *echoUpstream) credentials() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.sent...)
}

// assertCredentialsUnseen sends a plain and a streamed request for model and checks
// that the echo upstream had the credentials, wrote them back, and the client saw none
// of them: not in the body, not in an event, not in a header.
func assertCredentialsUnseen(t *testing.T, g *gateway, echo *echoUpstream, model string, credentials ...string) {
	t.Helper()
	for _, stream := range []string{"false", "true"} {
		r := g.call(t, http.MethodPost, "/v1/messages",
			`{"model":"`+model+`","max_tokens":16,"stream":`+stream+`,"messages":[{"role":"user","content":"hi"}]}`,
			"anthropic-version", "2023-06-01")
		require.Equal(t, http.StatusOK, r.Status, "stream %s: %s", stream, r.Body)
		sent := echo.credentials()
		require.NotEmpty(t, sent)
		for _, c := range credentials {
			require.Contains(t, sent[len(sent)-1], c, "the upstream was sent the credential, and echoed it")
		}
		assert.Contains(t, string(r.Body), "you sent [redacted]", "stream %s: the echo arrived, masked", stream)
		assert.Contains(t, r.Header.Get("Cache-Control"), "echo=[redacted]", "stream %s", stream)
		g.assertNoLeak(t, r)
		var all strings.Builder
		all.Write(r.Body)
		for name, values := range r.Header {
			all.WriteString("\n" + name + ": " + strings.Join(values, ","))
		}
		g.up.assertNoLeakIn(t, "stream "+stream+": what the client received", all.String(), credentials...)
	}
}

// TestCredentialsObtainedAtRunTimeAreMasked: a Vertex candidate's access token comes from
// its token endpoint, a Bedrock candidate's keys from AWS's default chain (here the
// environment), and an Azure candidate's Entra ID token from Azure's default credentials
// (here an App Service managed identity endpoint); none is in the configuration. An endpoint that echoes them gets
// them masked before the client sees anything, like the configured ones.
func TestCredentialsObtainedAtRunTimeAreMasked(t *testing.T) {
	const (
		vertexToken  = "ya29.echo-access-token-7c41d"
		awsKeyID     = "AKIAECHOCHAINKEY0042"
		awsSecret    = "echo/chain/secret+key/0123456789abcdefghij"
		awsSession   = "FwoGZXIvYXdzEchoSessionToken0123456789abcdef"
		vertexRegion = "us-east5"
		entraToken   = "eyJ0eXAiOiJKV1QiLCJhbGciOi.entra-echo-7d0c"
	)
	t.Setenv("AWS_ACCESS_KEY_ID", awsKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", awsSecret)
	t.Setenv("AWS_SESSION_TOKEN", awsSession)
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")

	// Azure's default chain: no environment app, no workload identity, and a managed
	// identity endpoint as App Service provides one.
	identity := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":%q,"expires_on":"%d","resource":%q,"token_type":"Bearer"}`,
			entraToken, time.Now().Add(time.Hour).Unix(), r.URL.Query().Get("resource"))
	}))
	t.Cleanup(identity.Close)
	for _, name := range []string{"AZURE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET", "AZURE_CLIENT_CERTIFICATE_PATH",
		"AZURE_USERNAME", "AZURE_FEDERATED_TOKEN_FILE", "AZURE_TOKEN_CREDENTIALS", "MSI_ENDPOINT", "IDENTITY_SERVER_THUMBPRINT"} {
		unsetenv(t, name)
	}
	t.Setenv("IDENTITY_ENDPOINT", identity.URL+"/msi/token")
	t.Setenv("IDENTITY_HEADER", "identity-header-value")

	tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":%q,"expires_in":3600,"token_type":"Bearer"}`, vertexToken)
	}))
	t.Cleanup(tokens.Close)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	saFile := writeServiceAccount(t, key, tokens.URL+"/token")

	echo := newEchoUpstream(t)
	up := newUpstream(t)
	models := "\t\tmodel claude-vertex-echo {\n\t\t\tprotocols family_b\n" +
		"\t\t\tcandidate vertex {\n\t\t\t\tprotocol family_b\n\t\t\t\tupstream_model claude-x@1\n" +
		"\t\t\t\tchannel vertex {\n\t\t\t\t\tproject " + vertexProject + "\n\t\t\t\t\tregion " + vertexRegion + "\n" +
		"\t\t\t\t\tendpoint " + echo.URL + "\n\t\t\t\t\tcredentials_file " + saFile + "\n\t\t\t\t}\n\t\t\t}\n\t\t}\n" +
		"\t\tmodel claude-bedrock-echo {\n\t\t\tprotocols family_b\n" +
		"\t\t\tcandidate bedrock {\n\t\t\t\tprotocol family_b\n\t\t\t\tupstream_model anthropic.claude-x-v1:0\n" +
		"\t\t\t\tchannel bedrock {\n\t\t\t\t\tregion us-east-1\n\t\t\t\t\tendpoint " + echo.URL + "\n\t\t\t\t\tapi messages\n" +
		"\t\t\t\t}\n\t\t\t}\n\t\t}\n" +
		"\t\tmodel claude-azure-echo {\n\t\t\tprotocols family_b\n" +
		azureCandidate("foundry", "family_b", "claude-dep", 0, "endpoint "+echo.URL, "mode foundry") + "\t\t}\n"
	g := startGatewayWith(t, up, models, "")

	t.Run("vertex access token", func(t *testing.T) {
		assertCredentialsUnseen(t, g, echo, "claude-vertex-echo", vertexToken)
	})
	t.Run("aws default chain", func(t *testing.T) {
		assertCredentialsUnseen(t, g, echo, "claude-bedrock-echo", awsKeyID, awsSession)
	})
	t.Run("azure entra token", func(t *testing.T) {
		assertCredentialsUnseen(t, g, echo, "claude-azure-echo", entraToken)
	})
}

// unsetenv removes an environment variable for the test (an empty one can mean something
// else to a library that looks it up), and puts it back after.
func unsetenv(t *testing.T, name string) {
	t.Setenv(name, "") // refuses a parallel test, and restores the value after
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}
