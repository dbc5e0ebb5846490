package caddymodule

import (
	"fmt"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/switchyard-gw/switchyard/channel"
	"github.com/switchyard-gw/switchyard/channel/azure"
)

func init() {
	caddy.RegisterModule(AzureChannel{})
}

// AzureChannel is the `switchyard.channels.azure` module: a candidate reached through
// Microsoft Azure, either Azure OpenAI (the classic deployment API or the v1 API; the
// candidate's protocol is family_a) or Claude in Microsoft Foundry (family_b).
//
//	channel azure {
//		resource my-res
//		mode deployments
//		deployment gpt4o-prod
//		api_key {env.AZURE_OPENAI_API_KEY}
//	}
//
// Without api_key the channel authenticates with an Entra ID token: from tenant_id,
// client_id and client_secret when all three are given, else from the environment's
// default Azure credentials (AZURE_* variables, workload identity, managed identity,
// the Azure CLI's login).
type AzureChannel struct {
	// Resource is the Azure resource's name: the endpoint is https://<resource>.openai.azure.com,
	// or https://<resource>.services.ai.azure.com in mode foundry. Required unless
	// Endpoint is set.
	Resource string `json:"resource,omitempty"`
	// Endpoint replaces the resource's endpoint with this root URL (a private endpoint or
	// a proxy); Azure's paths (/openai/…, /anthropic/…) are added to it.
	Endpoint string `json:"endpoint,omitempty"`
	// Mode is the API called: deployments (Azure OpenAI's classic API, chat completions
	// only), v1 (Azure OpenAI's v1 API, chat completions and Responses; the candidate's
	// upstream_model is the deployment name) or foundry (Claude's Messages API in
	// Microsoft Foundry; upstream_model is the deployment name). Default: deployments.
	Mode string `json:"mode,omitempty"`
	// Deployment is the deployment the classic API calls. Required in mode deployments.
	Deployment string `json:"deployment,omitempty"`
	// APIVersion is the classic API's api-version. Default: 2024-10-21.
	APIVersion string `json:"api_version,omitempty"`
	// APIKey is the resource's key, sent as api-key (or x-api-key in mode foundry).
	// Placeholders such as {env.AZURE_OPENAI_API_KEY} are replaced at load; one that
	// resolves to nothing is an error. Default: an Entra ID token instead.
	APIKey string `json:"api_key,omitempty"`
	// TenantID, ClientID and ClientSecret name an Entra ID app registration whose client
	// secret gets the token (all three, or none). Placeholders are replaced at load.
	TenantID     string `json:"tenant_id,omitempty"`
	ClientID     string `json:"client_id,omitempty"`
	ClientSecret string `json:"client_secret,omitempty"`

	resolved azure.Config
	ch       *azure.Channel
}

// CaddyModule returns the Caddy module information.
func (AzureChannel) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "switchyard.channels.azure", New: func() caddy.Module { return new(AzureChannel) }}
}

// Provision implements caddy.Provisioner: it resolves the placeholders of every field,
// so that a credential that cannot be loaded is an error at load.
func (a *AzureChannel) Provision(caddy.Context) error {
	repl := caddy.NewReplacer()
	cfg := azure.Config{}
	for _, f := range []struct {
		name string
		raw  string
		out  *string
	}{
		{"resource", a.Resource, &cfg.Resource},
		{"endpoint", a.Endpoint, &cfg.Endpoint},
		{"mode", a.Mode, &cfg.Mode},
		{"deployment", a.Deployment, &cfg.Deployment},
		{"api_version", a.APIVersion, &cfg.APIVersion},
		{"api_key", a.APIKey, &cfg.APIKey},
		{"tenant_id", a.TenantID, &cfg.TenantID},
		{"client_id", a.ClientID, &cfg.ClientID},
		{"client_secret", a.ClientSecret, &cfg.ClientSecret},
	} {
		v := strings.TrimSpace(repl.ReplaceKnown(f.raw, ""))
		if f.raw != "" && v == "" {
			return fmt.Errorf("%s: %s resolves to an empty value (is it set in the gateway's environment?)", f.name, placeholderNames(f.raw))
		}
		*f.out = v
	}
	a.resolved = cfg
	return nil
}

// Validate implements caddy.Validator: the fields are checked together and the channel
// is built (an Entra ID credential is set up, but no token is fetched yet).
func (a *AzureChannel) Validate() error {
	ch, err := azure.New(a.resolved)
	if err != nil {
		return err
	}
	a.ch = ch
	return nil
}

// Channel implements ChannelModule.
func (a *AzureChannel) Channel() channel.Channel { return a.ch }

// UnmarshalCaddyfile reads the block of `channel azure { ... }`: one value per option.
func (a *AzureChannel) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the channel's name
	if d.NextArg() {
		return d.ArgErr()
	}
	fields := map[string]*string{
		"resource": &a.Resource, "endpoint": &a.Endpoint, "mode": &a.Mode,
		"deployment": &a.Deployment, "api_version": &a.APIVersion, "api_key": &a.APIKey,
		"tenant_id": &a.TenantID, "client_id": &a.ClientID, "client_secret": &a.ClientSecret,
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		out, ok := fields[opt]
		if !ok {
			return d.Errf("unknown option %q (resource, endpoint, mode, deployment, api_version, api_key, tenant_id, client_id, client_secret)", opt)
		}
		if !d.Args(out) || d.NextArg() {
			return d.Errf("%s: expected one value", opt)
		}
	}
	if a.Mode != "" && a.Mode != azure.ModeDeployments && a.Mode != azure.ModeV1 && a.Mode != azure.ModeFoundry {
		return d.Errf("mode: %q is not one of deployments, v1, foundry", a.Mode)
	}
	return nil
}

var (
	_ caddy.Provisioner     = (*AzureChannel)(nil)
	_ caddy.Validator       = (*AzureChannel)(nil)
	_ caddyfile.Unmarshaler = (*AzureChannel)(nil)
	_ ChannelModule         = (*AzureChannel)(nil)
)
