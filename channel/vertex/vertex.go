// Package vertex reaches Claude on Google Vertex AI: the Messages body and events of
// Anthropic's own API, with the model in the URL, anthropic_version in the body and a
// Google OAuth2 access token as the credential. Google's own errors (quota, IAM,
// routing) are turned into Anthropic's error envelope.
package vertex

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/switchyard-gw/switchyard/channel"
	"github.com/switchyard-gw/switchyard/protocols"
)

// Scope is the OAuth2 scope Vertex AI needs.
const Scope = "https://www.googleapis.com/auth/cloud-platform"

// AnthropicVersion is the version Vertex wants in the body.
const AnthropicVersion = "vertex-2023-10-16"

// tokenTimeout bounds one call to the token endpoint: the library's calls take no
// request context, so without it a hung endpoint would hold its goroutine for ever.
const tokenTimeout = 30 * time.Second

// maxErrorBody bounds how much of an error answer is read to rewrite it.
const maxErrorBody = 1 << 20

// Config says which project and location to reach and with which credentials.
type Config struct {
	// Project is the Google Cloud project id. Default: the credentials' project_id.
	Project string
	// Region is the location: a region such as us-east5, or global, us or eu.
	Region string
	// Endpoint overrides the base URL (tests, private endpoints); the path of the
	// request is appended to it.
	Endpoint string
	// CredentialsFile is a service_account or authorized_user JSON file.
	CredentialsFile string
	// CredentialsJSON is the same JSON given inline; used when CredentialsFile is empty.
	CredentialsJSON []byte
	// Neither set: Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, the
	// gcloud file, the metadata server).
}

// Channel is a Vertex AI channel. It is safe for concurrent use.
type Channel struct {
	project  string
	location string
	host     string // Google's host for the location (a secret even with an override)
	endpoint *url.URL
	tokens   oauth2.TokenSource
	email    string // the service account's, when known
}

var regionPattern = regexp.MustCompile(`^[a-z][a-z0-9-]*[a-z0-9]$`)

// HostFor is Google's host for a location.
func HostFor(region string) string {
	switch region {
	case "global":
		return "aiplatform.googleapis.com"
	case "us", "eu":
		return "aiplatform." + region + ".rep.googleapis.com"
	}
	return region + "-aiplatform.googleapis.com"
}

// credentialsFile is the part of a credentials JSON the channel reads itself.
type credentialsFile struct {
	Type        string `json:"type"`
	ProjectID   string `json:"project_id"`
	ClientEmail string `json:"client_email"`
	PrivateKey  string `json:"private_key"`
}

// FieldCredentials is the ConfigError.Field of the credentials, wherever they came from.
const FieldCredentials = "credentials"

// ConfigError is a configuration New cannot use: the field, and what is wrong with it
// in words that quote nothing read from the credentials.
type ConfigError struct {
	Field   string // region, project, endpoint or FieldCredentials
	Message string
}

func (e *ConfigError) Error() string { return e.Field + ": " + e.Message }

// New loads the credentials (without calling Google) and prepares the channel. Its
// errors name what is wrong, never a value read from the credentials.
func New(ctx context.Context, cfg Config) (*Channel, error) {
	if cfg.Region == "" {
		return nil, &ConfigError{"region", "is required (a region such as us-east5, or global, us, eu)"}
	}
	if !regionPattern.MatchString(cfg.Region) {
		return nil, &ConfigError{"region", "must be lower-case letters, digits and dashes"}
	}
	// The token source keeps this context for its calls to the token endpoint.
	ctx = context.WithValue(ctx, oauth2.HTTPClient, &http.Client{Timeout: tokenTimeout})

	var creds *google.Credentials
	var raw []byte
	switch {
	case cfg.CredentialsFile != "" || len(cfg.CredentialsJSON) > 0:
		raw = cfg.CredentialsJSON
		if cfg.CredentialsFile != "" {
			b, err := os.ReadFile(cfg.CredentialsFile)
			if err != nil {
				return nil, &ConfigError{FieldCredentials, "cannot be read: " + errors.Unwrap(err).Error()}
			}
			raw = b
		}
		var err error
		if creds, err = fromJSON(ctx, raw); err != nil {
			return nil, err
		}
	default:
		var err error
		creds, err = google.FindDefaultCredentials(ctx, Scope)
		if err != nil {
			return nil, &ConfigError{FieldCredentials, "none found: set credentials_file, GOOGLE_APPLICATION_CREDENTIALS or run `gcloud auth application-default login`"}
		}
		raw = creds.JSON // empty on the metadata server
	}
	var f credentialsFile
	_ = json.Unmarshal(raw, &f)

	project := cfg.Project
	if project == "" {
		project = creds.ProjectID
	}
	if project == "" {
		return nil, &ConfigError{"project", "is required (the credentials name none)"}
	}
	c := &Channel{
		project:  project,
		location: cfg.Region,
		host:     HostFor(cfg.Region),
		tokens:   oauth2.ReuseTokenSource(nil, creds.TokenSource),
		email:    f.ClientEmail,
	}
	base := "https://" + c.host
	if cfg.Endpoint != "" {
		base = cfg.Endpoint
	}
	u, err := url.Parse(strings.TrimSuffix(base, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &ConfigError{"endpoint", "must be an absolute http or https URL"}
	}
	c.endpoint = u
	return c, nil
}

// fromJSON accepts the two kinds of file an operator hands a gateway: a service
// account's key and a gcloud user's refresh token. Other kinds (external accounts)
// can run programs or reach other hosts, so they come only through ADC.
func fromJSON(ctx context.Context, raw []byte) (*google.Credentials, error) {
	var f credentialsFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, &ConfigError{FieldCredentials, "not a JSON object"}
	}
	switch google.CredentialsType(f.Type) {
	case google.ServiceAccount:
		// The library parses the key only when it first needs a token: parse it now so a
		// broken file fails at load.
		if f.ClientEmail == "" {
			return nil, &ConfigError{FieldCredentials, "the service account has no client_email"}
		}
		if err := checkPrivateKey(f.PrivateKey); err != nil {
			return nil, err
		}
	case google.AuthorizedUser:
	default:
		return nil, &ConfigError{FieldCredentials, fmt.Sprintf("type %q is not accepted (service_account or authorized_user)", f.Type)}
	}
	creds, err := google.CredentialsFromJSONWithType(ctx, raw, google.CredentialsType(f.Type), Scope)
	if err != nil {
		return nil, &ConfigError{FieldCredentials, fmt.Sprintf("%s credentials cannot be used", f.Type)}
	}
	return creds, nil
}

func checkPrivateKey(key string) error {
	block, _ := pem.Decode([]byte(key))
	if block == nil {
		return &ConfigError{FieldCredentials, "private_key is not PEM"}
	}
	if _, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		return nil
	}
	if _, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return nil
	}
	return &ConfigError{FieldCredentials, "private_key is not an RSA private key"}
}

// Name implements channel.Channel.
func (c *Channel) Name() string { return "vertex" }

// Endpoint implements channel.Channel.
func (c *Channel) Endpoint() *url.URL { u := *c.endpoint; return &u }

// Offers implements channel.Channel: Messages and its count_tokens.
func (c *Channel) Offers(op protocols.Operation) bool {
	return op.Family == protocols.FamilyB && (op.Kind == protocols.KindMessages || op.Kind == protocols.KindMessagesCountTokens)
}

// Secrets implements channel.Channel: the project id, the regional host and the service
// account's email.
func (c *Channel) Secrets() []string {
	s := []string{c.project, c.host}
	if c.email != "" {
		s = append(s, c.email)
	}
	return s
}

// Names implements channel.Channel: the region, masked in error messages only ("global",
// "us" and "eu" are too ordinary even there).
func (c *Channel) Names() []string {
	switch c.location {
	case "global", "us", "eu":
		return nil
	}
	return []string{c.location}
}

// URL is where op goes for model (stream picks the streaming verb).
func (c *Channel) URL(op protocols.Operation, model string, stream bool) *url.URL {
	verb := "rawPredict"
	if stream {
		verb = "streamRawPredict"
	}
	if op.Kind == protocols.KindMessagesCountTokens {
		model, verb = "count-tokens", "rawPredict"
	}
	escaped := "/v1/projects/" + url.PathEscape(c.project) +
		"/locations/" + url.PathEscape(c.location) +
		"/publishers/anthropic/models/" + url.PathEscape(model) + ":" + verb
	u := *c.endpoint
	u.RawPath = u.EscapedPath() + escaped
	u.Path, _ = url.PathUnescape(u.RawPath)
	u.RawQuery = ""
	return &u
}

// NewRequest implements channel.Channel.
func (c *Channel) NewRequest(ctx context.Context, op protocols.Operation, body []byte, stream bool, header http.Header) (*http.Request, error) {
	if !c.Offers(op) {
		return nil, fmt.Errorf("vertex does not offer %s", op.Kind)
	}
	model := gjson.GetBytes(body, "model")
	if model.Type != gjson.String || model.Str == "" {
		return nil, errors.New("vertex: the request names no model")
	}
	var err error
	if op.Kind == protocols.KindMessages {
		// The model is in the URL; Vertex refuses it in the body. count_tokens keeps it.
		if body, err = sjson.DeleteBytes(body, "model"); err != nil {
			return nil, fmt.Errorf("vertex: body: %w", err)
		}
	}
	if body, err = sjson.SetBytes(body, "anthropic_version", AnthropicVersion); err != nil {
		return nil, fmt.Errorf("vertex: body: %w", err)
	}
	tok, err := c.token(ctx)
	if err != nil {
		return nil, err
	}
	u := c.URL(op, model.Str, stream && op.Kind == protocols.KindMessages)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, errors.New("vertex: the request URL cannot be built")
	}
	h := header.Clone()
	if h == nil {
		h = make(http.Header)
	}
	// The version travels in the body; anthropic-beta stays a header.
	h.Del("Anthropic-Version")
	h.Del("X-Api-Key")
	h.Set("Content-Type", "application/json")
	h.Set("Authorization", "Bearer "+tok.AccessToken)
	req.Header = h
	return req, nil
}

// token gets an access token (cached until shortly before it expires), giving up when
// ctx ends: the library's call takes no context.
func (c *Channel) token(ctx context.Context) (*oauth2.Token, error) {
	type result struct {
		tok *oauth2.Token
		err error
	}
	done := make(chan result, 1)
	go func() {
		t, err := c.tokens.Token()
		done <- result{t, err}
	}()
	select {
	case r := <-done:
		if r.err != nil || r.tok == nil || r.tok.AccessToken == "" {
			return nil, credentialError(r.err)
		}
		return r.tok, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// credentialError says what failed without the library's text, which may quote the
// token endpoint's answer or the credentials.
func credentialError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.Response != nil {
		return fmt.Errorf("vertex: the token endpoint answered HTTP %d: %w", re.Response.StatusCode, channel.ErrCredential)
	}
	return fmt.Errorf("vertex: no access token: %w", channel.ErrCredential)
}

// Response implements channel.Channel: a success is Anthropic's already; an error in
// Google's shape becomes Anthropic's envelope with the same status.
func (c *Channel) Response(op protocols.Operation, resp *http.Response) {
	if resp.StatusCode < 400 {
		if resp.StatusCode < 300 && op.Kind == protocols.KindMessages {
			channel.UntagAnswer(resp, "vrtx")
		}
		return
	}
	// A body cut at the bound is no longer valid JSON, so it gets the generic message.
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody+1))
	resp.Body.Close()
	if err != nil {
		b = nil
	}
	out := ErrorBody(resp.StatusCode, b)
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Type", "application/json")
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	resp.Header.Del("Content-Encoding")
}

// projectPath matches the resource names Google's messages quote (projects/<id or
// number>/locations/…/models/…); the project number is not known to the channel.
var projectPath = regexp.MustCompile(`projects/[^\s"'\x60]+`)

// requestIDTag starts Vertex's request ids.
const requestIDTag = "req_vrtx_"

// ErrorBody is the Anthropic error envelope for an error answer of the given status
// and body: an Anthropic envelope stays as it is (its request id untagged); Google's {"error":{…}}, alone or in
// an array, gives its message; anything else a message of the status alone.
func ErrorBody(status int, body []byte) []byte {
	if gjson.ValidBytes(body) {
		doc := gjson.ParseBytes(body)
		if doc.Get("type").Str == "error" && doc.Get("error.type").Type == gjson.String {
			// Vertex's request id (req_vrtx_…) would tell the client which channel
			// answered: it loses its tag, as the message id of an answer does.
			if id := doc.Get("request_id").Str; strings.HasPrefix(id, requestIDTag) {
				if untagged, err := sjson.SetBytes(body, "request_id", "req_"+strings.TrimPrefix(id, requestIDTag)); err == nil {
					return untagged
				}
			}
			return body
		}
		if doc.IsArray() {
			doc = doc.Get("0")
		}
		if msg := doc.Get("error.message"); msg.Type == gjson.String {
			return envelope(status, projectPath.ReplaceAllString(msg.Str, "projects/[redacted]"))
		}
	}
	text := http.StatusText(status)
	if text == "" {
		text = "error"
	}
	return envelope(status, fmt.Sprintf("upstream answered HTTP %d (%s)", status, text))
}

// envelope is Anthropic's error envelope for status, its type the one the gateway gives
// that status everywhere.
func envelope(status int, message string) []byte {
	return (&protocols.APIError{Family: protocols.FamilyB, Status: status, Message: message}).Body("")
}

var _ channel.Channel = (*Channel)(nil)
