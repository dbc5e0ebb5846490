// Package azure reaches a candidate through Microsoft Azure: Azure OpenAI's classic
// deployment API (/openai/deployments/{deployment}/…?api-version=…), its v1 API
// (/openai/v1/…, the deployment name as the body's model) and Claude in Microsoft
// Foundry (/anthropic/v1/messages). Bodies keep their family's shape; the channel sets
// the URL and the authorisation (an API key, or an Entra ID token from azidentity), and
// turns Azure's error envelope and its content-filter additions back into what the
// family's own API sends.
package azure

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/channel"
	"github.com/switchyard-gw/switchyard/protocols"
)

// Modes: which of Azure's APIs the channel calls.
const (
	// ModeDeployments is Azure OpenAI's classic API: the deployment in the path and a
	// dated api-version in the query. Chat completions only.
	ModeDeployments = "deployments"
	// ModeV1 is Azure OpenAI's v1 API: OpenAI's paths under /openai/v1, the deployment
	// name as the body's model. Chat completions and Responses.
	ModeV1 = "v1"
	// ModeFoundry is Claude in Microsoft Foundry: Anthropic's Messages API under
	// /anthropic, the deployment name as the body's model.
	ModeFoundry = "foundry"
)

// DefaultAPIVersion is the api-version of the classic API when none is configured: the
// latest generally available data-plane version known here.
const DefaultAPIVersion = "2024-10-21"

// Entra ID token scopes: Azure OpenAI's, and Foundry's for Claude.
const (
	ScopeOpenAI  = "https://cognitiveservices.azure.com/.default"
	ScopeFoundry = "https://ai.azure.com/.default"
)

// Config describes one Azure channel.
type Config struct {
	// Resource is the Azure resource name: the endpoint is https://{resource}.openai.azure.com
	// (OpenAI modes) or https://{resource}.services.ai.azure.com (foundry).
	Resource string
	// Endpoint, when set, replaces the resource's endpoint: the root the Azure paths
	// (/openai/…, /anthropic/…) are appended to.
	Endpoint string
	// Mode is ModeDeployments (default), ModeV1 or ModeFoundry.
	Mode string
	// Deployment is the deployment the classic API calls (required there; the other
	// modes take the deployment from the body's model).
	Deployment string
	// APIVersion is the classic API's api-version; default DefaultAPIVersion.
	APIVersion string
	// APIKey is the resource's key, sent as api-key (OpenAI modes) or x-api-key
	// (foundry). Without it the channel asks Entra ID for a token.
	APIKey string
	// TenantID, ClientID and ClientSecret, all set, name an app registration whose
	// client secret gets the Entra ID token; otherwise azidentity's default chain
	// (environment, workload identity, managed identity, Azure CLI) does.
	TenantID, ClientID, ClientSecret string
	// Token, when set, is the token source used instead (tests).
	Token azcore.TokenCredential

	// entra tunes how azidentity reaches Entra ID (tests point it at a local server).
	entra azcore.ClientOptions
}

// Channel is an Azure channel. It is safe for concurrent use.
type Channel struct {
	mode       string
	endpoint   *url.URL
	deployment string
	apiVersion string
	apiKey     string
	token      azcore.TokenCredential
	scope      string
	secrets    []string
	names      []string
	// obtained are the Entra ID tokens lately sent: masked like the configured secrets,
	// since an endpoint may echo what it was sent.
	obtained channel.Obtained
}

var _ channel.Channel = (*Channel)(nil)

// New checks cfg and prepares the channel; with no API key it prepares the Entra ID
// credential (nothing is fetched until the first request). Errors name fields, never
// their values.
func New(cfg Config) (*Channel, error) {
	c := &Channel{mode: cfg.Mode, deployment: cfg.Deployment, apiVersion: cfg.APIVersion, apiKey: cfg.APIKey}
	if c.mode == "" {
		c.mode = ModeDeployments
	}
	switch c.mode {
	case ModeDeployments:
		if c.deployment == "" {
			return nil, errors.New("deployment: required in mode deployments")
		}
		if c.apiVersion == "" {
			c.apiVersion = DefaultAPIVersion
		}
	case ModeV1, ModeFoundry:
		if c.apiVersion != "" {
			return nil, fmt.Errorf("api_version: only the deployments mode takes one, not mode %s", c.mode)
		}
	default:
		return nil, fmt.Errorf("mode: %q is not one of deployments, v1, foundry", c.mode)
	}
	switch {
	case cfg.Endpoint != "":
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return nil, errors.New("endpoint: must be an absolute http or https URL without a query")
		}
		u.Path = strings.TrimSuffix(u.Path, "/")
		c.endpoint = u
	case cfg.Resource != "":
		if !validResource(cfg.Resource) {
			return nil, errors.New("resource: must be an Azure resource name (letters, digits and hyphens)")
		}
		host := cfg.Resource + ".openai.azure.com"
		if c.mode == ModeFoundry {
			host = cfg.Resource + ".services.ai.azure.com"
		}
		c.endpoint = &url.URL{Scheme: "https", Host: host}
	default:
		return nil, errors.New("resource: required (or endpoint)")
	}
	c.scope = ScopeOpenAI
	if c.mode == ModeFoundry {
		c.scope = ScopeFoundry
	}
	if c.apiKey != "" && (cfg.TenantID != "" || cfg.ClientID != "" || cfg.ClientSecret != "" || cfg.Token != nil) {
		// Two credentials for one resource is a mistake (the OpenAI SDK's Azure client refuses it too).
		return nil, errors.New("api_key: give either an API key or an Entra ID app (tenant_id, client_id, client_secret), not both")
	}
	if c.apiKey == "" {
		tok, err := entraCredential(cfg)
		if err != nil {
			return nil, err
		}
		c.token = tok
	}
	for _, s := range []string{cfg.APIKey, cfg.TenantID, cfg.ClientID, cfg.ClientSecret} {
		if s != "" {
			c.secrets = append(c.secrets, s)
		}
	}
	for _, n := range []string{cfg.Resource, cfg.Deployment} {
		if n != "" {
			c.names = append(c.names, n)
		}
	}
	return c, nil
}

var resourcePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,62}$`)

func validResource(s string) bool { return resourcePattern.MatchString(s) }

// entraCredential is the Entra ID token source of a channel without an API key: a
// client secret when all three of its fields are set, else azidentity's default chain.
func entraCredential(cfg Config) (azcore.TokenCredential, error) {
	if cfg.Token != nil {
		return cfg.Token, nil
	}
	set := 0
	for _, s := range []string{cfg.TenantID, cfg.ClientID, cfg.ClientSecret} {
		if s != "" {
			set++
		}
	}
	switch set {
	case 3:
		cred, err := azidentity.NewClientSecretCredential(cfg.TenantID, cfg.ClientID, cfg.ClientSecret,
			&azidentity.ClientSecretCredentialOptions{ClientOptions: cfg.entra, DisableInstanceDiscovery: cfg.entra.Transport != nil})
		if err != nil {
			// azidentity's text may quote the tenant: say which fields, not what they hold.
			return nil, errors.New("tenant_id, client_id, client_secret: not a usable Entra ID app registration")
		}
		return cred, nil
	case 0:
		cred, err := azidentity.NewDefaultAzureCredential(nil)
		if err != nil {
			return nil, errors.New("api_key: none given, and no Entra ID credential could be set up from the environment")
		}
		return cred, nil
	}
	return nil, errors.New("tenant_id, client_id, client_secret: give all three, or none")
}

// Name implements channel.Channel.
func (c *Channel) Name() string { return "azure" }

// Endpoint implements channel.Channel.
func (c *Channel) Endpoint() *url.URL { u := *c.endpoint; return &u }

// Secrets implements channel.Channel.
func (c *Channel) Secrets() []string { return c.secrets }

// RuntimeSecrets implements channel.RuntimeSecrets: the Entra ID tokens obtained lately
// (the current one and the one before).
func (c *Channel) RuntimeSecrets() []string { return c.obtained.Secrets() }

// Names implements channel.Channel: the resource and deployment names, which operators
// often make ordinary words ("openai", "gpt-4o"). The resource's host is a secret.
func (c *Channel) Names() []string { return c.names }

// Offers implements channel.Channel: the classic API is asked for chat completions only
// (its Responses route is not deployment-based); v1 serves chat completions and
// Responses; Foundry serves Messages (count_tokens is not known to be there).
func (c *Channel) Offers(op protocols.Operation) bool {
	switch c.mode {
	case ModeDeployments:
		return op.Kind == protocols.KindChat
	case ModeV1:
		return op.Kind == protocols.KindChat || op.Kind == protocols.KindResponses
	case ModeFoundry:
		return op.Kind == protocols.KindMessages
	}
	return false
}

// path is the URL path of op under the endpoint.
func (c *Channel) path(op protocols.Operation) string {
	switch {
	case c.mode == ModeFoundry:
		return "/anthropic/v1/messages"
	case c.mode == ModeDeployments:
		return "/openai/deployments/" + url.PathEscape(c.deployment) + "/chat/completions"
	case op.Kind == protocols.KindResponses:
		return "/openai/v1/responses"
	}
	return "/openai/v1/chat/completions"
}

// NewRequest implements channel.Channel. The body goes as it is: the v1 and Foundry
// APIs take the deployment name as the model, which the upstream model already is, and
// the classic API ignores the body's model.
func (c *Channel) NewRequest(ctx context.Context, op protocols.Operation, body []byte, stream bool, header http.Header) (*http.Request, error) {
	if !c.Offers(op) {
		return nil, fmt.Errorf("azure: %s is not offered in mode %s", op.Kind, c.mode)
	}
	u := *c.endpoint
	u.Path = c.endpoint.Path + c.path(op)
	u.RawPath = ""
	if c.mode == ModeDeployments {
		u.RawQuery = "api-version=" + url.QueryEscape(c.apiVersion)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, errors.New("azure: the request could not be built")
	}
	h := header.Clone()
	if h == nil {
		h = http.Header{}
	}
	// Azure wants its own auth header and nothing of an OpenAI account's.
	for _, name := range []string{"Authorization", "Api-Key", "X-Api-Key", "Openai-Organization", "Openai-Project"} {
		h.Del(name)
	}
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/json")
	}
	if c.mode == ModeFoundry && h.Get("Anthropic-Version") == "" {
		h.Set("Anthropic-Version", "2023-06-01")
	}
	switch {
	case c.apiKey != "" && c.mode == ModeFoundry:
		h.Set("X-Api-Key", c.apiKey)
	case c.apiKey != "":
		h.Set("Api-Key", c.apiKey)
	default:
		tok, err := c.token.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{c.scope}})
		if err != nil || tok.Token == "" {
			// The token service's error may name the tenant or the app: not passed on.
			return nil, fmt.Errorf("azure: Entra ID token: %w", channel.ErrCredential)
		}
		c.obtained.Note(tok.Token)
		h.Set("Authorization", "Bearer "+tok.Token)
	}
	req.Header = h
	return req, nil
}

// maxErrorBody bounds the error body the channel reads to rewrite.
const maxErrorBody = 64 << 10

// Response implements channel.Channel: Azure's errors in OpenAI's envelope, a 429's
// wait from its message into Retry-After, and Azure's content-filter additions taken out
// of chat answers and streams. Foundry answers as Anthropic does and is left alone
// unless an error is not in Anthropic's envelope.
func (c *Channel) Response(op protocols.Operation, resp *http.Response) {
	if resp.StatusCode >= 400 {
		c.rewriteError(op, resp)
		return
	}
	if c.mode == ModeFoundry || op.Kind != protocols.KindChat || resp.StatusCode != http.StatusOK {
		return
	}
	mt := strings.ToLower(strings.TrimSpace(strings.Split(resp.Header.Get("Content-Type"), ";")[0]))
	switch mt {
	case "text/event-stream":
		resp.Body = newFilterStream(resp.Body)
	case "application/json":
		resp.Body = &lazyJSON{src: resp.Body}
	default:
		return
	}
	// The body's length changes with what is removed.
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
}

// retryAfterInMessage finds the wait Azure writes in a 429's message: "Please retry
// after 20 seconds", "Try again in 2 seconds".
var retryAfterInMessage = regexp.MustCompile(`(?i)(?:retry after|try again in) (\d{1,6}) seconds?`)

// rewriteError puts an error answer in the family's envelope, keeping its status.
func (c *Channel) rewriteError(op protocols.Operation, resp *http.Response) {
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_ = resp.Body.Close()
	if err != nil {
		raw = nil
	}
	e := gjson.GetBytes(raw, "error")
	message := e.Get("message").String()
	code := e.Get("code").String()
	wait := 0
	if m := retryAfterInMessage.FindStringSubmatch(message); m != nil {
		wait, _ = strconv.Atoi(m[1])
	}
	family := protocols.FamilyA
	if c.mode == ModeFoundry {
		family = protocols.FamilyB
	}
	var out []byte
	switch {
	case family == protocols.FamilyB && gjson.GetBytes(raw, "type").Str == "error":
		out = raw // Anthropic's own envelope
	case resp.StatusCode == http.StatusTooManyRequests:
		// Azure's text names its pricing tier and api-version: a neutral one instead.
		msg := "Rate limit reached for this model. Please try again later."
		if wait > 0 {
			msg = fmt.Sprintf("Rate limit reached for this model. Please try again in %ds.", wait)
		}
		apiErr := &protocols.APIError{Family: family, Status: resp.StatusCode, Message: msg}
		if family == protocols.FamilyA {
			apiErr.Code = "rate_limit_exceeded"
		}
		out = apiErr.Body("")
	case family == protocols.FamilyA && e.Get("type").Type == gjson.String && !e.Get("innererror").Exists() && !e.Get("status").Exists() && e.Get("code").Type != gjson.Number:
		out = raw // already OpenAI's envelope
	default:
		if message == "" {
			message = http.StatusText(resp.StatusCode)
		}
		apiErr := &protocols.APIError{Family: family, Status: resp.StatusCode, Message: message}
		if family == protocols.FamilyA {
			apiErr.Param = e.Get("param").String()
			// A numeric code ("429", "401") only repeats the status.
			if _, err := strconv.Atoi(code); err != nil {
				apiErr.Code = code
			}
		}
		out = apiErr.Body("")
	}
	if wait > 0 && resp.Header.Get("Retry-After") == "" && resp.Header.Get("Retry-After-Ms") == "" {
		resp.Header.Set("Retry-After", strconv.Itoa(wait))
	}
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	resp.Header.Set("Content-Type", "application/json")
}
