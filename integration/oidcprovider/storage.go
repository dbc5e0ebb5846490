package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// groupsScope may be asked for by name; the groups claim is issued with or without it,
// since the relying party under test maps groups to roles whatever it asks for.
const groupsScope = "groups"

// Bounds on what the provider keeps in memory: a test makes a few sign-ins, so these
// only stop a runaway client from growing the process without end.
const (
	maxPendingRequests = 10_000
	maxLiveTokens      = 10_000
	authRequestTTL     = 10 * time.Minute
	refreshTokenTTL    = time.Hour
)

var (
	errBadCredentials = errors.New("unknown user or wrong password")
	errNoSuchRequest  = errors.New("no such sign-in in progress")
)

// memoryStorage is the provider's whole state: the configured users and clients, one
// signing key made at start, and the sign-ins and tokens under way. It is what zitadel's
// op package asks (op.Storage); the protocol itself, PKCE checks included, is op's.
type memoryStorage struct {
	users     map[string]*userConfig // by username
	subjects  map[string]*userConfig // by subject
	clients   map[string]*client
	key       *rsa.PrivateKey
	keyID     string
	accessTTL time.Duration

	mu            sync.Mutex
	authRequests  map[string]*authRequest // by id
	codes         map[string]string       // authorization code -> auth request id
	accessTokens  map[string]*grant       // by token id
	refreshTokens map[string]*grant       // by the refresh token itself
}

func newMemoryStorage(cfg *providerConfig, idTokenTTL, accessTTL time.Duration) (*memoryStorage, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	s := &memoryStorage{
		users:         map[string]*userConfig{},
		subjects:      map[string]*userConfig{},
		clients:       map[string]*client{},
		key:           key,
		keyID:         rand.Text(),
		accessTTL:     accessTTL,
		authRequests:  map[string]*authRequest{},
		codes:         map[string]string{},
		accessTokens:  map[string]*grant{},
		refreshTokens: map[string]*grant{},
	}
	for i := range cfg.Users {
		u := &cfg.Users[i]
		s.users[u.Username], s.subjects[u.Subject] = u, u
	}
	for _, c := range cfg.Clients {
		s.clients[c.ClientID] = &client{cfg: c, idTokenTTL: idTokenTTL}
	}
	return s, nil
}

// authRequest is one authorization request from its arrival at /authorize until its
// code is exchanged; signIn completes it.
type authRequest struct {
	id           string
	created      time.Time
	clientID     string
	redirectURI  string
	state        string
	nonce        string
	scopes       []string
	responseType oidc.ResponseType
	responseMode oidc.ResponseMode
	challenge    *oidc.CodeChallenge

	subject  string
	authTime time.Time
	done     bool
}

func (a *authRequest) GetID() string                         { return a.id }
func (a *authRequest) GetACR() string                        { return "" }
func (a *authRequest) GetAudience() []string                 { return []string{a.clientID} }
func (a *authRequest) GetAuthTime() time.Time                { return a.authTime }
func (a *authRequest) GetClientID() string                   { return a.clientID }
func (a *authRequest) GetCodeChallenge() *oidc.CodeChallenge { return a.challenge }
func (a *authRequest) GetNonce() string                      { return a.nonce }
func (a *authRequest) GetRedirectURI() string                { return a.redirectURI }
func (a *authRequest) GetResponseType() oidc.ResponseType    { return a.responseType }
func (a *authRequest) GetResponseMode() oidc.ResponseMode    { return a.responseMode }
func (a *authRequest) GetScopes() []string                   { return a.scopes }
func (a *authRequest) GetState() string                      { return a.state }
func (a *authRequest) GetSubject() string                    { return a.subject }
func (a *authRequest) Done() bool                            { return a.done }

func (a *authRequest) GetAMR() []string {
	if a.done {
		return []string{"pwd"}
	}
	return nil
}

// snapshot is what op gets: a copy, so a sign-in completing on another request's
// goroutine never changes fields op is reading.
func (a *authRequest) snapshot() *authRequest {
	c := *a
	c.scopes = slices.Clone(a.scopes)
	return &c
}

// grant is what an access or refresh token stands for. As a refresh token request it
// is handed to op by value, for the same reason as authRequest.snapshot.
type grant struct {
	id       string
	subject  string
	clientID string
	scopes   []string
	authTime time.Time
	amr      []string
	expires  time.Time
}

func (g *grant) GetAMR() []string                 { return g.amr }
func (g *grant) GetAudience() []string            { return []string{g.clientID} }
func (g *grant) GetAuthTime() time.Time           { return g.authTime }
func (g *grant) GetClientID() string              { return g.clientID }
func (g *grant) GetScopes() []string              { return g.scopes }
func (g *grant) GetSubject() string               { return g.subject }
func (g *grant) SetCurrentScopes(scopes []string) { g.scopes = scopes }

// client is a configured relying party as op sees it: a web application using the
// authorization code flow, its ID tokens carrying the profile and email claims.
type client struct {
	cfg        clientConfig
	idTokenTTL time.Duration
}

func (c *client) GetID() string                    { return c.cfg.ClientID }
func (c *client) RedirectURIs() []string           { return c.cfg.RedirectURIs }
func (c *client) PostLogoutRedirectURIs() []string { return c.cfg.PostLogoutRedirectURIs }
func (c *client) ApplicationType() op.ApplicationType {
	return op.ApplicationTypeWeb
}
func (c *client) AuthMethod() oidc.AuthMethod { return oidc.AuthMethod(c.cfg.AuthMethod) }
func (c *client) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c *client) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeBearer }
func (c *client) IDTokenLifetime() time.Duration      { return c.idTokenTTL }
func (c *client) DevMode() bool                       { return false }
func (c *client) ClockSkew() time.Duration            { return 0 }
func (c *client) IsScopeAllowed(scope string) bool    { return scope == groupsScope }

// IDTokenUserinfoClaimsAssertion puts the claims of the profile and email scopes in the
// ID token itself, not only behind the userinfo endpoint: the relying party reads the
// user's email and name from the ID token.
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return true }

func (c *client) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeRefreshToken}
}

func (c *client) LoginURL(authRequestID string) string {
	return loginPath + "?" + url.Values{authRequestIDField: {authRequestID}}.Encode()
}

func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(scopes []string) []string { return scopes }
}

func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(scopes []string) []string { return scopes }
}

// CreateAuthRequest records a request op has validated against the client. This
// provider also requires PKCE with S256 of every client, confidential ones included,
// as the gateway's sign-in always sends it; op checks the verifier at the token endpoint.
func (s *memoryStorage) CreateAuthRequest(_ context.Context, req *oidc.AuthRequest, _ string) (op.AuthRequest, error) {
	if req.CodeChallenge == "" || req.CodeChallengeMethod != oidc.CodeChallengeMethodS256 {
		return nil, oidc.ErrInvalidRequest().WithDescription("this provider requires PKCE: code_challenge with code_challenge_method=S256")
	}
	if slices.Contains(req.Prompt, oidc.PromptNone) {
		// No browser session is kept: every sign-in asks for the password.
		return nil, oidc.ErrLoginRequired()
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, a := range s.authRequests {
		if now.Sub(a.created) > authRequestTTL {
			s.dropAuthRequestLocked(id)
		}
	}
	if len(s.authRequests) >= maxPendingRequests {
		return nil, oidc.ErrServerError().WithDescription("too many sign-ins in progress")
	}
	a := &authRequest{
		id:           rand.Text(),
		created:      now,
		clientID:     req.ClientID,
		redirectURI:  req.RedirectURI,
		state:        req.State,
		nonce:        req.Nonce,
		scopes:       slices.Clone(req.Scopes),
		responseType: req.ResponseType,
		responseMode: req.ResponseMode,
		challenge:    &oidc.CodeChallenge{Challenge: req.CodeChallenge, Method: req.CodeChallengeMethod},
	}
	s.authRequests[a.id] = a
	return a.snapshot(), nil
}

func (s *memoryStorage) liveAuthRequestLocked(id string) (*authRequest, error) {
	a, ok := s.authRequests[id]
	if !ok || time.Since(a.created) > authRequestTTL {
		return nil, errNoSuchRequest
	}
	return a, nil
}

func (s *memoryStorage) AuthRequestByID(_ context.Context, id string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, err := s.liveAuthRequestLocked(id)
	if err != nil {
		return nil, err
	}
	return a.snapshot(), nil
}

func (s *memoryStorage) AuthRequestByCode(_ context.Context, code string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.codes[code]
	if !ok {
		return nil, errors.New("unknown or used authorization code")
	}
	a, err := s.liveAuthRequestLocked(id)
	if err != nil || !a.done {
		return nil, errors.New("unknown or used authorization code")
	}
	return a.snapshot(), nil
}

func (s *memoryStorage) SaveAuthCode(_ context.Context, id, code string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.liveAuthRequestLocked(id); err != nil {
		return err
	}
	s.codes[code] = id
	return nil
}

// DeleteAuthRequest is called once the code has been exchanged: the code is then spent.
func (s *memoryStorage) DeleteAuthRequest(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropAuthRequestLocked(id)
	return nil
}

func (s *memoryStorage) dropAuthRequestLocked(id string) {
	delete(s.authRequests, id)
	for code, of := range s.codes {
		if of == id {
			delete(s.codes, code)
		}
	}
}

// pendingSignIn reports whether id is a sign-in waiting for the user's password.
func (s *memoryStorage) pendingSignIn(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, err := s.liveAuthRequestLocked(id)
	return err == nil && !a.done
}

// signIn checks the user's password and, when it is right, completes the auth request
// for that user; op then issues the code on its callback.
func (s *memoryStorage) signIn(id, username, password string) error {
	u, known := s.users[username]
	// Compare against something even for an unknown user, so both cost the same.
	want := "\x00unknown-user"
	if known {
		want = u.Password
	}
	match := subtle.ConstantTimeCompare([]byte(password), []byte(want)) == 1
	s.mu.Lock()
	defer s.mu.Unlock()
	a, err := s.liveAuthRequestLocked(id)
	if err != nil || a.done {
		return errNoSuchRequest
	}
	if !known || !match {
		return errBadCredentials
	}
	a.subject, a.authTime, a.done = u.Subject, time.Now(), true
	return nil
}

func (s *memoryStorage) newGrantLocked(req op.TokenRequest, ttl time.Duration) *grant {
	g := &grant{id: rand.Text(), subject: req.GetSubject(), scopes: slices.Clone(req.GetScopes()), expires: time.Now().Add(ttl)}
	switch r := req.(type) {
	case op.AuthRequest:
		g.clientID, g.authTime, g.amr = r.GetClientID(), r.GetAuthTime(), r.GetAMR()
	case op.RefreshTokenRequest:
		g.clientID, g.authTime, g.amr = r.GetClientID(), r.GetAuthTime(), r.GetAMR()
	default:
		if aud := req.GetAudience(); len(aud) > 0 {
			g.clientID = aud[0]
		}
	}
	return g
}

func pruneExpired(m map[string]*grant, now time.Time) {
	for k, g := range m {
		if now.After(g.expires) {
			delete(m, k)
		}
	}
}

func (s *memoryStorage) roomForTokensLocked() error {
	now := time.Now()
	pruneExpired(s.accessTokens, now)
	pruneExpired(s.refreshTokens, now)
	if len(s.accessTokens)+len(s.refreshTokens) >= maxLiveTokens {
		return oidc.ErrServerError().WithDescription("too many live tokens")
	}
	return nil
}

func (s *memoryStorage) CreateAccessToken(_ context.Context, req op.TokenRequest) (string, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.roomForTokensLocked(); err != nil {
		return "", time.Time{}, err
	}
	g := s.newGrantLocked(req, s.accessTTL)
	s.accessTokens[g.id] = g
	return g.id, g.expires, nil
}

// CreateAccessAndRefreshTokens issues a refresh token with the access token (for an
// offline_access sign-in) and rotates it on each refresh: the presented one is spent.
func (s *memoryStorage) CreateAccessAndRefreshTokens(_ context.Context, req op.TokenRequest, current string) (string, string, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if current != "" {
		if _, ok := s.refreshTokens[current]; !ok {
			return "", "", time.Time{}, op.ErrInvalidRefreshToken
		}
		delete(s.refreshTokens, current)
	}
	if err := s.roomForTokensLocked(); err != nil {
		return "", "", time.Time{}, err
	}
	access := s.newGrantLocked(req, s.accessTTL)
	refresh := s.newGrantLocked(req, refreshTokenTTL)
	refresh.id = rand.Text() + rand.Text()
	s.accessTokens[access.id] = access
	s.refreshTokens[refresh.id] = refresh
	return access.id, refresh.id, access.expires, nil
}

func (s *memoryStorage) TokenRequestByRefreshToken(_ context.Context, token string) (op.RefreshTokenRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.refreshTokens[token]
	if !ok || time.Now().After(g.expires) {
		return nil, op.ErrInvalidRefreshToken
	}
	c := *g
	c.scopes, c.amr = slices.Clone(g.scopes), slices.Clone(g.amr)
	return &c, nil
}

// TerminateSession ends what end_session names: every token of that user at that client.
func (s *memoryStorage) TerminateSession(_ context.Context, subject, clientID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range []map[string]*grant{s.accessTokens, s.refreshTokens} {
		for k, g := range m {
			if g.subject == subject && g.clientID == clientID {
				delete(m, k)
			}
		}
	}
	return nil
}

func (s *memoryStorage) RevokeToken(_ context.Context, tokenOrID, _ string, clientID string) *oidc.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range []map[string]*grant{s.accessTokens, s.refreshTokens} {
		if g, ok := m[tokenOrID]; ok {
			if g.clientID != clientID {
				return oidc.ErrInvalidClient().WithDescription("token was issued to another client")
			}
			delete(m, tokenOrID)
		}
	}
	return nil
}

func (s *memoryStorage) GetRefreshTokenInfo(_ context.Context, clientID, token string) (string, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.refreshTokens[token]
	if !ok || g.clientID != clientID {
		return "", "", op.ErrInvalidRefreshToken
	}
	return g.subject, token, nil
}

type signingKey struct {
	id  string
	key *rsa.PrivateKey
}

func (k signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k signingKey) Key() any                                    { return k.key }
func (k signingKey) ID() string                                  { return k.id }

type publicKey struct{ signingKey }

func (k publicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k publicKey) Use() string                        { return "sig" }
func (k publicKey) Key() any                           { return &k.key.PublicKey }

func (s *memoryStorage) SigningKey(context.Context) (op.SigningKey, error) {
	return signingKey{id: s.keyID, key: s.key}, nil
}

func (s *memoryStorage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *memoryStorage) KeySet(context.Context) ([]op.Key, error) {
	return []op.Key{publicKey{signingKey{id: s.keyID, key: s.key}}}, nil
}

func (s *memoryStorage) GetClientByClientID(_ context.Context, clientID string) (op.Client, error) {
	c, ok := s.clients[clientID]
	if !ok {
		return nil, fmt.Errorf("unknown client %q", clientID)
	}
	return c, nil
}

func (s *memoryStorage) AuthorizeClientIDSecret(_ context.Context, clientID, secret string) error {
	c, ok := s.clients[clientID]
	if !ok || c.cfg.ClientSecret == "" ||
		subtle.ConstantTimeCompare([]byte(secret), []byte(c.cfg.ClientSecret)) != 1 {
		return errors.New("unknown client or wrong secret")
	}
	return nil
}

// SetUserinfoFromScopes is the deprecated hook; SetUserinfoFromRequest does the work.
func (s *memoryStorage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil
}

// SetUserinfoFromRequest fills the ID token's user claims.
func (s *memoryStorage) SetUserinfoFromRequest(_ context.Context, info *oidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	return s.fillUserinfo(info, req.GetSubject(), scopes)
}

// SetUserinfoFromToken answers the userinfo endpoint for a live access token.
func (s *memoryStorage) SetUserinfoFromToken(_ context.Context, info *oidc.UserInfo, tokenID, subject, _ string) error {
	s.mu.Lock()
	g, ok := s.accessTokens[tokenID]
	var scopes []string
	if ok {
		scopes = slices.Clone(g.scopes)
	}
	s.mu.Unlock()
	if !ok || time.Now().After(g.expires) || g.subject != subject {
		return errors.New("access token expired or revoked")
	}
	return s.fillUserinfo(info, subject, scopes)
}

// fillUserinfo sets the standard claims the scopes ask for and, always, groups.
func (s *memoryStorage) fillUserinfo(info *oidc.UserInfo, subject string, scopes []string) error {
	u, ok := s.subjects[subject]
	if !ok {
		return fmt.Errorf("unknown subject %q", subject)
	}
	info.Subject = u.Subject
	if slices.Contains(scopes, oidc.ScopeProfile) {
		info.Name = u.Name
		info.PreferredUsername = u.Username
	}
	if slices.Contains(scopes, oidc.ScopeEmail) {
		info.Email = u.Email
		info.EmailVerified = oidc.Bool(u.EmailVerified)
	}
	groups := u.Groups
	if groups == nil {
		groups = []string{} // an empty list, not a missing claim, for a user in no group
	}
	info.AppendClaims("groups", groups)
	return nil
}

func (s *memoryStorage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return errors.New("token introspection is not offered by this provider")
}

func (s *memoryStorage) GetPrivateClaimsFromScopes(context.Context, string, string, []string) (map[string]any, error) {
	return nil, nil
}

func (s *memoryStorage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errors.New("JWT client authentication is not offered by this provider")
}

func (s *memoryStorage) ValidateJWTProfileScopes(context.Context, string, []string) ([]string, error) {
	return nil, errors.New("the JWT profile grant is not offered by this provider")
}

func (s *memoryStorage) Health(context.Context) error { return nil }
