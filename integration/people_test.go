package integration

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/store"
)

// peopleGateway is the console with sign-in (sessions made in its store, as a sign-in
// makes them) and project team-a, whose members may make keys for chat-a that live at
// most 30 days, with two requests a minute for all of one member's keys together.
type peopleGateway struct {
	*gateway
	st *store.Store
}

func startPeopleGateway(t *testing.T) *peopleGateway {
	t.Helper()
	g, db := startAccessGateway(t, "")
	st, err := store.Open(context.Background(), store.DriverSQLite, db)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	for _, p := range []string{"team-a", "team-b"} {
		r := callAt(t, g.admin, "POST", "/switchyard/projects", `{"id":"`+p+`"}`)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	}
	r := callAt(t, g.admin, "PUT", "/switchyard/projects/team-a/members",
		`{"models":["chat-a"],"max_expiry":"720h","limits":{"rpm":2}}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	return &peopleGateway{gateway: g, st: st}
}

func (g *peopleGateway) console(t *testing.T, method, path, body string, who []string, more ...string) *result {
	t.Helper()
	return callAt(t, g.base, method, "/console/api"+path, body, append(append([]string{}, who...), more...)...)
}

// A member makes keys only as their own, in their project, inside its rules; sees only
// their own keys and requests (each named with its owner); and all their keys together
// are held to the project's member limits. The audit trail names the person.
func TestAMemberMakesOwnKeysInsideTheProjectsRules(t *testing.T) {
	g := startPeopleGateway(t)
	member := []access.Grant{{Role: access.RoleMember, Projects: []string{"team-a"}}}
	mia, _, asMia := signedIn(t, g.st, "mia", member, nil)
	other, _, asOther := signedIn(t, g.st, "oli", member, nil)

	r := g.console(t, "POST", "/keys", `{"name":"laptop","project_id":"team-a"}`, asMia)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	first := gjson.GetBytes(r.Body, "key")
	assert.Equal(t, mia.ID, first.Get("owner").Str, "a member's key is their own")
	assert.Equal(t, `["chat-a"]`, first.Get("models").Raw, "the project's models for members")
	expires, err := time.Parse(time.RFC3339Nano, first.Get("expires_at").Str)
	require.NoError(t, err, "a member's key gets the project's longest lifetime: %s", r.Body)
	assert.WithinDuration(t, time.Now().Add(720*time.Hour), expires, time.Minute)
	secretOne := gjson.GetBytes(r.Body, "secret").Str

	for name, c := range map[string]struct {
		body   string
		status int
	}{
		"outside their project":   {`{"name":"x","project_id":"team-b"}`, http.StatusForbidden},
		"in no project":           {`{"name":"x"}`, http.StatusForbidden},
		"for someone else":        {`{"name":"x","project_id":"team-a","owner":"` + other.ID + `"}`, http.StatusForbidden},
		"with limits of its own":  {`{"name":"x","project_id":"team-a","limits":{"rpm":1000}}`, http.StatusForbidden},
		"living past the rules":   {`{"name":"x","project_id":"team-a","expires_in":"60d"}`, http.StatusForbidden},
		"for a model not allowed": {`{"name":"x","project_id":"team-a","models":["other"]}`, http.StatusForbidden},
	} {
		r := g.console(t, "POST", "/keys", c.body, asMia)
		assert.Equal(t, c.status, r.Status, "%s: %s", name, r.Body)
	}
	r = g.console(t, "POST", "/keys", `{"name":"desktop","project_id":"team-a","expires_in":"1d"}`, asMia)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	secretTwo := gjson.GetBytes(r.Body, "secret").Str
	r = g.console(t, "POST", "/keys", `{"name":"oli's","project_id":"team-a"}`, asOther)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	otherKey := gjson.GetBytes(r.Body, "key.id").Str
	secretOther := gjson.GetBytes(r.Body, "secret").Str

	// Nothing refused was made: mia has her two keys and sees only them.
	r = g.console(t, "GET", "/keys", "", asMia)
	require.Equal(t, http.StatusOK, r.Status)
	var names []string
	for _, k := range gjson.GetBytes(r.Body, "keys").Array() {
		names = append(names, k.Get("name").Str)
	}
	assert.ElementsMatch(t, []string{"laptop", "desktop"}, names)
	assert.Equal(t, http.StatusForbidden, g.console(t, "POST", "/keys/"+otherKey+"/revoke", "", asMia).Status)

	// Two requests a minute for all of mia's keys together: the second key shares the
	// first's allowance; oli's key has its own.
	chat := `{"model":"chat-a","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`
	assert.Equal(t, http.StatusOK, g.call(t, "POST", "/v1/chat/completions", chat, "Authorization", "Bearer "+secretOne).Status)
	assert.Equal(t, http.StatusOK, g.call(t, "POST", "/v1/chat/completions", chat, "Authorization", "Bearer "+secretTwo).Status)
	refused := g.call(t, "POST", "/v1/chat/completions", chat, "Authorization", "Bearer "+secretOne)
	assert.Equal(t, http.StatusTooManyRequests, refused.Status, "%s", refused.Body)
	assert.Contains(t, gjson.GetBytes(refused.Body, "error.message").Str, "your keys' (together, in this project)")
	assert.Equal(t, http.StatusOK, g.call(t, "POST", "/v1/chat/completions", chat, "Authorization", "Bearer "+secretOther).Status)

	// Her requests, named with her as their owner; none of oli's.
	require.Eventually(t, func() bool {
		r := g.console(t, "GET", "/requests", "", asMia)
		return len(gjson.GetBytes(r.Body, "requests").Array()) == 3
	}, 10*time.Second, 50*time.Millisecond, "mia's three requests (two served, one refused) reach the log")
	r = g.console(t, "GET", "/requests", "", asMia)
	for _, row := range gjson.GetBytes(r.Body, "requests").Array() {
		assert.Equal(t, mia.ID, row.Get("owner").Str, "%s", row.Raw)
	}
	r = callAt(t, g.admin, "GET", "/switchyard/requests", "")
	assert.Len(t, gjson.GetBytes(r.Body, "requests").Array(), 4, "the operator sees everyone's")

	// A project admin's usage by owner: one row per person, not their sum.
	_, _, asLead := signedIn(t, g.st, "lea", []access.Grant{{Role: access.RoleProjectAdmin, Projects: []string{"team-a"}}}, nil)
	byOwner := map[string]int64{}
	require.Eventually(t, func() bool {
		r := g.console(t, "GET", "/usage?group=owner", "", asLead)
		clear(byOwner)
		for _, row := range gjson.GetBytes(r.Body, "rows").Array() {
			byOwner[row.Get("owner").Str] += row.Get("requests").Int()
		}
		return byOwner[mia.ID]+byOwner[other.ID] == 3
	}, 10*time.Second, 50*time.Millisecond, "the served requests reach the ledger")
	assert.Equal(t, map[string]int64{mia.ID: 2, other.ID: 1}, byOwner)

	// The audit trail names the person and where they came from.
	r = callAt(t, g.admin, "GET", "/switchyard/audit", "")
	assert.Contains(t, string(r.Body), `"actor":"user mia@example.com (sub sub-mia) from 127.0.0.1","action":"key.create"`)
}

// A change that comes with a session cookie needs the console's header and must not
// come from another site; an API token, which a browser never sends by itself, needs
// neither. Signing out is a change too.
func TestChangesFromAnotherSiteAreRefused(t *testing.T) {
	g := startPeopleGateway(t)
	_, _, asAdmin := signedIn(t, g.st, "ada", []access.Grant{{Role: access.RoleAdmin}}, nil)
	cookie := asAdmin[:2]
	_, token := tokenFor(t, g.st, access.Grant{Role: access.RoleAdmin}, time.Now().Add(time.Hour))
	body := `{"name":"forged","project_id":"team-a"}`

	for name, headers := range map[string][]string{
		"without the console header": cookie,
		"from another origin":        append(append([]string{}, asAdmin...), "Origin", "https://evil.example"),
		"marked cross-site":          append(append([]string{}, asAdmin...), "Sec-Fetch-Site", "cross-site"),
		"from a sibling site":        append(append([]string{}, asAdmin...), "Sec-Fetch-Site", "same-site"),
		"with a lookalike origin":    append(append([]string{}, asAdmin...), "Origin", g.base+".evil.example"),
		"with a null origin":         append(append([]string{}, asAdmin...), "Origin", "null"),
	} {
		r := g.console(t, "POST", "/keys", body, headers)
		assert.Equal(t, http.StatusForbidden, r.Status, "%s: %s", name, r.Body)
	}
	r := g.console(t, "GET", "/keys", "", asAdmin)
	assert.Equal(t, "[]", gjson.GetBytes(r.Body, "keys").Raw, "nothing refused was made")

	r = g.console(t, "POST", "/keys", body, asAdmin, "Origin", g.base, "Sec-Fetch-Site", "same-origin")
	assert.Equal(t, http.StatusCreated, r.Status, "the console's own page: %s", r.Body)
	r = g.console(t, "POST", "/keys", `{"name":"ci","project_id":"team-a"}`, token, "Origin", "https://evil.example")
	assert.Equal(t, http.StatusCreated, r.Status, "a token is not a browser's ambient credential: %s", r.Body)

	// Signing out from another site is refused and the session lives on.
	out := callAt(t, g.base, "POST", "/console/auth/logout", "", append(append([]string{}, asAdmin...), "Origin", "https://evil.example")...)
	assert.Equal(t, http.StatusForbidden, out.Status)
	assert.Equal(t, http.StatusOK, g.console(t, "GET", "/me", "", asAdmin).Status)
	out = callAt(t, g.base, "POST", "/console/auth/logout", "", asAdmin...)
	assert.Equal(t, http.StatusNoContent, out.Status)
	assert.Equal(t, http.StatusUnauthorized, g.console(t, "GET", "/me", "", asAdmin).Status, "the session ended")
}

// An API token is shown once, reaches no further than whoever made it, and drives the
// CLI against the console's API on the site as the admin endpoint does.
func TestAnAPITokenDrivesTheCLIWithinItsScope(t *testing.T) {
	g := startPeopleGateway(t)
	_, _, asLead := signedIn(t, g.st, "lea", []access.Grant{{Role: access.RoleProjectAdmin, Projects: []string{"team-a"}}}, nil)

	r := g.console(t, "POST", "/tokens", `{"name":"pipeline","role":"admin"}`, asLead)
	assert.Equal(t, http.StatusForbidden, r.Status, "a project admin cannot make an admin token: %s", r.Body)
	r = g.console(t, "POST", "/tokens", `{"name":"pipeline","role":"project_admin","projects":["team-b"]}`, asLead)
	assert.Equal(t, http.StatusForbidden, r.Status, "nor one for another project: %s", r.Body)
	r = g.console(t, "POST", "/tokens", `{"name":"pipeline","role":"project_admin","projects":["team-a"],"expires_in":"7d"}`, asLead)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	secret := gjson.GetBytes(r.Body, "secret").Str
	require.True(t, strings.HasPrefix(secret, access.TokenPrefix), "%s", r.Body)
	r = g.console(t, "GET", "/tokens", "", asLead)
	assert.NotContains(t, string(r.Body), secret, "a token is shown once")
	assert.Equal(t, "pipeline", gjson.GetBytes(r.Body, "tokens.0.name").Str)

	caddy := buildCaddyCLI(t)
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		cmd := caddy(append([]string{"switchyard"}, args...)...)
		cmd.Env = append(cmd.Environ(), "SWITCHYARD_TOKEN="+secret, "SWITCHYARD_CONSOLE="+g.base+"/console")
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	out, err := run("keys", "create", "--name", "from-ci", "--project", "team-a")
	require.NoError(t, err, out)
	assert.Contains(t, out, "sk-sy-")
	out, err = run("keys", "list")
	require.NoError(t, err, out)
	assert.Contains(t, out, "from-ci")
	out, err = run("keys", "create", "--name", "elsewhere", "--project", "team-b")
	require.Error(t, err, "outside the token's projects: %s", out)
	assert.Contains(t, out, "HTTP 403")
	assert.NotContains(t, out, secret, "the CLI never prints the token")
	out, err = run("projects", "create", "new-one")
	require.Error(t, err, out)

	// The project's rules for members' keys, from the CLI: replaced as a whole.
	out, err = run("projects", "members", "team-a", "--models", "chat-a", "--max-expiry", "240h", "--member-rpm", "3",
		"--key-budget", "5/day", "--departed", "revoke", "--revoke-after", "168h")
	require.NoError(t, err, out)
	assert.Contains(t, out, "members:    may make keys; models chat-a; living at most 240h0m0s")
	r = callAt(t, g.admin, "GET", "/switchyard/projects/team-a", "")
	members := gjson.GetBytes(r.Body, "project.members")
	assert.Equal(t, `["chat-a"]`, members.Get("models").Raw)
	assert.Equal(t, "240h0m0s", members.Get("max_expiry").Str)
	assert.Equal(t, int64(3), members.Get("limits.rpm").Int())
	assert.Equal(t, "5/day", members.Get("key_limits.budget").Str)
	assert.Equal(t, "revoke", members.Get("departed").Str)
	out, err = run("projects", "members", "team-b", "--models", "chat-a")
	require.Error(t, err, "another project's rules: %s", out)
	out, err = run("projects", "members", "team-a", "--none")
	require.NoError(t, err, out)
	assert.Contains(t, out, "members:    may make no keys")
	r = callAt(t, g.admin, "GET", "/switchyard/projects/team-a", "")
	assert.False(t, gjson.GetBytes(r.Body, "project.members").Exists(), "%s", r.Body)

	// The audit trail names the token.
	r = callAt(t, g.admin, "GET", "/switchyard/audit", "")
	assert.Contains(t, string(r.Body), `(pipeline) from 127.0.0.1","action":"key.create"`)
}
