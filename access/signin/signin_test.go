package signin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/auth"
)

// A whole sign-in: the browser comes back to where it started in the console, with a
// session that names the person and the roles their groups give; the person and the
// session are stored and the sign-in is in the audit trail.
func TestSignInMakesASessionAndReturnsIntoTheConsole(t *testing.T) {
	h := newHarness(t)
	rec, c := h.signIn("/keys?tab=mine")
	if rec.Code != http.StatusFound || c == nil {
		t.Fatalf("callback answered %d, session cookie %v: %s", rec.Code, c, rec.Body)
	}
	loc := rec.Header().Get("Location")
	if loc != "../keys?tab=mine" {
		t.Errorf("Location %q, want ../keys?tab=mine", loc)
	}
	// The console is mounted under /console/ with its prefix stripped: the relative
	// Location must land inside it.
	if got := resolveFromCallback(t, loc); got != "https://gw.example/console/keys?tab=mine" {
		t.Errorf("the browser goes to %s", got)
	}
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure {
		t.Errorf("session cookie over plain HTTP: HttpOnly %v SameSite %v Path %q Secure %v", c.HttpOnly, c.SameSite, c.Path, c.Secure)
	}
	if !strings.HasPrefix(c.Value, "sys_") {
		t.Errorf("session secret %q", c.Value)
	}
	p, err := h.authenticate(c)
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != access.KindUser || p.Email != "ada@example.com" || p.Subject != "person-1" || p.Name != "Ada" || p.SessionID == "" {
		t.Errorf("principal %+v", p)
	}
	if len(p.Grants) != 1 || p.Grants[0].Role != access.RoleMember || p.Grants[0].Projects[0] != "team-a" {
		t.Errorf("grants %+v, want member of team-a", p.Grants)
	}
	if p.Addr != "192.0.2.7" {
		t.Errorf("addr %q", p.Addr)
	}
	// Only the secret's hash is stored.
	for _, s := range h.store.sessions {
		if s.Hash != access.HashSecret(c.Value) {
			t.Error("the stored session is not the cookie's hash")
		}
		if strings.Contains(string(s.Refresh), "rt-") {
			t.Error("the refresh token is stored in the clear")
		}
	}
	signIns := h.store.auditOf(auth.ActionSignIn)
	if len(signIns) != 1 || !strings.Contains(signIns[0].Actor, "ada@example.com") || signIns[0].Target != p.SessionID {
		t.Errorf("sign-in audit %+v", signIns)
	}
	// The state cookie is spent: cleared on the callback.
	cleared := false
	for _, sc := range rec.Result().Cookies() {
		cleared = cleared || (sc.Name == stateCookie && sc.MaxAge < 0)
	}
	if !cleared {
		t.Error("the state cookie was not cleared by the callback")
	}
}

// The provider is asked with PKCE (S256), a nonce, and the configured callback address,
// whatever Host the browser sent.
func TestLoginAsksTheProviderWithPKCEAndTheConfiguredCallback(t *testing.T) {
	h := newHarness(t)
	r := h.request("GET", "/auth/login?return=/keys")
	r.Host = "evil.example"
	rec := httptest.NewRecorder()
	h.svc.Login(rec, r)
	loc, err := url.Parse(rec.Header().Get("Location"))
	if err != nil || rec.Code != http.StatusFound {
		t.Fatalf("login answered %d, Location %q", rec.Code, rec.Header().Get("Location"))
	}
	q := loc.Query()
	if q.Get("redirect_uri") != "http://127.0.0.1:8080/console/auth/callback" {
		t.Errorf("redirect_uri %q", q.Get("redirect_uri"))
	}
	if q.Get("code_challenge_method") != "S256" || len(q.Get("code_challenge")) != 43 {
		t.Errorf("PKCE: method %q, challenge %q", q.Get("code_challenge_method"), q.Get("code_challenge"))
	}
	if len(q.Get("state")) < 43 || len(q.Get("nonce")) < 43 || q.Get("state") == q.Get("nonce") {
		t.Errorf("state %q and nonce %q are not two fresh 256-bit values", q.Get("state"), q.Get("nonce"))
	}
	if q.Get("scope") != "openid email profile" {
		t.Errorf("scope %q", q.Get("scope"))
	}
	// Settings, for the console, never hold the client secret.
	if b, _ := json.Marshal(h.svc.Settings()); strings.Contains(string(b), h.p.secret) {
		t.Errorf("settings hold the client secret: %s", b)
	}
}

func resolveFromCallback(t *testing.T, loc string) string {
	t.Helper()
	base, _ := url.Parse("https://gw.example/console/auth/callback?code=x&state=y")
	ref, err := url.Parse(loc)
	if err != nil {
		t.Fatalf("Location %q: %v", loc, err)
	}
	return base.ResolveReference(ref).String()
}

// On TLS every cookie is Secure and carries the __Host- prefix; the state cookie is
// Lax (the provider's redirect back must carry it), the session cookie Strict.
func TestCookiesOnTLSAreSecureHostOnlyAndHttpOnly(t *testing.T) {
	h := newHarness(t)
	h.tls = true
	state, loc := h.login("/")
	if state.Name != "__Host-switchyard_signin" || !state.Secure || !state.HttpOnly || state.SameSite != http.SameSiteLaxMode || state.Path != "/" {
		t.Errorf("state cookie %+v", state)
	}
	if state.MaxAge <= 0 || state.MaxAge > 600 {
		t.Errorf("state cookie lives %ds, want at most ten minutes", state.MaxAge)
	}
	rec := h.callback(h.p.authorizeBrowser(t, loc), state)
	c := findCookie(rec, "__Host-switchyard_session")
	if c == nil {
		t.Fatalf("no __Host-switchyard_session cookie on TLS: %d %s", rec.Code, rec.Body)
	}
	if !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Domain != "" {
		t.Errorf("session cookie %+v", c)
	}
	if _, err := h.authenticate(c); err != nil {
		t.Errorf("the TLS session does not authenticate: %v", err)
	}
	// On TLS the cookie without the prefix (which any sibling host could set) is not
	// read.
	if _, err := h.authenticate(&http.Cookie{Name: "switchyard_session", Value: c.Value}); !isNoPrincipal(err) {
		t.Errorf("a session cookie without __Host- on TLS gave %v", err)
	}
}

// spoilers are ID tokens the sign-in must refuse.
var spoilers = []struct {
	name  string
	apply func(p *fakeProvider)
}{
	{"wrong audience", func(p *fakeProvider) { p.spoil = func(c map[string]any) { c["aud"] = "another-client" } }},
	{"several audiences, another authorized party", func(p *fakeProvider) {
		p.spoil = func(c map[string]any) {
			c["aud"] = []string{"switchyard", "another-client"}
			c["azp"] = "another-client"
		}
	}},
	{"wrong issuer", func(p *fakeProvider) { p.spoil = func(c map[string]any) { c["iss"] = "https://evil.example" } }},
	{"wrong nonce", func(p *fakeProvider) { p.spoil = func(c map[string]any) { c["nonce"] = "another-nonce" } }},
	{"no nonce", func(p *fakeProvider) { p.spoil = func(c map[string]any) { delete(c, "nonce") } }},
	{"signed by another key", func(p *fakeProvider) { _, other := testKeys(p.t); p.signWith = other }},
	{"expired", func(p *fakeProvider) {
		p.spoil = func(c map[string]any) { c["exp"] = p.clock.Now().Add(-time.Minute).Unix() }
	}},
	{"no subject", func(p *fakeProvider) { p.spoil = func(c map[string]any) { delete(c, "sub") } }},
}

// An ID token with a wrong audience, issuer, nonce or signature, or expired, signs no
// one in: a page says so, no session, no person stored, and neither the page nor the
// log holds the code or a token.
func TestSignInRefusesBadIDTokens(t *testing.T) {
	for _, sp := range spoilers {
		t.Run(sp.name, func(t *testing.T) {
			h := newHarness(t)
			h.p.set(sp.apply)
			state, loc := h.login("/")
			query := h.p.authorizeBrowser(t, loc)
			rec := h.callback(query, state)
			if rec.Code != http.StatusForbidden {
				t.Errorf("answered %d, want 403: %s", rec.Code, rec.Body)
			}
			if c := findCookie(rec, sessionCookie); c != nil {
				t.Error("a session cookie was set")
			}
			if h.sessionCount() != 0 || h.userCount() != 0 {
				t.Errorf("%d sessions and %d people stored", h.sessionCount(), h.userCount())
			}
			if !strings.Contains(rec.Body.String(), "could not be verified") {
				t.Errorf("page does not say the sign-in was not verified: %s", rec.Body)
			}
			code, _ := url.ParseQuery(query)
			for _, where := range []string{rec.Body.String(), h.logText()} {
				if strings.Contains(where, code.Get("code")) || strings.Contains(where, "eyJ") {
					t.Errorf("a code or token leaked: %s", where)
				}
			}
		})
	}
}

// The callback is bound to the browser that started the sign-in and taken once.
func TestCallbackIsBoundToTheBrowserAndTakenOnce(t *testing.T) {
	t.Run("replayed with the same cookie", func(t *testing.T) {
		h := newHarness(t)
		state, loc := h.login("/")
		query := h.p.authorizeBrowser(t, loc)
		if rec := h.callback(query, state); rec.Code != http.StatusFound {
			t.Fatalf("first callback answered %d: %s", rec.Code, rec.Body)
		}
		rec := h.callback(query, state)
		if rec.Code != http.StatusBadRequest || findCookie(rec, sessionCookie) != nil {
			t.Errorf("replayed callback answered %d (the provider accepts codes twice here)", rec.Code)
		}
		if h.sessionCount() != 1 {
			t.Errorf("%d sessions after a replay, want 1", h.sessionCount())
		}
	})
	t.Run("state does not match the cookie", func(t *testing.T) {
		h := newHarness(t)
		state, loc := h.login("/")
		q, _ := url.ParseQuery(h.p.authorizeBrowser(t, loc))
		other, _ := h.login("/") // a second sign-in: another state
		rec := h.callback(q.Encode(), other)
		if rec.Code != http.StatusBadRequest || h.sessionCount() != 0 {
			t.Errorf("another sign-in's cookie answered %d", rec.Code)
		}
		q.Set("state", q.Get("state")+"x")
		if rec := h.callback(q.Encode(), state); rec.Code != http.StatusBadRequest || h.sessionCount() != 0 {
			t.Errorf("an altered state answered %d", rec.Code)
		}
	})
	t.Run("no state cookie", func(t *testing.T) {
		h := newHarness(t)
		_, loc := h.login("/")
		rec := h.callback(h.p.authorizeBrowser(t, loc))
		if rec.Code != http.StatusBadRequest || h.sessionCount() != 0 {
			t.Errorf("a callback without the state cookie answered %d", rec.Code)
		}
		if !strings.Contains(rec.Body.String(), "no record in this browser") {
			t.Errorf("page: %s", rec.Body)
		}
	})
	t.Run("state cookie older than ten minutes", func(t *testing.T) {
		h := newHarness(t)
		state, loc := h.login("/")
		query := h.p.authorizeBrowser(t, loc)
		h.clock.Advance(stateLifetime + time.Second)
		if rec := h.callback(query, state); rec.Code != http.StatusBadRequest || h.sessionCount() != 0 {
			t.Errorf("an expired sign-in answered %d", rec.Code)
		}
	})
	t.Run("state cookie sealed by another client", func(t *testing.T) {
		h := newHarness(t)
		cfg := h.config()
		cfg.ClientSecret = "another-secret"
		elsewhere := h.newService(cfg)
		rec := httptest.NewRecorder()
		elsewhere.Login(rec, h.request("GET", "/auth/login"))
		state := findCookie(rec, stateCookie)
		query := h.p.authorizeBrowser(t, rec.Header().Get("Location"))
		if rec := h.callback(query, state); rec.Code != http.StatusBadRequest || h.sessionCount() != 0 {
			t.Errorf("a state cookie sealed under another secret answered %d", rec.Code)
		}
	})
	t.Run("another gateway with the same client finishes it", func(t *testing.T) {
		h := newHarness(t)
		state, loc := h.login("/")
		query := h.p.authorizeBrowser(t, loc)
		h.svc = h.newService(h.config()) // the load balancer sent the callback elsewhere
		if rec := h.callback(query, state); rec.Code != http.StatusFound {
			t.Errorf("the second gateway answered %d: %s", rec.Code, rec.Body)
		}
	})
}

// A return address outside the console never leaves the console: the sign-in goes back
// to the console's root.
func TestReturnAddressCannotLeaveTheConsole(t *testing.T) {
	hostile := []string{
		"//evil.example", "//evil.example/keys", "https://evil.example", "http:evil.example",
		`/\evil.example`, `\\evil.example`, "javascript:alert(1)", "/\t/evil.example",
		"/%2F%2Fevil.example", "/../../../evil", "evil.example", " /keys", "/keys\r\nSet-Cookie: x=y",
	}
	for _, ret := range hostile {
		got := safeReturn(ret)
		dest := resolveFromCallback(t, consoleLocation(got))
		u, _ := url.Parse(dest)
		if u.Host != "gw.example" || !strings.HasPrefix(u.Path, "/console/") {
			t.Errorf("return %q sends the browser to %s", ret, dest)
		}
	}
	for ret, want := range map[string]string{
		"/": "/", "/keys": "/keys", "/keys?tab=mine": "/keys?tab=mine", "/people/usr_1": "/people/usr_1",
		"/projects/": "/projects/", "/#keys": "/#keys", "/a/./b/../c": "/a/c",
		"//evil.example": "/", "https://evil.example": "/", `/\evil.example`: "/", "javascript:alert(1)": "/",
	} {
		if got := safeReturn(ret); got != want {
			t.Errorf("safeReturn(%q) = %q, want %q", ret, got, want)
		}
	}
	// Through the whole sign-in: the return travels in the state cookie.
	for _, ret := range []string{"//evil.example", "https://evil.example", `/\evil.example`, "javascript:alert(1)"} {
		h := newHarness(t)
		rec, _ := h.signIn(ret)
		if loc := rec.Header().Get("Location"); rec.Code != http.StatusFound || loc != "../" {
			t.Errorf("return %q: answered %d, Location %q, want ../", ret, rec.Code, loc)
		}
	}
}

// Someone the provider signs in who is in no mapped group is refused with a page that
// says why, and is not stored.
func TestSomeoneInNoMappedGroupIsRefused(t *testing.T) {
	h := newHarness(t)
	h.p.set(func(p *fakeProvider) { p.claims["groups"] = []string{"marketing", "everyone"} })
	rec, c := h.signIn("/")
	if rec.Code != http.StatusForbidden || c != nil || h.sessionCount() != 0 || h.userCount() != 0 {
		t.Fatalf("answered %d, cookie %v, %d sessions, %d people", rec.Code, c, h.sessionCount(), h.userCount())
	}
	if body := rec.Body.String(); !strings.Contains(body, "no role here") || !strings.Contains(body, "ada@example.com") {
		t.Errorf("page: %s", body)
	}
}

// The groups claim is read as providers write it, bounded, and only mapped groups are
// kept on the person.
func TestGroupsClaimShapes(t *testing.T) {
	cases := map[string]struct {
		claim any
		want  access.Role
	}{
		"list":                     {[]any{"x", "platform-owners"}, access.RoleOwner},
		"one name":                 {"auditors", access.RoleViewer},
		"object (Zitadel's roles)": {map[string]any{"auditors": map[string]any{"org": "x"}}, access.RoleViewer},
		"past the bound":           {append(make([]any, maxGroups), "platform-owners"), ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			claim := tc.claim
			if list, ok := claim.([]any); ok && len(list) > maxGroups {
				for i := range maxGroups {
					list[i] = "g"
				}
			}
			h.p.set(func(p *fakeProvider) { p.claims["groups"] = claim })
			rec, c := h.signIn("/")
			if tc.want == "" {
				if rec.Code != http.StatusForbidden {
					t.Errorf("a group past the bound gave a role: %d", rec.Code)
				}
				return
			}
			p, err := h.authenticate(c)
			if err != nil {
				t.Fatalf("%d: %v", rec.Code, err)
			}
			if p.HighestRole() != tc.want {
				t.Errorf("role %s, want %s", p.HighestRole(), tc.want)
			}
			for _, u := range h.store.users {
				for _, g := range u.Groups {
					if g == "x" {
						t.Errorf("an unmapped group was kept: %v", u.Groups)
					}
				}
			}
		})
	}
}

// A person an owner disabled cannot sign in, even though the provider signs them in.
func TestDisabledPersonCannotSignIn(t *testing.T) {
	h := newHarness(t)
	c := h.mustSignIn()
	p, _ := h.authenticate(c)
	if err := h.store.DisableUser(t.Context(), p.ID, "left the company", h.clock.Now(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := h.authenticate(c); err == nil {
		t.Error("the disabled person's session still works")
	}
	rec, c2 := h.signIn("/")
	if rec.Code != http.StatusForbidden || c2 != nil || !strings.Contains(rec.Body.String(), "disabled") {
		t.Errorf("a disabled person signing in: %d, cookie %v: %s", rec.Code, c2, rec.Body)
	}
}
