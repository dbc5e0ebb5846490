package caddymodule

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const azureKeyValue = "azk-9f8e7d6c5b4a39281706"

// azureModel is a Caddyfile with one model whose candidate goes through Azure with the
// given channel block lines.
func azureModel(lines ...string) string {
	return "{\n\tswitchyard {\n\t\tstore off\n\t\tmodel gpt-4o {\n\t\t\tcandidate eu {\n\t\t\t\tprotocol family_a\n" +
		"\t\t\t\tupstream_model gpt4o-prod\n\t\t\t\tchannel azure {\n\t\t\t\t\t" + strings.Join(lines, "\n\t\t\t\t\t") +
		"\n\t\t\t\t}\n\t\t\t}\n\t\t}\n\t}\n}\n"
}

func TestAnAzureCandidateLoadsWithItsKeyFromTheEnvironment(t *testing.T) {
	t.Setenv("SWITCHYARD_TEST_AZURE_KEY", azureKeyValue)
	app := provisionedApp(t, azureModel("resource my-res-42", "deployment gpt4o-prod", "api_key {env.SWITCHYARD_TEST_AZURE_KEY}"))
	require.Len(t, app.upstreams, 1)
	for c, up := range app.upstreams {
		assert.Equal(t, "azure", up.ChannelName())
		assert.Equal(t, "https://my-res-42.openai.azure.com", c.BaseURL.String())
		assert.Empty(t, c.Credential, "the key is the channel's, not a family credential")
	}
	cfg, err := adapt(t, azureModel("resource my-res-42", "deployment gpt4o-prod", "api_key {env.SWITCHYARD_TEST_AZURE_KEY}"))
	require.NoError(t, err)
	assert.NotContains(t, string(cfg), azureKeyValue, "the placeholder, not the key, is in the JSON")
}

func TestBadAzureChannelsNameModelCandidateAndField(t *testing.T) {
	t.Setenv("SWITCHYARD_TEST_AZURE_KEY", azureKeyValue)
	t.Setenv("SWITCHYARD_TEST_AZURE_UNSET", "")
	for _, tc := range []struct {
		lines []string
		want  string
	}{
		{[]string{"resource my-res-42", "deployment d", "api_key {env.SWITCHYARD_TEST_AZURE_UNSET}"},
			"api_key: {env.SWITCHYARD_TEST_AZURE_UNSET} resolves to an empty value"},
		{[]string{"resource my-res-42", "api_key {env.SWITCHYARD_TEST_AZURE_KEY}"}, "deployment: required in mode deployments"},
		{[]string{"deployment d", "api_key {env.SWITCHYARD_TEST_AZURE_KEY}"}, "resource: required (or endpoint)"},
		{[]string{"resource my-res-42", "mode v1", "tenant_id t-1", "client_id c-1"},
			"tenant_id, client_id, client_secret: give all three, or none"},
		{[]string{"resource my-res-42", "mode v1", "tenant_id t-1", "client_id c-1", "client_secret {env.SWITCHYARD_TEST_AZURE_KEY}", "api_key {env.SWITCHYARD_TEST_AZURE_KEY}"},
			"api_key: give either an API key or an Entra ID app"},
		{[]string{"resource my-res-42", "mode v1", "api_version 2024-10-21", "api_key {env.SWITCHYARD_TEST_AZURE_KEY}"}, "api_version: only the deployments mode"},
	} {
		err := validate(t, azureModel(tc.lines...))
		require.Error(t, err, tc.want)
		assert.Contains(t, err.Error(), `model "gpt-4o", candidate "eu": channel:`)
		assert.Contains(t, err.Error(), tc.want)
		assert.NotContains(t, err.Error(), azureKeyValue)
		assert.NotContains(t, err.Error(), "my-res-42")
	}
}

func TestAzureChannelBlockMistakesAreCaddyfileErrors(t *testing.T) {
	for lines, want := range map[string]string{
		"resource my-res-42\n\t\t\t\t\tmode classic":  `mode: "classic" is not one of deployments, v1, foundry`,
		"resource my-res-42\n\t\t\t\t\tregion westeu": `unknown option "region"`,
		"resource my-res-42 other-res":                "resource: expected one value",
	} {
		_, err := adapt(t, azureModel(lines))
		require.Error(t, err, want)
		assert.Contains(t, err.Error(), `model "gpt-4o", candidate "eu": channel azure:`)
		assert.Contains(t, err.Error(), want)
	}
	// A channel's URL and key come from its block only.
	src := strings.Replace(azureModel("resource my-res-42", "deployment d", "api_key k-123"), "upstream_model gpt4o-prod", "upstream_model gpt4o-prod\n\t\t\t\turl https://x.example/v1", 1)
	err := validate(t, src)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the url and credential go in the channel's block")
}

// A channel set up for the other family (Foundry's Claude under a family_a candidate, an
// OpenAI deployment under family_b) is refused at load rather than skipped on every
// request.
func TestAChannelThatServesNothingOnItsCandidatesProtocolIsRefused(t *testing.T) {
	t.Setenv("SWITCHYARD_TEST_AZURE_KEY", azureKeyValue)
	err := validate(t, azureModel("resource my-res-42", "mode foundry", "api_key {env.SWITCHYARD_TEST_AZURE_KEY}"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `model "gpt-4o", candidate "eu": channel azure: serves no family_a operation`)
	assert.NoError(t, validate(t, azureModel("resource my-res-42", "mode v1", "api_key {env.SWITCHYARD_TEST_AZURE_KEY}")))
	onB := strings.Replace(azureModel("resource my-res-42", "deployment d", "api_key {env.SWITCHYARD_TEST_AZURE_KEY}"),
		"protocol family_a", "protocol family_b", 1)
	err = validate(t, onB)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "serves no family_b operation")
}
