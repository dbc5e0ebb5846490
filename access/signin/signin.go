// Package signin signs people in to the console through the company's OpenID Connect
// provider (authorization code with PKCE, the ID token checked by go-oidc), keeps their
// sessions in the store, and answers the one question every console call asks first:
// who is calling (a session cookie, an API token, or a break-glass session)?
//
// It knows nothing of Caddy: the console handler mounts Login, Callback, Logout and
// BreakGlass at auth/login, auth/callback, auth/logout and auth/break-glass (its prefix
// stripped, so every redirect it writes back into the console is relative), and calls
// Authenticate in front of every API route.
//
// Where a sign-in in progress is kept. The state, nonce, PKCE verifier and return path
// of a sign-in travel in a short-lived cookie (ten minutes) bound to the browser that
// started it, sealed with AES-GCM under a key derived from the client secret. Any
// gateway configured with the same client can therefore finish a sign-in another one
// started: gateways behind a load balancer need no sticky sessions, a restart between
// the redirect and the callback loses nothing, and a flood of auth/login costs no
// memory. A callback is accepted once: the gateway that takes it remembers its state
// (bounded, until the state would have expired anyway) and refuses it a second time,
// even with the same cookie; a replay sent to another gateway reaches the provider,
// which refuses an authorization code used twice.
package signin

import (
	"context"
	"crypto/cipher"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"go.uber.org/zap"
	"golang.org/x/oauth2"

	"github.com/switchyard-gw/switchyard/access"
)

// Defaults of Config.
const (
	DefaultGroupsClaim     = "groups"
	DefaultSessionIdle     = time.Hour
	DefaultSessionLifetime = 12 * time.Hour
	DefaultRecheck         = 15 * time.Minute
	// RecheckOff in Config.Recheck turns the provider recheck off (zero is the default,
	// 15 minutes).
	RecheckOff time.Duration = -1
)

// DefaultScopes are asked for when Config.Scopes is empty.
var DefaultScopes = []string{oidc.ScopeOpenID, "email", "profile"}

// Bounds on what is sent to the provider and what it may answer.
const (
	// providerTimeout bounds each call to the provider: discovery, the code exchange,
	// the key set, a refresh.
	providerTimeout = 10 * time.Second
	// maxProviderBody bounds a provider's answer; discovery documents, key sets and
	// token answers are a few kilobytes.
	maxProviderBody = 1 << 20
	// rediscoverGap is how often a recheck may try discovery again while the provider
	// is away; a sign-in always tries.
	rediscoverGap = time.Minute
)

// Config is the sign-in's configuration: the provider, the client registered there,
// the role mapping and the sessions' lifetimes.
type Config struct {
	// Issuer is the provider's issuer URL, exactly as its discovery document and its ID
	// tokens name it (https; http only on a loopback address, for development).
	Issuer string
	// ClientID and ClientSecret are the client registered at the provider. The secret
	// also keys the sealing of sign-in state cookies and stored refresh tokens.
	ClientID     string
	ClientSecret string
	// RedirectURL is the callback the provider sends the browser back to, registered
	// there exactly (…/auth/callback under the console). It is never taken from the
	// request's Host header.
	RedirectURL string
	// Scopes asked for; default openid email profile. Add the scope that carries the
	// groups when the provider needs one, and offline_access for a refresh token.
	Scopes []string
	// GroupsClaim is the ID token claim that lists the person's groups; default groups.
	GroupsClaim string
	// SessionIdle ends a session unused for this long (default 1h); SessionLifetime
	// ends it this long after sign-in whatever happens (default 12h).
	SessionIdle     time.Duration
	SessionLifetime time.Duration
	// Recheck is how often a session's person is vouched for again by the provider with
	// the refresh token (default 15m; RecheckOff turns it off).
	Recheck time.Duration
	// Mapping gives roles to the provider's groups; someone in no mapped group may not
	// sign in.
	Mapping access.Mapping
	// BreakGlass lets BreakGlass make owner sessions for the operator's password door.
	BreakGlass bool

	// ClientAddr is the address a request came from, for sessions and the audit trail
	// (the console passes Caddy's client IP, which knows trusted proxies); default the
	// host of RemoteAddr.
	ClientAddr func(*http.Request) string
	// Transport carries calls to the provider (default: Go's default transport); tests
	// and providers behind a private CA set it.
	Transport http.RoundTripper
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// hasProvider reports whether c names an OpenID provider. Without one the service
// makes no sign-in of its own: it authenticates API tokens and break-glass sessions.
func (c Config) hasProvider() bool { return c.Issuer != "" }

// withDefaults returns c with the documented defaults filled in.
func (c Config) withDefaults() Config {
	if len(c.Scopes) == 0 {
		c.Scopes = slices.Clone(DefaultScopes)
	}
	if c.GroupsClaim == "" {
		c.GroupsClaim = DefaultGroupsClaim
	}
	if c.SessionIdle == 0 {
		c.SessionIdle = DefaultSessionIdle
	}
	if c.SessionLifetime == 0 {
		c.SessionLifetime = DefaultSessionLifetime
	}
	if c.Recheck == 0 {
		c.Recheck = DefaultRecheck
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.ClientAddr == nil {
		c.ClientAddr = remoteHost
	}
	return c
}

// Validate says what is wrong with the configuration, after the defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	if !c.hasProvider() {
		// No provider: API tokens and break-glass sessions only.
		if c.ClientID != "" || c.ClientSecret != "" || c.RedirectURL != "" {
			return errors.New("sign_in: issuer is required with client_id, client_secret and redirect_url")
		}
		return nil
	}
	if err := checkURL("issuer", c.Issuer); err != nil {
		return err
	}
	if c.ClientID == "" {
		return errors.New("sign_in: client_id is required (the client registered at the provider)")
	}
	if c.ClientSecret == "" {
		return errors.New("sign_in: client_secret is required: Switchyard is a confidential client and keys its sealed cookies and refresh tokens with it")
	}
	if c.RedirectURL == "" {
		return errors.New("sign_in: redirect_url is required, exactly as registered at the provider (https://<gateway>/console/auth/callback)")
	}
	if err := checkURL("redirect_url", c.RedirectURL); err != nil {
		return err
	}
	if u, _ := url.Parse(c.RedirectURL); !strings.HasSuffix(u.Path, "/auth/callback") {
		return fmt.Errorf("sign_in: redirect_url must be the console's auth/callback (for example https://gw.example.com/console/auth/callback), not %q", u.Path)
	}
	if !slices.Contains(c.Scopes, oidc.ScopeOpenID) {
		return errors.New("sign_in: scopes must include openid")
	}
	if len(c.GroupsClaim) > 200 {
		return errors.New("sign_in: groups_claim is too long")
	}
	if c.SessionIdle < 0 || c.SessionLifetime < 0 {
		return errors.New("sign_in: session_idle and session_lifetime must be positive")
	}
	if c.SessionIdle > c.SessionLifetime {
		return fmt.Errorf("sign_in: session_idle (%s) is longer than session_lifetime (%s) and would never apply", c.SessionIdle, c.SessionLifetime)
	}
	if c.Recheck < 0 && c.Recheck != RecheckOff {
		return errors.New("sign_in: recheck must be positive, or off")
	}
	if len(c.Mapping) == 0 {
		return errors.New("sign_in: no role mapping, so no one could sign in; add `role <role> group <group>` lines")
	}
	for _, r := range c.Mapping {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("sign_in: %w", err)
		}
	}
	return nil
}

// checkURL refuses anything but an absolute https URL (http only on a loopback host,
// where there is no network to listen on) without a fragment.
func checkURL(name, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("sign_in: %s must be an absolute https URL", name)
	}
	if u.Scheme == "http" && !loopback(u.Hostname()) {
		return fmt.Errorf("sign_in: %s must be https (http only on localhost)", name)
	}
	if u.Fragment != "" || u.RawQuery != "" || u.User != nil {
		return fmt.Errorf("sign_in: %s must have no query, fragment or user", name)
	}
	return nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func remoteHost(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// ErrNoPrincipal means the call carries no valid credential: no cookie or token, or
// one that is unknown, ended or expired. The caller answers 401 (sign in).
var ErrNoPrincipal = errors.New("not signed in")

// ErrRefused means the call's credential is known but its holder is refused: a
// disabled person, a break-glass session after the door was turned off. The caller
// answers 403.
var ErrRefused = errors.New("refused")

// Service signs people in and authenticates console calls.
type Service struct {
	cfg    Config
	store  access.Store
	log    *zap.Logger
	client *http.Client

	// stateSeal seals sign-in state cookies, refreshSeal stored refresh tokens; both
	// keyed from the client secret.
	stateSeal   cipher.AEAD
	refreshSeal cipher.AEAD
	used        *usedStates

	// discoverMu serializes discovery; prov is set once it succeeded.
	discoverMu   sync.Mutex
	prov         atomic.Pointer[provider]
	lastDiscover time.Time // guarded by discoverMu

	// rechecking holds the sessions whose recheck is in flight, so that one session's
	// concurrent calls do not each spend its refresh token.
	recheckMu  sync.Mutex
	rechecking map[string]bool
}

// provider is what discovery yields.
type provider struct {
	oauth    *oauth2.Config
	verifier *oidc.IDTokenVerifier
}

// New makes the sign-in service. It does not reach the provider: discovery happens at
// the first sign-in (and is tried again at the next one while it fails), so a gateway
// starts while its provider is away.
func New(ctx context.Context, cfg Config, store access.Store, log *zap.Logger) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, errors.New("sign_in: a store is required for users and sessions")
	}
	if log == nil {
		log = zap.NewNop()
	}
	cfg = cfg.withDefaults()
	cfg.Scopes = slices.Clone(cfg.Scopes)
	sealKey := cfg.ClientSecret
	if !cfg.hasProvider() {
		// Nothing is sealed without a provider (no state cookie, no refresh token);
		// the sealers get a key no one knows.
		sealKey = randomString()
	}
	stateSeal, err := newSealer(sealKey, "switchyard sign-in state v1")
	if err != nil {
		return nil, err
	}
	refreshSeal, err := newSealer(sealKey, "switchyard refresh token v1")
	if err != nil {
		return nil, err
	}
	base := cfg.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	return &Service{
		cfg:   cfg,
		store: store,
		log:   log,
		client: &http.Client{
			Timeout:   providerTimeout,
			Transport: limitedTransport{base: base, max: maxProviderBody},
			// A provider's endpoints answer directly; go-oidc and oauth2 do not expect
			// redirects, and following one could carry the client secret elsewhere.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		stateSeal:   stateSeal,
		refreshSeal: refreshSeal,
		used:        newUsedStates(maxPendingStates),
		rechecking:  map[string]bool{},
	}, nil
}

// providerCtx carries the bounded client to go-oidc and oauth2 (both read it from the
// context).
func (s *Service) providerCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, providerTimeout)
	return oidc.ClientContext(ctx, s.client), cancel
}

// discover returns the provider, discovering it when it is not yet known. A sign-in
// always tries; a recheck (blocking=false) tries at most once a rediscoverGap and never
// waits for a discovery already in flight.
func (s *Service) discover(ctx context.Context, blocking bool) (*provider, error) {
	if p := s.prov.Load(); p != nil {
		return p, nil
	}
	if blocking {
		s.discoverMu.Lock()
	} else if !s.discoverMu.TryLock() {
		return nil, errors.New("discovery in progress")
	}
	defer s.discoverMu.Unlock()
	if p := s.prov.Load(); p != nil {
		return p, nil
	}
	now := time.Now()
	if !blocking && now.Sub(s.lastDiscover) < rediscoverGap {
		return nil, errors.New("provider away")
	}
	s.lastDiscover = now
	pctx, cancel := s.providerCtx(ctx)
	defer cancel()
	op, err := oidc.NewProvider(pctx, s.cfg.Issuer)
	if err != nil {
		s.log.Warn("sign-in: the provider's discovery failed; trying again at the next sign-in",
			zap.String("reason", describeProviderError(err)))
		return nil, err
	}
	endpoint := op.Endpoint()
	endpoint.AuthStyle = authStyle(op)
	p := &provider{
		oauth: &oauth2.Config{
			ClientID:     s.cfg.ClientID,
			ClientSecret: s.cfg.ClientSecret,
			Endpoint:     endpoint,
			RedirectURL:  s.cfg.RedirectURL,
			Scopes:       s.cfg.Scopes,
		},
		verifier: op.Verifier(&oidc.Config{ClientID: s.cfg.ClientID, Now: s.cfg.Now}),
	}
	s.prov.Store(p)
	s.log.Info("sign-in: provider discovered")
	return p, nil
}

// authStyle is how the client secret goes to the token endpoint, as the provider's
// discovery says (its default is HTTP basic). Left to detect, oauth2 would send a
// refused request again the other way: the secret twice, and a refresh token spent
// twice.
func authStyle(op *oidc.Provider) oauth2.AuthStyle {
	var d struct {
		Methods []string `json:"token_endpoint_auth_methods_supported"`
	}
	_ = op.Claims(&d)
	switch {
	case len(d.Methods) == 0 || slices.Contains(d.Methods, "client_secret_basic"):
		return oauth2.AuthStyleInHeader
	case slices.Contains(d.Methods, "client_secret_post"):
		return oauth2.AuthStyleInParams
	}
	return oauth2.AuthStyleAutoDetect
}

// describeProviderError names what went wrong with a provider call in our words, for a
// log line: never its body (which may echo what was sent), never its address.
func describeProviderError(err error) string {
	var mismatch *oidc.IssuerMismatchError
	var re *oauth2.RetrieveError
	var expired *oidc.TokenExpiredError
	var netErr net.Error
	switch {
	case errors.As(err, &mismatch):
		return "the discovery document names another issuer than the one configured"
	case errors.As(err, &re):
		code := re.ErrorCode
		if !plainCode(code) {
			code = "unknown"
		}
		status := 0
		if re.Response != nil {
			status = re.Response.StatusCode
		}
		return fmt.Sprintf("the provider refused (status %d, error %s)", status, code)
	case errors.As(err, &expired):
		return "the ID token has expired"
	case errors.Is(err, errTooLarge), strings.Contains(err.Error(), errTooLarge.Error()): // go-oidc does not wrap
		return "the provider's answer was too large"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "the provider did not answer in time"
	case errors.As(err, &netErr):
		return "the provider could not be reached"
	}
	return "the provider's answer was not usable"
}

// plainCode reports whether an OAuth error code is short lower-case words, safe to log
// and show.
func plainCode(code string) bool {
	if code == "" || len(code) > 40 {
		return false
	}
	for _, c := range code {
		if (c < 'a' || c > 'z') && c != '_' {
			return false
		}
	}
	return true
}

// errTooLarge is a provider's answer past maxProviderBody.
var errTooLarge = errors.New("provider answer too large")

// limitedTransport bounds every answer from the provider: go-oidc reads discovery and
// key sets whole.
type limitedTransport struct {
	base http.RoundTripper
	max  int64
}

func (t limitedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &limitedBody{rc: resp.Body, left: t.max}
	return resp, nil
}

type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errTooLarge
	}
	// Read one byte past the bound so an answer of exactly the bound still ends with EOF.
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, errTooLarge
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// Settings is the sign-in configuration as the console shows it (never the secret).
type Settings struct {
	Issuer          string         `json:"issuer"`
	ClientID        string         `json:"client_id"`
	RedirectURL     string         `json:"redirect_url"`
	Scopes          []string       `json:"scopes"`
	GroupsClaim     string         `json:"groups_claim"`
	SessionIdle     string         `json:"session_idle"`
	SessionLifetime string         `json:"session_lifetime"`
	Recheck         string         `json:"recheck"`
	Mapping         access.Mapping `json:"mapping"`
	BreakGlass      bool           `json:"break_glass"`
}

// Settings returns the configuration for GET /api/settings.
func (s *Service) Settings() Settings {
	recheck := "off"
	if s.cfg.Recheck > 0 {
		recheck = s.cfg.Recheck.String()
	}
	return Settings{
		Issuer:          s.cfg.Issuer,
		ClientID:        s.cfg.ClientID,
		RedirectURL:     s.cfg.RedirectURL,
		Scopes:          slices.Clone(s.cfg.Scopes),
		GroupsClaim:     s.cfg.GroupsClaim,
		SessionIdle:     s.cfg.SessionIdle.String(),
		SessionLifetime: s.cfg.SessionLifetime.String(),
		Recheck:         recheck,
		Mapping:         slices.Clone(s.cfg.Mapping),
		BreakGlass:      s.cfg.BreakGlass,
	}
}
