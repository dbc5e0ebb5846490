package signin

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/auth"
)

// A session ends when unused for SessionIdle, and SessionLifetime after sign-in however
// much it is used; use keeps it alive in between, and is written at most once a minute.
func TestSessionIdleAndAbsoluteLifetimes(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.Recheck = RecheckOff })
		c := h.mustSignIn()
		h.clock.Advance(DefaultSessionIdle - time.Minute)
		if _, err := h.authenticate(c); err != nil {
			t.Fatalf("a session used within its idle time: %v", err)
		}
		h.clock.Advance(DefaultSessionIdle - time.Minute) // used a minute short of idle: kept
		if _, err := h.authenticate(c); err != nil {
			t.Fatalf("a session kept in use: %v", err)
		}
		h.clock.Advance(DefaultSessionIdle + time.Second)
		if _, err := h.authenticate(c); !isNoPrincipal(err) {
			t.Errorf("a session idle past %s gave %v", DefaultSessionIdle, err)
		}
	})
	t.Run("absolute", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.Recheck = RecheckOff })
		c := h.mustSignIn()
		for elapsed := time.Duration(0); elapsed < DefaultSessionLifetime-30*time.Minute; elapsed += 30 * time.Minute {
			h.clock.Advance(30 * time.Minute)
			if _, err := h.authenticate(c); err != nil {
				t.Fatalf("a session in use after %s: %v", elapsed+30*time.Minute, err)
			}
		}
		h.clock.Advance(30 * time.Minute)
		if _, err := h.authenticate(c); !isNoPrincipal(err) {
			t.Errorf("a session at its %s lifetime gave %v", DefaultSessionLifetime, err)
		}
	})
	t.Run("use is written at most once a minute", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.Recheck = RecheckOff })
		c := h.mustSignIn()
		for range 10 {
			h.clock.Advance(5 * time.Second)
			if _, err := h.authenticate(c); err != nil {
				t.Fatal(err)
			}
		}
		if h.store.sessionTouches != 0 {
			t.Errorf("%d writes in 50 seconds", h.store.sessionTouches)
		}
		h.clock.Advance(15 * time.Second)
		if _, err := h.authenticate(c); err != nil {
			t.Fatal(err)
		}
		if h.store.sessionTouches != 1 {
			t.Errorf("%d writes after a minute, want 1", h.store.sessionTouches)
		}
	})
}

// Signing out ends the session (audited) and clears the cookie; the cookie then
// authenticates no one.
func TestSignOutEndsTheSession(t *testing.T) {
	h := newHarness(t)
	c := h.mustSignIn()
	rec := httptest.NewRecorder()
	h.svc.Logout(rec, h.request("POST", "/auth/logout", c))
	if rec.Code != http.StatusNoContent {
		t.Fatalf("logout answered %d", rec.Code)
	}
	cleared := false
	for _, sc := range rec.Result().Cookies() {
		cleared = cleared || (sc.Name == sessionCookie && sc.MaxAge < 0)
	}
	if !cleared {
		t.Error("the session cookie was not cleared")
	}
	if _, err := h.authenticate(c); !isNoPrincipal(err) {
		t.Errorf("a signed-out session gave %v", err)
	}
	outs := h.store.auditOf(auth.ActionSignOut)
	if len(outs) != 1 || !strings.Contains(outs[0].Actor, "ada@example.com") {
		t.Errorf("sign-out audit %+v", outs)
	}
	rec = httptest.NewRecorder()
	h.svc.Logout(rec, h.request("GET", "/auth/logout", c))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("logout by GET answered %d", rec.Code)
	}
}

// Sessions of a person who was disabled authenticate no one, whether the store ended
// them or not.
func TestDisabledPersonsSessionIsRefused(t *testing.T) {
	h := newHarness(t)
	c := h.mustSignIn()
	p, _ := h.authenticate(c)
	// Disabled without the sessions ended (as if another gateway's write is half seen).
	h.store.mu.Lock()
	h.store.users[p.ID].DisabledAt = h.clock.Now()
	h.store.mu.Unlock()
	if _, err := h.authenticate(c); !errors.Is(err, ErrRefused) {
		t.Errorf("a disabled person's live session gave %v, want refused", err)
	}
}

func (h *harness) addToken(grant access.Grant, expires time.Time) string {
	secret := access.NewSecret(access.TokenPrefix)
	err := h.store.CreateToken(h.t.Context(), &access.Token{
		ID: access.NewID("tok_"), Name: "ci", Prefix: secret[:8], Hash: access.HashSecret(secret),
		Grant: grant, CreatedAt: h.clock.Now(), ExpiresAt: expires,
	}, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	return secret
}

func (h *harness) bearer(secret string) (*access.Principal, error) {
	r := h.request("GET", "/api/keys")
	r.Header.Set("Authorization", "Bearer "+secret)
	return h.svc.Authenticate(r)
}

// An API token is its one grant until it expires or is revoked; an unknown one, or
// anything but a token in the header, is no one.
func TestAPITokens(t *testing.T) {
	h := newHarness(t)
	grant := access.Grant{Role: access.RoleProjectAdmin, Projects: []string{"team-a"}}
	secret := h.addToken(grant, h.clock.Now().Add(time.Hour))
	p, err := h.bearer(secret)
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != access.KindToken || p.Name != "ci" || len(p.Grants) != 1 || p.Grants[0].Role != access.RoleProjectAdmin {
		t.Errorf("token principal %+v", p)
	}
	for range 5 {
		h.clock.Advance(10 * time.Second)
		if _, err := h.bearer(secret); err != nil {
			t.Fatal(err)
		}
	}
	if h.store.tokenTouches != 1 {
		t.Errorf("%d writes of the token's use within a minute, want 1", h.store.tokenTouches)
	}

	h.clock.Advance(time.Hour)
	if _, err := h.bearer(secret); !isNoPrincipal(err) {
		t.Errorf("an expired token gave %v", err)
	}
	revoked := h.addToken(grant, h.clock.Now().Add(time.Hour))
	for _, tok := range h.store.tokens {
		if tok.Hash == access.HashSecret(revoked) {
			tok.RevokedAt = h.clock.Now()
		}
	}
	if _, err := h.bearer(revoked); !isNoPrincipal(err) {
		t.Errorf("a revoked token gave %v", err)
	}
	for _, bad := range []string{access.NewSecret(access.TokenPrefix), "sk-sy-" + strings.Repeat("a", 52), "syt_" + strings.Repeat("a", 500), ""} {
		if _, err := h.bearer(bad); !isNoPrincipal(err) {
			t.Errorf("bearer %.12q… gave %v", bad, err)
		}
	}
	if _, err := h.svc.Authenticate(h.request("GET", "/api/keys")); !isNoPrincipal(err) {
		t.Errorf("no credential gave %v", err)
	}
	if _, err := h.authenticate(&http.Cookie{Name: sessionCookie, Value: access.NewSecret("sys_")}); !isNoPrincipal(err) {
		t.Errorf("an unknown session gave %v", err)
	}
}

// The break-glass door makes an owner session named after the basic-auth user,
// audited; turned off, it makes none and its earlier sessions stop working.
func TestBreakGlass(t *testing.T) {
	h := newHarness(t)
	rec := httptest.NewRecorder()
	h.svc.BreakGlass(rec, h.request("GET", "/auth/break-glass"), "admin")
	c := findCookie(rec, sessionCookie)
	if rec.Code != http.StatusFound || rec.Header().Get("Location") != "../" || c == nil {
		t.Fatalf("break-glass answered %d, Location %q, cookie %v", rec.Code, rec.Header().Get("Location"), c)
	}
	p, err := h.authenticate(c)
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != access.KindBreakGlass || p.ID != "admin" || p.HighestRole() != access.RoleOwner {
		t.Errorf("break-glass principal %+v", p)
	}
	if ins := h.store.auditOf(auth.ActionSignIn); len(ins) != 1 || !strings.Contains(ins[0].Actor, "break-glass admin") {
		t.Errorf("break-glass audit %+v", ins)
	}

	cfg := h.config()
	cfg.BreakGlass = false
	h.svc = h.newService(cfg)
	rec = httptest.NewRecorder()
	h.svc.BreakGlass(rec, h.request("GET", "/auth/break-glass"), "admin")
	if rec.Code != http.StatusForbidden || findCookie(rec, sessionCookie) != nil {
		t.Errorf("break-glass turned off answered %d", rec.Code)
	}
	if _, err := h.authenticate(c); !errors.Is(err, ErrRefused) {
		t.Errorf("a break-glass session after the door was turned off gave %v", err)
	}
}

// The gateway starts while the provider is away: New does not reach it, the first
// sign-in says the provider cannot be reached, and the next one, once it is back,
// works.
func TestDiscoveryIsLazyAndTriedAgain(t *testing.T) {
	h := newHarness(t)
	h.p.set(func(p *fakeProvider) { p.down = true })
	svc := h.newService(h.config())
	h.svc = svc
	if h.p.discoveries != 0 {
		t.Errorf("New reached the provider %d times", h.p.discoveries)
	}
	rec := httptest.NewRecorder()
	svc.Login(rec, h.request("GET", "/auth/login"))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "cannot be reached") {
		t.Errorf("login with the provider away answered %d: %s", rec.Code, rec.Body)
	}
	h.p.set(func(p *fakeProvider) { p.down = false })
	if rec, c := h.signIn("/"); rec.Code != http.StatusFound || c == nil {
		t.Errorf("sign-in once the provider is back answered %d", rec.Code)
	}
}

// A provider's answer is read with bounded memory.
func TestProviderAnswersAreBounded(t *testing.T) {
	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"issuer":"` + strings.Repeat("a", maxProviderBody) + `"}`))
	}))
	defer big.Close()
	h := newHarness(t)
	cfg := h.config()
	cfg.Issuer = big.URL
	h.svc = h.newService(cfg)
	rec := httptest.NewRecorder()
	h.svc.Login(rec, h.request("GET", "/auth/login"))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("a discovery document past %d bytes: login answered %d", maxProviderBody, rec.Code)
	}
	if !strings.Contains(h.logText(), "too large") {
		t.Errorf("the log does not say the answer was too large: %s", h.logText())
	}
}

// The provider's error text never reaches the page or the log.
func TestProviderErrorTextIsNeverShown(t *testing.T) {
	h := newHarness(t)
	h.p.set(func(p *fakeProvider) { p.secret = "rotated"; p.errorBody = "PROVIDER-SAYS-SOMETHING" })
	state, loc := h.login("/")
	rec := h.callback(h.p.authorizeBrowser(t, loc), state)
	if rec.Code != http.StatusBadGateway {
		t.Errorf("a refused exchange answered %d", rec.Code)
	}
	if strings.Contains(rec.Body.String(), "PROVIDER-SAYS") || strings.Contains(h.logText(), "PROVIDER-SAYS") {
		t.Error("the provider's error text was shown or logged")
	}
	if !strings.Contains(h.logText(), "invalid_client") {
		t.Errorf("the log does not name the provider's error code: %s", h.logText())
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{
		Issuer: "https://login.example.com", ClientID: "switchyard", ClientSecret: "s",
		RedirectURL: "https://gw.example.com/console/auth/callback", Mapping: testMapping,
	}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		change func(*Config)
		says   string
	}{
		"no issuer":            {func(c *Config) { c.Issuer = "" }, "issuer"},
		"http issuer":          {func(c *Config) { c.Issuer = "http://login.example.com" }, "https"},
		"no client":            {func(c *Config) { c.ClientID = "" }, "client_id"},
		"no secret":            {func(c *Config) { c.ClientSecret = "" }, "client_secret"},
		"no redirect":          {func(c *Config) { c.RedirectURL = "" }, "redirect_url"},
		"redirect elsewhere":   {func(c *Config) { c.RedirectURL = "https://gw.example.com/console/" }, "auth/callback"},
		"no openid scope":      {func(c *Config) { c.Scopes = []string{"email"} }, "openid"},
		"idle past lifetime":   {func(c *Config) { c.SessionIdle = 13 * time.Hour }, "session_idle"},
		"no mapping":           {func(c *Config) { c.Mapping = nil }, "no one could sign in"},
		"member with no scope": {func(c *Config) { c.Mapping = access.Mapping{{Group: "g", Role: access.RoleMember}} }, "projects"},
	} {
		c := good
		tc.change(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an error naming %q", name, err, tc.says)
		}
	}
	loopbackDev := good
	loopbackDev.Issuer, loopbackDev.RedirectURL = "http://127.0.0.1:5556", "http://localhost:8080/console/auth/callback"
	if err := loopbackDev.Validate(); err != nil {
		t.Errorf("http on loopback: %v", err)
	}
}
