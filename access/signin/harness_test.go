package signin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/switchyard-gw/switchyard/access"
)

// harness is a sign-in service against the fake provider, with a test clock, an
// in-memory store and its log lines kept.
type harness struct {
	t     *testing.T
	clock *testClock
	p     *fakeProvider
	store *memStore
	svc   *Service
	core  zapcore.Core
	logs  *observer.ObservedLogs
	tls   bool
}

var testMapping = access.Mapping{
	{Group: "platform-owners", Role: access.RoleOwner},
	{Group: "eng-a", Role: access.RoleMember, Projects: []string{"team-a"}},
	{Group: "auditors", Role: access.RoleViewer},
}

func newHarness(t *testing.T, adjust ...func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, clock: &testClock{now: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}, store: newMemStore()}
	h.p = newFakeProvider(t, h.clock)
	cfg := h.config()
	for _, a := range adjust {
		a(&cfg)
	}
	h.svc = h.newService(cfg)
	return h
}

func (h *harness) config() Config {
	return Config{
		Issuer:       h.p.issuer(),
		ClientID:     "switchyard",
		ClientSecret: h.p.secret,
		RedirectURL:  "http://127.0.0.1:8080/console/auth/callback",
		Mapping:      testMapping,
		BreakGlass:   true,
		Now:          h.clock.Now,
	}
}

func (h *harness) newService(cfg Config) *Service {
	h.t.Helper()
	if h.logs == nil {
		h.core, h.logs = observer.New(zapcore.DebugLevel)
	}
	svc, err := New(context.Background(), cfg, h.store, zap.New(h.core))
	if err != nil {
		h.t.Fatal(err)
	}
	return svc
}

func (h *harness) request(method, target string, cookies ...*http.Cookie) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = "192.0.2.7:50000"
	if h.tls {
		r.TLS = &tls.ConnectionState{}
	}
	for _, c := range cookies {
		if c != nil {
			r.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
		}
	}
	return r
}

func findCookie(rec *httptest.ResponseRecorder, name string) *http.Cookie {
	for _, c := range rec.Result().Cookies() {
		if c.Name == name && c.MaxAge >= 0 && c.Value != "" {
			return c
		}
	}
	return nil
}

func (h *harness) name(base string) string {
	if h.tls {
		return hostPrefix + base
	}
	return base
}

// login starts a sign-in with return and gives the state cookie and where the browser
// was sent.
func (h *harness) login(ret string) (*http.Cookie, string) {
	h.t.Helper()
	target := "/auth/login"
	if ret != "" {
		target += "?return=" + urlQueryEscape(ret)
	}
	rec := httptest.NewRecorder()
	h.svc.Login(rec, h.request("GET", target))
	if rec.Code != http.StatusFound {
		h.t.Fatalf("login answered %d: %s", rec.Code, rec.Body)
	}
	state := findCookie(rec, h.name(stateCookie))
	if state == nil {
		h.t.Fatalf("login set no state cookie %s", h.name(stateCookie))
	}
	return state, rec.Header().Get("Location")
}

func (h *harness) callback(query string, cookies ...*http.Cookie) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.svc.Callback(rec, h.request("GET", "/auth/callback?"+query, cookies...))
	return rec
}

// signIn runs a whole sign-in and gives the callback's answer and the session cookie
// (nil when none was set).
func (h *harness) signIn(ret string) (*httptest.ResponseRecorder, *http.Cookie) {
	h.t.Helper()
	state, loc := h.login(ret)
	rec := h.callback(h.p.authorizeBrowser(h.t, loc), state)
	return rec, findCookie(rec, h.name(sessionCookie))
}

func (h *harness) mustSignIn() *http.Cookie {
	h.t.Helper()
	rec, c := h.signIn("/")
	if rec.Code != http.StatusFound || c == nil {
		h.t.Fatalf("sign-in answered %d without a session: %s", rec.Code, rec.Body)
	}
	return c
}

func (h *harness) authenticate(c *http.Cookie) (*access.Principal, error) {
	return h.svc.Authenticate(h.request("GET", "/api/me", c))
}

func (h *harness) sessionCount() int {
	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	return len(h.store.sessions)
}

func (h *harness) userCount() int {
	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	return len(h.store.users)
}

// logText is every log line with its fields, to search for what must not be there.
func (h *harness) logText() string {
	var b strings.Builder
	for _, e := range h.logs.All() {
		b.WriteString(e.Message)
		for k, v := range e.ContextMap() {
			b.WriteString(" " + k + "=")
			b.WriteString(strings.ReplaceAll(toString(v), "\n", " "))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func toString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case error:
		return x.Error()
	}
	return strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(fmtAny(v), "\t", " "), "\n", " "))
}

func isNoPrincipal(err error) bool { return errors.Is(err, ErrNoPrincipal) }

func urlQueryEscape(s string) string { return url.QueryEscape(s) }

func fmtAny(v any) string { return fmt.Sprint(v) }

func accessHash(secret string) access.Secret { return access.HashSecret(secret) }
