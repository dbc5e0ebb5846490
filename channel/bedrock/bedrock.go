// Package bedrock reaches Claude on Amazon Bedrock through InvokeModel and
// InvokeModelWithResponseStream: the Anthropic Messages body without `model` and
// `stream`, the model id in the path, `anthropic_version` and the betas in the body,
// and the request authorised with AWS Signature Version 4 (service "bedrock") or a
// Bedrock API key. count_tokens goes to CountTokens, which counts that same body sent
// base64-wrapped. With API "messages" it reaches Claude in Amazon Bedrock instead: the
// Anthropic Messages API itself at {endpoint}/anthropic/v1/messages, body and SSE as the
// first-party API has them. It knows nothing of Caddy.
package bedrock

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/switchyard-gw/switchyard/channel"
	"github.com/switchyard-gw/switchyard/protocols"
)

// AnthropicVersion is the body's anthropic_version on InvokeModel. It is set whatever the
// client's anthropic-version header said: the dated first-party versions are refused by
// Bedrock's ARN-versioned models.
const AnthropicVersion = "bedrock-2023-05-31"

// SigningName is the SigV4 service name of bedrock-runtime (not the host's prefix).
const SigningName = "bedrock"

// MantleSigningName is the SigV4 service name of the bedrock-mantle hosts.
const MantleSigningName = "bedrock-mantle"

// MessagesVersion is the anthropic-version header sent to the Messages endpoint when the
// client sent none: the one version AWS documents for it.
const MessagesVersion = "2023-06-01"

// The APIs a channel can speak, Config.API.
const (
	APIInvoke   = "invoke"
	APIMessages = "messages"
)

// Config says where a Bedrock channel sends requests and how it authorises them. At most
// one credential source is used: APIKey, else the static keys, else Credentials, else the
// default AWS chain (environment, shared files, container and instance roles).
type Config struct {
	// Region is the AWS region of the runtime endpoint and of the signature. Required.
	Region string
	// Endpoint overrides https://bedrock-runtime.{Region}.amazonaws.com (a VPC endpoint,
	// a FIPS host, a test server). Its path, if any, is kept before /model/….
	Endpoint string
	// APIKey is a Bedrock API key, sent as `Authorization: Bearer`; the request is then
	// not signed.
	APIKey string
	// AccessKeyID, SecretAccessKey and SessionToken are static credentials for SigV4.
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	// Credentials, when set and no key above is, provides SigV4 credentials instead of
	// the default chain.
	Credentials aws.CredentialsProvider
	// API is APIInvoke (InvokeModel; the default when empty) or APIMessages (the
	// Anthropic Messages API under /anthropic, on bedrock-runtime or bedrock-mantle).
	API string
}

// Channel is a Bedrock InvokeModel channel. It is safe for concurrent use.
type Channel struct {
	region   string
	endpoint *url.URL
	apiKey   string
	static   []string // the configured access key id, secret and session token, for Secrets
	creds    aws.CredentialsProvider
	signer   *v4.Signer
	now      func() time.Time
	messages bool   // the /anthropic Messages API rather than InvokeModel
	service  string // the SigV4 service name
	// obtained are the keys the credential source gave lately (the default chain's may
	// be a role's, rotating): masked like the configured ones, since an endpoint may
	// echo what it was sent.
	obtained channel.Obtained
}

var _ channel.Channel = (*Channel)(nil)

// regionName is what a region may look like: it becomes part of a host name.
var regionName = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// New checks cfg and builds the channel. Without an API key or static keys it loads the
// default AWS credential chain, but does not ask it for credentials yet (see
// CheckCredentials). Errors name the field, never its value.
func New(cfg Config) (*Channel, error) {
	if cfg.Region == "" {
		return nil, errors.New("region is required")
	}
	if !regionName.MatchString(cfg.Region) {
		return nil, errors.New("region: not an AWS region name (lower-case letters, digits and hyphens)")
	}
	c := &Channel{region: cfg.Region, apiKey: cfg.APIKey, signer: v4.NewSigner(), now: time.Now}
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return nil, errors.New("endpoint: must be an absolute http or https URL without query")
		}
		c.endpoint = u
	} else {
		c.endpoint = &url.URL{Scheme: "https", Host: "bedrock-runtime." + cfg.Region + ".amazonaws.com"}
	}
	switch cfg.API {
	case "", APIInvoke:
	case APIMessages:
		c.messages = true
	default:
		return nil, errors.New("api: must be invoke or messages")
	}
	c.service = SigningName
	if strings.HasPrefix(strings.ToLower(c.endpoint.Hostname()), "bedrock-mantle.") {
		// mantle checks signatures against its own service name, whichever API is used.
		c.service = MantleSigningName
	}

	static := cfg.AccessKeyID != "" || cfg.SecretAccessKey != "" || cfg.SessionToken != ""
	switch {
	case cfg.APIKey != "" && static:
		return nil, errors.New("api_key and access keys are exclusive: set one")
	case cfg.APIKey != "":
		return c, nil
	case static:
		if cfg.AccessKeyID == "" || cfg.SecretAccessKey == "" {
			return nil, errors.New("access_key_id and secret_access_key go together")
		}
		for _, k := range []string{cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken} {
			if k != "" {
				c.static = append(c.static, k)
			}
		}
		c.creds = credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)
	case cfg.Credentials != nil:
		c.creds = cfg.Credentials
	default:
		loaded, err := awsconfig.LoadDefaultConfig(context.Background(), awsconfig.WithRegion(cfg.Region))
		if err != nil {
			// The SDK's text names files and profiles, not keys; an operator needs it.
			return nil, fmt.Errorf("loading the default AWS configuration: %v", err)
		}
		if loaded.Credentials == nil {
			return nil, errors.New("the default AWS configuration has no credential source")
		}
		c.creds = loaded.Credentials
	}
	return c, nil
}

// CheckCredentials asks the credential source for credentials now, so that a
// configuration without any fails at load rather than on the first request. An API key
// needs no check. The error wraps channel.ErrCredential and holds nothing of the
// provider's answer (it can name the account's roles).
func (c *Channel) CheckCredentials(ctx context.Context) error {
	if c.apiKey != "" {
		return nil
	}
	_, err := c.credentials(ctx)
	return err
}

func (c *Channel) credentials(ctx context.Context) (aws.Credentials, error) {
	cr, err := c.creds.Retrieve(ctx)
	if err != nil || !cr.HasKeys() {
		return aws.Credentials{}, fmt.Errorf("bedrock: no AWS credentials: %w", channel.ErrCredential)
	}
	c.obtained.Note(cr.AccessKeyID, cr.SecretAccessKey, cr.SessionToken)
	return cr, nil
}

// Name is "bedrock".
func (c *Channel) Name() string { return "bedrock" }

// Endpoint is the runtime endpoint requests go to.
func (c *Channel) Endpoint() *url.URL { u := *c.endpoint; return &u }

// Offers reports Messages and its count_tokens (Bedrock's CountTokens, which counts an
// InvokeModel body).
func (c *Channel) Offers(op protocols.Operation) bool {
	return op.Family == protocols.FamilyB && (op.Kind == protocols.KindMessages || op.Kind == protocols.KindMessagesCountTokens)
}

// NewRequest builds the InvokeModel (or, for a stream, InvokeModelWithResponseStream)
// request of a Messages body whose `model` is the Bedrock model id, inference profile or
// ARN, or the CountTokens request of a count_tokens body, and authorises it last.
func (c *Channel) NewRequest(ctx context.Context, op protocols.Operation, body []byte, stream bool, header http.Header) (*http.Request, error) {
	if !c.Offers(op) {
		return nil, fmt.Errorf("bedrock: %s is not offered", op.Kind)
	}
	model := gjson.GetBytes(body, "model")
	if model.Type != gjson.String || model.Str == "" || model.Str == "." || model.Str == ".." {
		return nil, errors.New("bedrock: the body has no usable model id")
	}
	if c.messages {
		return c.messagesRequest(ctx, op, body, stream, header)
	}
	body, err := editBody(body, header.Values("Anthropic-Beta"))
	if err != nil {
		return nil, err
	}

	counting := op.Kind == protocols.KindMessagesCountTokens
	action := "/invoke"
	switch {
	case counting:
		if body, err = countTokensBody(body); err != nil {
			return nil, err
		}
		action, stream = "/count-tokens", false
	case stream:
		action = "/invoke-with-response-stream"
	}
	base := strings.TrimSuffix(c.endpoint.Path, "/")
	rawBase := strings.TrimSuffix(c.endpoint.EscapedPath(), "/")
	u := *c.endpoint
	// The id is one path segment: an ARN's "/" must travel as %2F. RawPath keeps that
	// form on the wire, and the signer escapes the wire form once more, as AWS does.
	u.Path = base + "/model/" + model.Str + action
	u.RawPath = rawBase + "/model/" + url.PathEscape(model.Str) + action

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, errors.New("bedrock: building the request failed")
	}
	// Only what Bedrock reads is sent. Every header present is signed, so a client's or
	// proxy's extra header (traceparent, X-Forwarded-*, session ids) would only be one
	// more thing a proxy on the way could change and break the signature with.
	req.Header.Set("Content-Type", "application/json")
	if stream {
		req.Header.Set("X-Amzn-Bedrock-Accept", "application/json")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	if ua := header.Get("User-Agent"); ua != "" {
		req.Header.Set("User-Agent", ua) // never signed (the signer skips it)
	}

	return c.authorize(ctx, req, body)
}

// messagesRequest builds the request of the /anthropic Messages API: the client's body
// as it is (its model is already the Bedrock id, its stream says what it wants), the
// version and betas in headers as the first-party API takes them.
func (c *Channel) messagesRequest(ctx context.Context, op protocols.Operation, body []byte, stream bool, header http.Header) (*http.Request, error) {
	path := "/anthropic/v1/messages"
	if op.Kind == protocols.KindMessagesCountTokens {
		path, stream = path+"/count_tokens", false
	}
	u := *c.endpoint
	u.Path = strings.TrimSuffix(c.endpoint.Path, "/") + path
	u.RawPath = ""
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, errors.New("bedrock: building the request failed")
	}
	// As on InvokeModel, only what the endpoint reads is sent (and so signed).
	req.Header.Set("Content-Type", "application/json")
	if stream {
		req.Header.Set("Accept", "text/event-stream")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	version := strings.TrimSpace(header.Get("Anthropic-Version"))
	if version == "" {
		version = MessagesVersion
	}
	req.Header.Set("Anthropic-Version", version)
	var betas []string
	for _, v := range header.Values("Anthropic-Beta") {
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s != "" && !slices.Contains(betas, s) {
				betas = append(betas, s)
			}
		}
	}
	if len(betas) > 0 {
		req.Header.Set("Anthropic-Beta", strings.Join(betas, ","))
	}
	if ua := header.Get("User-Agent"); ua != "" {
		req.Header.Set("User-Agent", ua)
	}
	return c.authorize(ctx, req, body)
}

// authorize adds the API key, or signs req (whose body is body) last of all.
func (c *Channel) authorize(ctx context.Context, req *http.Request, body []byte) (*http.Request, error) {
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
		return req, nil
	}
	cr, err := c.credentials(ctx)
	if err != nil {
		return nil, err
	}
	if err := signV4(ctx, c.signer, cr, req, body, c.service, c.region, c.now()); err != nil {
		return nil, errors.New("bedrock: signing the request failed")
	}
	return req, nil
}

// signV4 signs req, whose body is body, with the hash of exactly those bytes: the body
// is final by now, so what is signed is what is sent.
func signV4(ctx context.Context, s *v4.Signer, cr aws.Credentials, req *http.Request, body []byte, service, region string, at time.Time) error {
	sum := sha256.Sum256(body)
	return s.SignHTTP(ctx, cr, req, hex.EncodeToString(sum[:]), service, region, at.UTC())
}

// editBody makes a Messages body an InvokeModel body: no model or stream (the path says
// both), Bedrock's anthropic_version, and the anthropic-beta header's list as
// anthropic_beta (Bedrock reads betas from the body only), after any the body had.
func editBody(body []byte, betaHeaders []string) ([]byte, error) {
	var err error
	for _, k := range []string{"model", "stream"} {
		if body, err = sjson.DeleteBytes(body, k); err != nil {
			return nil, errors.New("bedrock: the request body could not be edited")
		}
	}
	if body, err = sjson.SetBytes(body, "anthropic_version", AnthropicVersion); err != nil {
		return nil, errors.New("bedrock: the request body could not be edited")
	}
	var betas []string
	seen := map[string]bool{}
	for _, b := range gjson.GetBytes(body, "anthropic_beta").Array() {
		if s := strings.TrimSpace(b.String()); s != "" && !seen[s] {
			seen[s] = true
			betas = append(betas, s)
		}
	}
	added := false
	for _, v := range betaHeaders {
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s != "" && !seen[s] {
				seen[s] = true
				betas = append(betas, s)
				added = true
			}
		}
	}
	if added {
		if body, err = sjson.SetBytes(body, "anthropic_beta", betas); err != nil {
			return nil, errors.New("bedrock: the request body could not be edited")
		}
	}
	return body, nil
}

// countTokensBody wraps an InvokeModel body as CountTokens takes it:
// {"input":{"invokeModel":{"body":"<base64 of that body>"}}}. InvokeModel requires
// max_tokens, which a count_tokens body need not have; its value does not change the
// count, so 1 stands in.
func countTokensBody(invoke []byte) ([]byte, error) {
	if !gjson.GetBytes(invoke, "max_tokens").Exists() {
		var err error
		if invoke, err = sjson.SetBytes(invoke, "max_tokens", 1); err != nil {
			return nil, errors.New("bedrock: the request body could not be edited")
		}
	}
	const head, tail = `{"input":{"invokeModel":{"body":"`, `"}}}`
	out := make([]byte, 0, len(head)+base64.StdEncoding.EncodedLen(len(invoke))+len(tail))
	out = append(out, head...)
	out = base64.StdEncoding.AppendEncode(out, invoke)
	return append(out, tail...), nil
}

// Response turns Bedrock's answer into the Anthropic API's own (see Respond). The
// Messages API's successes are that already; its errors still are mapped and scrubbed.
func (c *Channel) Response(op protocols.Operation, resp *http.Response) {
	if !c.messages || resp.StatusCode >= 400 {
		Respond(op, resp)
	}
	if resp.StatusCode < 300 && op.Kind == protocols.KindMessages {
		channel.UntagAnswer(resp, "bdrk")
	}
}

// Secrets are the configured keys: the access key id, secret access key and session
// token, or the API key. The account id of an ARN model id is the candidate's, not the
// channel's: see ModelSecrets.
func (c *Channel) Secrets() []string {
	out := slices.Clone(c.static)
	if c.apiKey != "" {
		out = append(out, c.apiKey)
	}
	return out
}

// RuntimeSecrets implements channel.RuntimeSecrets: the keys the credential source gave
// lately (the current set and the one before), whichever source it is.
func (c *Channel) RuntimeSecrets() []string { return c.obtained.Secrets() }

// Names implements channel.Channel: the region, masked in error messages only.
func (c *Channel) Names() []string { return []string{c.region} }

// ModelSecrets is the part of a model id that names the account: an ARN's account id
// (arn:aws:bedrock:{region}:{account}:…); nothing for a plain model id or inference
// profile id. The ARN's region is a name like the channel's own, and the whole ARN, the
// upstream model, is put back as the service model in errors anyway.
func ModelSecrets(model string) []string {
	parts := strings.SplitN(model, ":", 6)
	if len(parts) < 6 || parts[0] != "arn" || parts[4] == "" {
		return nil
	}
	return []string{parts[4]}
}

// ModelSecrets implements channel.ModelSecrets: an ARN's account id is the candidate's
// secret too.
func (c *Channel) ModelSecrets(model string) []string { return ModelSecrets(model) }
