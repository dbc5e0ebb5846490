package integration

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/console"
	"github.com/switchyard-gw/switchyard/store"
)

// The callers of the role table: a session of each role (people signed in), the
// break-glass password, an API token out of its scope, and the refused ones.
var tableCallers = []string{
	"nobody", "owner", "admin", "lead", "member", "viewer", "auditor", "glass", "token-b",
	"expired", "idle", "disabled", "revoked-token", "expired-token",
}

// allowedBy is who may call each route, against fixtures in project team-a (the key
// is the member's own). Every route of console.Routes must be here: a new route without
// an entry fails the test. "live" is every caller with a valid credential.
var allowedBy = map[string]string{
	"GET /me":                                "live",
	"GET /keys":                              "live",
	"POST /keys":                             "owner admin lead member glass",
	"GET /keys/{id}":                         "owner admin lead member viewer auditor glass",
	"POST /keys/{id}/rotate":                 "owner admin lead member glass",
	"POST /keys/{id}/revoke":                 "owner admin lead member glass",
	"DELETE /keys/{id}":                      "owner admin lead member glass",
	"PUT /keys/{id}/limits":                  "owner admin lead glass",
	"PUT /keys/{id}/project":                 "owner admin lead glass",
	"GET /projects":                          "live",
	"POST /projects":                         "owner admin glass",
	"GET /projects/{id}":                     "owner admin lead member viewer auditor glass",
	"PUT /projects/{id}/limits":              "owner admin lead glass",
	"PUT /projects/{id}/members":             "owner admin lead glass",
	"GET /audit":                             "owner admin lead viewer auditor glass token-b",
	"GET /models":                            "live",
	"POST /health/{model}/{candidate}/reset": "owner admin glass",
	"GET /usage":                             "live",
	"GET /requests":                          "live",
	"GET /latency":                           "live",
	"GET /connect/{client}":                  "live",
	"GET /alerts":                            "owner admin auditor glass",
	"GET /tokens":                            "owner admin lead glass token-b",
	"POST /tokens":                           "owner admin lead glass",
	"POST /tokens/{id}/revoke":               "owner admin lead glass",
	"GET /people":                            "owner admin glass",
	"POST /people/{id}/disable":              "owner glass",
	"POST /people/{id}/enable":               "owner glass",
	"GET /sessions":                          "owner admin glass",
	"POST /sessions/{id}/revoke":             "owner glass",
	"GET /settings":                          "owner glass",
}

var liveCallers = []string{"owner", "admin", "lead", "member", "viewer", "auditor", "glass", "token-b"}

// accessFixtures are the things the table's calls touch, made in the gateway's store.
type accessFixtures struct {
	memberKey, victimToken, victimUser, victimSession string
	credentials                                       map[string][]string // caller -> headers
}

// startAccessGateway runs the console with sign-in configured (its provider is never
// reached: every session here is made in the store, as a sign-in would make it) and
// the break-glass password on auth/break-glass and on calls that carry it.
func startAccessGateway(t *testing.T, extraConsole string) (*gateway, string) {
	t.Helper()
	up := newUpstream(t)
	db := filepath.Join(t.TempDir(), "keys.db")
	a := "http://" + up.hostport() + "/v1"
	models := "\t\tmodel chat-a {\n\t\t\tprotocols family_a\n\t\t\tprice input 2.5 output 10\n" +
		candidate("main", "family_a", a, upstreamPrefix+"-a") + "\t\t}\n"
	ports, caddyfile := startCaddy(t, 2, func(ports []int) string {
		site := "http://127.0.0.1:" + strconv.Itoa(ports[0])
		return "{\n\tadmin 127.0.0.1:" + strconv.Itoa(ports[1]) + "\n\tdefault_bind 127.0.0.1\n" +
			"\tswitchyard {\n\t\tstore sqlite " + db + "\n" + models + "\t}\n}\n" +
			site + " {\n" +
			"\thandle_path /console/* {\n" +
			"\t\t@break_glass `path('/auth/break-glass') || header_regexp('Authorization', '^Basic ')`\n" +
			"\t\tbasic_auth @break_glass {\n\t\t\t" + consoleUser + " " + consolePasswordHash + "\n\t\t}\n" +
			"\t\tswitchyard_console {\n" +
			"\t\t\tsign_in {\n\t\t\t\tissuer http://127.0.0.1:9\n\t\t\t\tclient_id switchyard\n\t\t\t\tclient_secret s3cret\n" +
			"\t\t\t\tredirect_url " + site + "/console/auth/callback\n\t\t\t}\n" +
			"\t\t\trole member group eng-a projects team-a\n" + extraConsole +
			"\t\t}\n\t}\n" +
			"\thandle {\n\t\tswitchyard_auth\n\t\tswitchyard_model\n\t\tswitchyard_proxy\n\t}\n" +
			"\thandle_errors {\n\t\tswitchyard_errors\n\t}\n}\n"
	})
	g := &gateway{base: "http://127.0.0.1:" + strconv.Itoa(ports[0]), admin: "http://127.0.0.1:" + strconv.Itoa(ports[1]), up: up, caddyfile: caddyfile}
	g.waitReady(t)
	return g, db
}

// signedIn makes a person and a session for them in the store, as a sign-in would, and
// returns the session's cookie header; adjust changes the session before it is stored.
func signedIn(t *testing.T, st access.Store, name string, grants []access.Grant, adjust func(*access.Session)) (*access.User, *access.Session, []string) {
	t.Helper()
	ctx := context.Background()
	u, err := st.SaveUser(ctx, &access.User{Issuer: "http://127.0.0.1:9", Subject: "sub-" + name, Email: name + "@example.com",
		Name: name, Grants: grants, LastSignIn: time.Now()})
	require.NoError(t, err)
	secret := access.NewSecret("sys_")
	now := time.Now()
	s := &access.Session{ID: access.NewID("ses_"), Hash: access.HashSecret(secret), UserID: u.ID, Kind: access.KindUser,
		Grants: grants, CreatedAt: now, LastSeenAt: now, ExpiresAt: now.Add(time.Hour), CheckedAt: now}
	if adjust != nil {
		adjust(s)
	}
	require.NoError(t, st.CreateSession(ctx, s, nil))
	return u, s, []string{"Cookie", "switchyard_session=" + secret, console.ConsoleHeader, "1"}
}

// tokenFor makes an API token in the store and returns its Authorization header.
func tokenFor(t *testing.T, st access.Store, grant access.Grant, expires time.Time) (*access.Token, []string) {
	t.Helper()
	secret := access.NewSecret(access.TokenPrefix)
	tok := &access.Token{ID: access.NewID("tok_"), Name: "ci", Prefix: secret[:10], Hash: access.HashSecret(secret), Grant: grant,
		CreatedBy: "test", CreatedAt: time.Now(), ExpiresAt: expires}
	require.NoError(t, st.CreateToken(context.Background(), tok, nil))
	return tok, []string{"Authorization", "Bearer " + secret}
}

// noRedirects is a client that shows a redirect instead of following it.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// callAt sends one request to base+path with exactly the given headers, and shows a
// redirect as it came.
func callAt(t *testing.T, base, method, path, body string, headers ...string) *result {
	t.Helper()
	var rd *strings.Reader
	if body == "" {
		rd = strings.NewReader("")
	} else {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := noRedirects.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = io.Copy(&b, io.LimitReader(resp.Body, 1<<20))
	return &result{Status: resp.StatusCode, Header: resp.Header, Body: []byte(b.String())}
}

func makeAccessFixtures(t *testing.T, g *gateway, db string) *accessFixtures {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, store.DriverSQLite, db)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	f := &accessFixtures{credentials: map[string][]string{}}
	teamA, teamB := []string{"team-a"}, []string{"team-b"}
	for _, p := range []string{"team-a", "team-b"} {
		r := callAt(t, g.admin, "POST", "/switchyard/projects", `{"id":"`+p+`"}`)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	}
	r := callAt(t, g.admin, "PUT", "/switchyard/projects/team-a/members", `{"max_expiry":"720h"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	sessions := map[string][]access.Grant{
		"owner":   {{Role: access.RoleOwner}},
		"admin":   {{Role: access.RoleAdmin}},
		"lead":    {{Role: access.RoleProjectAdmin, Projects: teamA}},
		"member":  {{Role: access.RoleMember, Projects: teamA}},
		"viewer":  {{Role: access.RoleViewer, Projects: teamA}},
		"auditor": {{Role: access.RoleViewer}},
	}
	var member *access.User
	for name, grants := range sessions {
		u, _, cookie := signedIn(t, st, name, grants, nil)
		f.credentials[name] = cookie
		if name == "member" {
			member = u
		}
	}
	owner := []access.Grant{{Role: access.RoleOwner}}
	_, _, f.credentials["expired"] = signedIn(t, st, "late", owner, func(s *access.Session) {
		s.CreatedAt = s.CreatedAt.Add(-13 * time.Hour)
		s.ExpiresAt = time.Now().Add(-time.Minute)
	})
	_, _, f.credentials["idle"] = signedIn(t, st, "idle", owner, func(s *access.Session) {
		s.LastSeenAt = s.LastSeenAt.Add(-2 * time.Hour) // the default idle lifetime is 1h
	})
	gone, _, cookie := signedIn(t, st, "gone", owner, nil)
	require.NoError(t, st.DisableUser(ctx, gone.ID, "left", time.Now(), nil))
	f.credentials["disabled"] = cookie
	f.credentials["glass"] = []string{"Authorization", basicAuth(consoleUser, consolePassword), console.ConsoleHeader, "1"}
	_, f.credentials["token-b"] = tokenFor(t, st, access.Grant{Role: access.RoleProjectAdmin, Projects: teamB}, time.Now().Add(time.Hour))
	revoked, header := tokenFor(t, st, access.Grant{Role: access.RoleOwner}, time.Now().Add(time.Hour))
	require.NoError(t, st.RevokeToken(ctx, revoked.ID, time.Now(), nil))
	f.credentials["revoked-token"] = header
	_, f.credentials["expired-token"] = tokenFor(t, st, access.Grant{Role: access.RoleOwner}, time.Now().Add(-time.Second))
	f.credentials["nobody"] = []string{console.ConsoleHeader, "1"}

	victim, victimSession, _ := signedIn(t, st, "victim", []access.Grant{{Role: access.RoleViewer}}, nil)
	f.victimUser, f.victimSession = victim.ID, victimSession.ID
	tok, _ := tokenFor(t, st, access.Grant{Role: access.RoleViewer, Projects: teamA}, time.Now().Add(time.Hour))
	f.victimToken = tok.ID

	r = callAt(t, g.admin, "POST", "/switchyard/keys", `{"name":"mine","project_id":"team-a","owner":"`+member.ID+`"}`)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	f.memberKey = gjson.GetBytes(r.Body, "key.id").Str
	return f
}

// concrete fills a route's pattern with the fixtures and gives it a body.
func (f *accessFixtures) concrete(pattern string) (method, path, body string) {
	method, path, _ = strings.Cut(pattern, " ")
	path = strings.NewReplacer(
		"/keys/{id}", "/keys/"+f.memberKey,
		"/projects/{id}", "/projects/team-a",
		"/tokens/{id}", "/tokens/"+f.victimToken,
		"/people/{id}", "/people/"+f.victimUser,
		"/sessions/{id}", "/sessions/"+f.victimSession,
		"{model}/{candidate}", "chat-a/main",
		"{client}", "codex",
	).Replace(path)
	switch pattern {
	case "POST /keys":
		body = `{"name":"made","project_id":"team-a"}`
	case "PUT /keys/{id}/limits", "PUT /projects/{id}/limits":
		body = `{"rpm":60}`
	case "PUT /keys/{id}/project":
		body = `{"project_id":"team-a"}`
	case "POST /projects":
		body = `{"id":"p-` + strconv.FormatInt(time.Now().UnixNano(), 36) + `"}`
	case "PUT /projects/{id}/members":
		body = `{"max_expiry":"720h"}`
	case "POST /tokens":
		body = `{"name":"made","role":"viewer","projects":["team-a"],"expires_in":"1d"}`
	case "GET /connect/{client}":
		path += "?base_url=http://127.0.0.1:1"
	}
	return method, path, body
}

// Every route of the console API, called as every role, as no one, with an ended
// session (expired, idle, of a disabled person), with a revoked or expired token and
// with a token out of its scope: each is allowed or refused as the table says, through
// the assembled gateway. A route missing from the table fails the test.
func TestEveryRouteAsEveryRole(t *testing.T) {
	g, db := startAccessGateway(t, "")
	f := makeAccessFixtures(t, g, db)

	routes := console.Routes()
	var patterns []string
	for _, rt := range routes {
		patterns = append(patterns, rt.Pattern)
		_, ok := allowedBy[rt.Pattern]
		assert.True(t, ok, "route %q has no entry in allowedBy: say who may call it", rt.Pattern)
	}
	for pattern := range allowedBy {
		assert.Contains(t, patterns, pattern, "allowedBy names a route the API does not serve")
	}
	// Reads first, then changes, and the changes that end things (a revoked key, a
	// disabled person) last, so every caller meets the same state.
	slices.SortStableFunc(routes, func(a, b console.Route) int { return changeOrder(a.Pattern) - changeOrder(b.Pattern) })
	for _, rt := range routes {
		allowed := strings.Fields(allowedBy[rt.Pattern])
		if slices.Contains(allowed, "live") {
			allowed = liveCallers
		}
		for _, caller := range tableCallers {
			method, path, body := f.concrete(rt.Pattern)
			r := callAt(t, g.base, method, "/console/api"+path, body, f.credentials[caller]...)
			refused := r.Status == http.StatusUnauthorized || r.Status == http.StatusForbidden
			if slices.Contains(allowed, caller) {
				assert.False(t, refused, "%s as %s: refused (%d %s)", rt.Pattern, caller, r.Status, r.Body)
				assert.Less(t, r.Status, 500, "%s as %s: %s", rt.Pattern, caller, r.Body)
			} else {
				assert.True(t, refused, "%s as %s: allowed (%d %s)", rt.Pattern, caller, r.Status, r.Body)
			}
		}
		// The operator's own door, Caddy's admin endpoint, serves every route.
		method, path, body := f.concrete(rt.Pattern)
		r := callAt(t, g.admin, method, "/switchyard"+path, body)
		assert.False(t, r.Status == http.StatusUnauthorized || r.Status == http.StatusForbidden, "%s on the admin endpoint: %d %s", rt.Pattern, r.Status, r.Body)
	}
}

// changeOrder sorts reads before changes, and the changes that end something last.
func changeOrder(pattern string) int {
	switch {
	case strings.HasPrefix(pattern, "GET "):
		return 0
	case strings.Contains(pattern, "revoke"), strings.HasPrefix(pattern, "DELETE "), strings.Contains(pattern, "disable"),
		strings.Contains(pattern, "rotate"):
		return 2
	}
	return 1
}
