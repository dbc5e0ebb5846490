package caddymodule

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bedrockCaddyfile is a model with one Bedrock candidate whose channel block holds lines.
func bedrockCaddyfile(lines ...string) string {
	return "{\n\tswitchyard {\n\t\tstore off\n\t\tmodel m {\n\t\t\tcandidate c {\n\t\t\t\tprotocol family_b\n" +
		"\t\t\t\tupstream_model us.anthropic.claude-sonnet-4-20250514-v1:0\n\t\t\t\tchannel bedrock {\n\t\t\t\t\t" +
		strings.Join(lines, "\n\t\t\t\t\t") + "\n\t\t\t\t}\n\t\t\t}\n\t\t}\n\t}\n}\n"
}

// noAmbientAWS leaves the default AWS chain nothing to find: no variables, no shared
// files, no instance metadata (never asked for: no network in tests).
func noAmbientAWS(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_BEARER_TOKEN_BEDROCK"} {
		t.Setenv(v, "")
	}
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

func TestBedrockChannelLoadsEachCredentialSource(t *testing.T) {
	noAmbientAWS(t)
	t.Setenv("SY_TEST_AK", "AKIDTESTVALUE0001")
	t.Setenv("SY_TEST_SK", "test/secret/value")
	t.Setenv("SY_TEST_BEDROCK_KEY", "ABSKtestbedrockkey0001")

	app := provisionedApp(t, bedrockCaddyfile("region us-east-1",
		"access_key_id {env.SY_TEST_AK}", "secret_access_key {env.SY_TEST_SK}"))
	require.Len(t, app.upstreams, 1)
	for c, up := range app.upstreams {
		assert.Equal(t, "bedrock", up.ChannelName())
		assert.Equal(t, "https://bedrock-runtime.us-east-1.amazonaws.com", c.BaseURL.String(), "the channel's endpoint is the candidate's")
	}

	require.NoError(t, validate(t, bedrockCaddyfile("region eu-west-1", "api_key {env.SY_TEST_BEDROCK_KEY}")))
	require.NoError(t, validate(t, bedrockCaddyfile("region eu-west-1", "api messages", "api_key {env.SY_TEST_BEDROCK_KEY}")))

	// The default chain, from the environment.
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFROMENVIRONMENT")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret-from-environment")
	require.NoError(t, validate(t, bedrockCaddyfile("region us-west-2", "endpoint http://127.0.0.1:9/bedrock")))
}

func TestBedrockChannelLoadErrorsNameTheField(t *testing.T) {
	noAmbientAWS(t)
	t.Setenv("SY_TEST_SET", "AKIDSETVALUE000001")
	t.Setenv("SY_TEST_EMPTY", "")
	t.Setenv("SY_TEST_BLANK", "  ")
	for name, tc := range map[string]struct {
		lines []string
		want  string
	}{
		"no region":          {[]string{"api_key {env.SY_TEST_SET}"}, "region is required"},
		"odd region":         {[]string{"region us-east-1.attacker.example", "api_key {env.SY_TEST_SET}"}, "region: not an AWS region name"},
		"empty api key":      {[]string{"region us-east-1", "api_key {env.SY_TEST_EMPTY}"}, "api_key: {env.SY_TEST_EMPTY} resolves to an empty value"},
		"blank api key":      {[]string{"region us-east-1", "api_key {env.SY_TEST_BLANK}"}, "api_key: {env.SY_TEST_BLANK} resolves to an empty value"},
		"empty secret":       {[]string{"region us-east-1", "access_key_id {env.SY_TEST_SET}", "secret_access_key {env.SY_TEST_EMPTY}"}, "secret_access_key: {env.SY_TEST_EMPTY} resolves to an empty value"},
		"key without secret": {[]string{"region us-east-1", "access_key_id {env.SY_TEST_SET}"}, "access_key_id and secret_access_key go together"},
		"two sources":        {[]string{"region us-east-1", "api_key k", "access_key_id {env.SY_TEST_SET}", "secret_access_key s"}, "exclusive"},
		"bad endpoint":       {[]string{"region us-east-1", "api_key k", "endpoint vpce-0abc.internal"}, "endpoint: must be an absolute http or https URL"},
		"unknown api":        {[]string{"region us-east-1", "api_key k", "api converse"}, "api: must be invoke or messages"},
		"no credentials":     {[]string{"region us-east-1"}, "no AWS credentials: set api_key"},
	} {
		t.Run(name, func(t *testing.T) {
			err := validate(t, bedrockCaddyfile(tc.lines...))
			require.Error(t, err)
			assert.Contains(t, err.Error(), `model "m", candidate "c": channel:`)
			assert.Contains(t, err.Error(), tc.want)
			for _, secret := range []string{"AKIDSETVALUE000001", "attacker", "vpce-0abc"} {
				assert.NotContains(t, err.Error(), secret)
			}
		})
	}
}

func TestBedrockChannelCaddyfileErrors(t *testing.T) {
	for src, want := range map[string]string{
		"bedrock {\n\tregoin us-east-1\n}":           `unknown option "regoin"`,
		"bedrock {\n\tregion\n}":                     "region: expected one value",
		"bedrock {\n\tregion us-east-1 eu-west-1\n}": "region: expected one value",
		"bedrock extra":                              "wrong argument count",
	} {
		var b BedrockChannel
		err := b.UnmarshalCaddyfile(caddyfile.NewTestDispenser(src))
		require.Error(t, err, src)
		assert.Contains(t, err.Error(), want, src)
	}
	var b BedrockChannel
	require.NoError(t, b.UnmarshalCaddyfile(caddyfile.NewTestDispenser(
		"bedrock {\n\tregion us-east-1\n\tendpoint http://127.0.0.1:9\n\tapi_key k\n\taccess_key_id a\n\tsecret_access_key s\n\tsession_token t\n\tapi messages\n}")))
	assert.Equal(t, BedrockChannel{Region: "us-east-1", Endpoint: "http://127.0.0.1:9", APIKey: "k",
		AccessKeyID: "a", SecretAccessKey: "s", SessionToken: "t", API: "messages"}, b)
}
