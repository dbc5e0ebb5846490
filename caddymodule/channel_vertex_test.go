package caddymodule

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// vertexServiceAccount writes a service-account key file whose tokens would come from
// tokenURI (nothing here asks for one) and returns its path.
func vertexServiceAccount(t *testing.T, tokenURI string) string {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	b, err := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "sa-home-proj", "client_email": "gw@sa-home-proj.iam.gserviceaccount.com",
		"private_key": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), "token_uri": tokenURI,
	})
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "sa.json")
	require.NoError(t, os.WriteFile(p, b, 0o600))
	return p
}

func vertexCaddyfile(channelBlock string) string {
	return "{\n\tswitchyard {\n\t\tmodel claude {\n\t\t\tcandidate gcp {\n\t\t\t\tprotocol family_b\n\t\t\t\tupstream_model claude-sonnet-4-5@20250929\n" +
		"\t\t\t\tchannel vertex {\n" + channelBlock + "\t\t\t\t}\n\t\t\t}\n\t\t}\n\t}\n}\n"
}

func TestVertexCaddyfileErrorsNameTheOption(t *testing.T) {
	cases := map[string]struct{ block, want string }{
		"unknown option": {"\t\t\t\t\tzone us-east5\n", `unknown option "zone"`},
		"two values":     {"\t\t\t\t\tregion us-east5 eu\n", "region: expected one value"},
		"no value":       {"\t\t\t\t\tproject\n", "project: expected one value"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := adapt(t, vertexCaddyfile(tc.block))
			require.Error(t, err)
			for _, want := range []string{`"claude"`, `"gcp"`, "vertex", tc.want} {
				assert.Contains(t, err.Error(), want)
			}
		})
	}
}

func TestVertexCredentialsThatCannotBeLoadedFailValidation(t *testing.T) {
	garbage := filepath.Join(t.TempDir(), "garbage.json")
	require.NoError(t, os.WriteFile(garbage, []byte("SECRET-CONTENT-123 not json"), 0o600))
	foreign := filepath.Join(t.TempDir(), "wif.json")
	require.NoError(t, os.WriteFile(foreign, []byte(`{"type":"external_account","audience":"SECRET-AUD-456"}`), 0o600))
	cases := map[string]struct{ block, want string }{
		"missing file":       {"\t\t\t\t\tproject p\n\t\t\t\t\tregion us-east5\n\t\t\t\t\tcredentials_file " + filepath.Join(t.TempDir(), "none.json") + "\n", "credentials_file: cannot be read"},
		"not json":           {"\t\t\t\t\tproject p\n\t\t\t\t\tregion us-east5\n\t\t\t\t\tcredentials_file " + garbage + "\n", "credentials_file: not a JSON object"},
		"type not accepted":  {"\t\t\t\t\tproject p\n\t\t\t\t\tregion us-east5\n\t\t\t\t\tcredentials_file " + foreign + "\n", `credentials_file: type "external_account" is not accepted`},
		"no region":          {"\t\t\t\t\tproject p\n\t\t\t\t\tcredentials_file " + vertexServiceAccount(t, "http://127.0.0.1:9/token") + "\n", "region: is required"},
		"placeholder absent": {"\t\t\t\t\tproject p\n\t\t\t\t\tregion {env.SWITCHYARD_TEST_NO_SUCH_REGION}\n\t\t\t\t\tcredentials_file " + foreign + "\n", "region: is required"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := validate(t, vertexCaddyfile(tc.block))
			require.Error(t, err)
			for _, want := range []string{`model "claude"`, `candidate "gcp"`, tc.want} {
				assert.Contains(t, err.Error(), want)
			}
			assert.NotContains(t, err.Error(), "SECRET-")
		})
	}
}

func TestVertexChannelProvisionsWithPlaceholdersAndDefaultCredentials(t *testing.T) {
	sa := vertexServiceAccount(t, "http://127.0.0.1:9/token")
	t.Setenv("SWITCHYARD_TEST_VX_PROJECT", "proj-from-env")
	t.Setenv("SWITCHYARD_TEST_VX_FILE", sa)
	ctx, cancel := caddy.NewContext(caddy.Context{Context: t.Context()})
	defer cancel()

	v := &VertexChannel{Project: "{env.SWITCHYARD_TEST_VX_PROJECT}", Region: "europe-west1", CredentialsFile: "{env.SWITCHYARD_TEST_VX_FILE}"}
	require.NoError(t, v.Provision(ctx))
	ch := v.Channel()
	assert.Equal(t, "vertex", ch.Name())
	assert.Equal(t, "https://europe-west1-aiplatform.googleapis.com", ch.Endpoint().String())
	assert.Contains(t, ch.Secrets(), "proj-from-env")
	assert.Contains(t, ch.Secrets(), "gw@sa-home-proj.iam.gserviceaccount.com")

	// No file: Application Default Credentials, here named by the environment.
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", sa)
	adc := &VertexChannel{Region: "global"}
	require.NoError(t, adc.Provision(ctx))
	assert.Contains(t, adc.Channel().Secrets(), "sa-home-proj", "the project comes from the credentials")
	assert.Equal(t, "https://aiplatform.googleapis.com", adc.Channel().Endpoint().String())

	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(t.TempDir(), "gone.json"))
	err := (&VertexChannel{Region: "global"}).Provision(ctx)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "credentials (application default): "), err.Error())
}
