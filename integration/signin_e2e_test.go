package integration

// Signing in to the console through a real OpenID provider, in Chromium: the provider
// (integration/oidcprovider, zitadel's op) runs as its own process, the gateway's
// console is configured with sign_in and a role mapping, and console/signin.mjs signs in
// four people, each in a fresh browser context: the redirect to the provider (on another
// site than the gateway), its login form, the callback, the session cookie, and then
// what each role sees. A member makes a
// key for Codex in two clicks and it works on the gateway; a project admin sees their
// project's keys and its rules for members; a viewer sees and changes nothing; a person
// in no mapped group is refused. What the browser saw is asserted here, and what the
// sign-ins left in the store is read back through Caddy's admin endpoint.

import (
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

	"github.com/switchyard-gw/switchyard/auth"
)

// The people of the sign-in test, as the provider knows them.
var signInPeople = []idpUser{
	{Username: "mia", Password: "mia-pass-3k9", Subject: "sub-mia", Email: "mia@example.test", EmailVerified: true, Name: "Mia Member", Groups: []string{"eng-a"}},
	{Username: "leo", Password: "leo-pass-7q2", Subject: "sub-leo", Email: "leo@example.test", EmailVerified: true, Name: "Leo Lead", Groups: []string{"leads-a"}},
	{Username: "vic", Password: "vic-pass-5m1", Subject: "sub-vic", Email: "vic@example.test", EmailVerified: true, Name: "Vic Viewer", Groups: []string{"audit-a"}},
	{Username: "nora", Password: "nora-pass-8z4", Subject: "sub-nora", Email: "nora@example.test", EmailVerified: true, Name: "Nora Nobody", Groups: []string{"other"}},
}

// Keys made through the admin endpoint before anyone signs in: one of a service account
// in team-a, one in team-b; and the name the member gives hers in the page.
const (
	signInSvcKey    = "ci-pipeline"
	signInTeamBKey  = "team-b-service"
	signInMemberKey = "mia-codex"
)

// signInPerson is what signin.mjs reports for one person. It never holds a secret: the
// key the member makes is tried by the script, which reports only the answer's status.
type signInPerson struct {
	Username        string `json:"username"`
	SignInViewShown bool   `json:"signin_view_shown"`
	ProviderOrigin  string `json:"provider_origin"`
	ProviderPath    string `json:"provider_path"`
	WrongPassword   *struct {
		Status        int  `json:"status"`
		ErrorShown    bool `json:"error_shown"`
		OnProvider    bool `json:"on_provider"`
		SessionCookie bool `json:"session_cookie"`
	} `json:"wrong_password"`
	CallbackStatus int    `json:"callback_status"`
	LandedOrigin   string `json:"landed_origin"`
	LandedPath     string `json:"landed_path"`
	LandedSearch   string `json:"landed_search"`
	// A person with a role.
	Whoami       string   `json:"whoami"`
	WhoamiEmail  string   `json:"whoami_email"`
	WhoamiRoles  string   `json:"whoami_roles"`
	MeStatus     int      `json:"me_status"`
	Nav          []string `json:"nav"`
	Keys         []string `json:"keys"`
	Projects     []string `json:"projects"`
	NewKeyButton bool     `json:"new_key_button"`
	CreateForm   bool     `json:"create_form"`
	Buttons      struct {
		Rotate         int `json:"rotate"`
		Revoke         int `json:"revoke"`
		Limits         int `json:"limits"`
		ProjectMembers int `json:"project_members"`
		ProjectLimits  int `json:"project_limits"`
	} `json:"buttons"`
	Cookie struct {
		Present          bool   `json:"present"`
		HTTPOnly         bool   `json:"http_only"`
		SameSite         string `json:"same_site"`
		Secure           bool   `json:"secure"`
		Path             string `json:"path"`
		InDocumentCookie bool   `json:"in_document_cookie"`
		StateCookieLeft  bool   `json:"state_cookie_left"`
	} `json:"cookie"`
	NewKey *struct {
		State            string   `json:"state"`
		SecretShape      bool     `json:"secret_shape"`
		SetupShown       bool     `json:"setup_shown"`
		SetupHoldsSecret bool     `json:"setup_holds_secret"`
		ModelsStatus     int      `json:"models_status"`
		SecretGone       bool     `json:"secret_gone_after_close"`
		OwnerShown       string   `json:"owner_shown"`
		KeysAfter        []string `json:"keys_after"`
	} `json:"new_key"`
	SignOut *struct {
		SignInView      bool `json:"signin_view"`
		MeStatus        int  `json:"me_status"`
		CookieLeft      bool `json:"cookie_left"`
		OldCookieStatus int  `json:"old_cookie_status"`
	} `json:"sign_out"`
	// A person in no mapped group.
	Refusal *struct {
		Title         string `json:"title"`
		Text          string `json:"text"`
		SessionCookie bool   `json:"session_cookie"`
		SignInView    bool   `json:"signin_view"`
		MeStatus      int    `json:"me_status"`
	} `json:"refusal"`
	PageErrors      []string `json:"page_errors"`
	ConsoleErrors   []string `json:"console_errors"`
	FailedResponses []string `json:"failed_responses"` // "<status> <method> <path>"
}

type signInReport struct {
	browserReport
	People []signInPerson `json:"people"`
}

func (r *signInReport) person(t *testing.T, name string) signInPerson {
	t.Helper()
	for _, p := range r.People {
		if p.Username == name {
			return p
		}
	}
	t.Fatalf("signin.mjs reported nothing for %s", name)
	return signInPerson{}
}

// startSignInGateway runs the provider and the gateway whose console signs in through
// it: the provider must know the callback's address, which has the gateway's port, so
// it is started once that port is chosen. The gateway is reached as localhost and the
// provider as 127.0.0.1: two sites, as a company's provider and its gateway are, so the
// browser treats the provider's redirect back as coming from another site (which the
// sign-in's state cookie must survive, and a SameSite=Strict cookie would not).
func startSignInGateway(t *testing.T) (*gateway, *idp) {
	t.Helper()
	buildOIDCProvider(t) // outside the port's window
	up := newUpstream(t)
	db := filepath.Join(t.TempDir(), "keys.db")
	a := "http://" + up.hostport() + "/v1"
	models := "\t\tmodel chat-a {\n\t\t\tprotocols family_a\n\t\t\tprice input 2.5 output 10\n" +
		candidate("main", "family_a", a, upstreamPrefix+"-a") + "\t\t}\n"
	var provider *idp
	ports, caddyfile := startCaddy(t, 2, func(ports []int) string {
		site := "http://localhost:" + strconv.Itoa(ports[0])
		callback := site + "/console/auth/callback"
		provider = startOIDCProvider(t, idpConfig{
			Users:   signInPeople,
			Clients: []idpClient{{ClientID: "switchyard-console", ClientSecret: "console-secret-4d1", RedirectURIs: []string{callback}}},
		})
		return "{\n\tadmin 127.0.0.1:" + strconv.Itoa(ports[1]) + "\n\tdefault_bind 127.0.0.1\n" +
			"\tswitchyard {\n\t\tstore sqlite " + db + "\n" + models + "\t}\n}\n" +
			site + " {\n" +
			"\thandle_path /console/* {\n" +
			"\t\tswitchyard_console {\n" +
			"\t\t\tsign_in {\n\t\t\t\tissuer " + provider.Issuer + "\n\t\t\t\tclient_id switchyard-console\n" +
			"\t\t\t\tclient_secret console-secret-4d1\n\t\t\t\tredirect_url " + callback + "\n\t\t\t}\n" +
			"\t\t\trole member group eng-a projects team-a\n" +
			"\t\t\trole project_admin group leads-a projects team-a\n" +
			"\t\t\trole viewer group audit-a projects team-a\n" +
			"\t\t\tbreak_glass off\n" +
			"\t\t}\n\t}\n" +
			"\thandle {\n\t\tswitchyard_auth\n\t\tswitchyard_model\n\t\tswitchyard_proxy\n\t}\n" +
			"\thandle_errors {\n\t\tswitchyard_errors\n\t}\n}\n"
	})
	g := &gateway{base: "http://localhost:" + strconv.Itoa(ports[0]), admin: "http://127.0.0.1:" + strconv.Itoa(ports[1]), up: up, caddyfile: caddyfile}
	g.waitReady(t)
	return g, provider
}

func TestSignInThroughProviderInBrowser(t *testing.T) {
	node := needBrowser(t)
	g, provider := startSignInGateway(t)

	// The operator's set-up, on the admin endpoint: two projects, team-a's rules for
	// members' keys, a service account's key in team-a and a key in team-b.
	for _, p := range []string{"team-a", "team-b"} {
		r := callAt(t, g.admin, "POST", "/switchyard/projects", `{"id":"`+p+`"}`)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	}
	r := callAt(t, g.admin, "PUT", "/switchyard/projects/team-a/members", `{"max_expiry":"720h"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r = callAt(t, g.admin, "POST", "/switchyard/keys", `{"name":"`+signInSvcKey+`","project_id":"team-a","owner":"svc:ci"}`)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	r = callAt(t, g.admin, "POST", "/switchyard/keys", `{"name":"`+signInTeamBKey+`","project_id":"team-b"}`)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)

	// Who signs in, in this order, and what the script does besides looking: mia makes
	// a key (so that the lead and the viewer see it), leo first types a wrong password,
	// vic signs out at the end.
	type script struct {
		Username      string `json:"username"`
		Password      string `json:"password"`
		WrongPassword bool   `json:"wrong_password,omitempty"`
		MakeKey       string `json:"make_key,omitempty"`
		SignOut       bool   `json:"sign_out,omitempty"`
	}
	plan := []script{
		{Username: "mia", MakeKey: signInMemberKey},
		{Username: "leo", WrongPassword: true},
		{Username: "vic", SignOut: true},
		{Username: "nora"},
	}
	for i := range plan {
		for _, u := range signInPeople {
			if u.Username == plan[i].Username {
				plan[i].Password = u.Password
			}
		}
	}
	var rep signInReport
	runBrowserScript(t, node, "signin.mjs", g, 2*time.Minute, &rep,
		"SY_IDP_ISSUER="+provider.Issuer, "SY_GATEWAY_URL="+g.base, "SY_PEOPLE="+string(mustJSON(t, plan)))

	require.Len(t, rep.People, len(plan), "signin.mjs did not report on everyone")
	for _, p := range rep.People {
		t.Run(p.Username+" goes through the provider and back", func(t *testing.T) {
			assert.True(t, p.SignInViewShown, "the console did not show its sign-in view to a fresh browser")
			assert.Equal(t, provider.Issuer, p.ProviderOrigin, "Sign in did not lead to the provider")
			assert.Equal(t, idpLoginPath, p.ProviderPath, "Sign in did not lead to the provider's form")
			assert.Equal(t, g.base, p.LandedOrigin, "after the provider's form the browser is not back on the gateway")
			assert.Empty(t, p.PageErrors, "uncaught errors in the page")
			for _, e := range p.ConsoleErrors {
				if strings.HasSuffix(e, " at "+provider.Issuer+"/favicon.ico") {
					continue // the provider's pages have no icon: its business, not the console's
				}
				// The only errors the console may log are the refusals the test provokes:
				// api/me without a session, and the callback refusing a person without a role.
				assert.Regexp(t, `status of (401|403)`, e, "unexpected console error; the answers >= 400: %q", p.FailedResponses)
			}
		})
	}

	signedIn := func(t *testing.T, p signInPerson, email, roles string) {
		t.Helper()
		assert.Equal(t, http.StatusFound, p.CallbackStatus, "the callback did not send the browser on")
		assert.Equal(t, "/console/", p.LandedPath, "the callback did not bring the browser back to the console")
		assert.NotContains(t, p.LandedSearch, "code=", "the provider's code stays in the address bar")
		assert.NotContains(t, p.LandedSearch, "state=", "the sign-in's state stays in the address bar")
		assert.Equal(t, http.StatusOK, p.MeStatus, "api/me does not know the person just signed in")
		assert.Equal(t, email, p.WhoamiEmail)
		assert.Contains(t, p.Whoami, email, "the top bar does not name the person")
		assert.Equal(t, roles, p.WhoamiRoles)
		assert.True(t, p.Cookie.Present, "no session cookie in the browser")
		assert.True(t, p.Cookie.HTTPOnly, "the session cookie is not HttpOnly")
		assert.Equal(t, "Strict", p.Cookie.SameSite, "the session cookie's SameSite")
		assert.Equal(t, "/", p.Cookie.Path)
		assert.False(t, p.Cookie.Secure, "a Secure cookie on plain http would never come back")
		assert.False(t, p.Cookie.InDocumentCookie, "the page's script can read the session cookie")
		assert.False(t, p.Cookie.StateCookieLeft, "the sign-in's state cookie outlives the callback")
		for _, hidden := range []string{"people", "settings", "alerts"} {
			assert.NotContains(t, p.Nav, hidden, "%s is in the navigation of a %s of one project", hidden, roles)
		}
		assert.NotContains(t, p.Keys, signInTeamBKey, "a key of another project is listed")
		assert.NotContains(t, p.Projects, "team-b", "another project is listed")
	}

	t.Run("a member sees only her own keys and makes one for Codex in two clicks", func(t *testing.T) {
		mia := rep.person(t, "mia")
		signedIn(t, mia, "mia@example.test", "member")
		assert.Equal(t, []string{"keys", "projects", "models", "usage", "requests", "connect"}, mia.Nav)
		assert.Empty(t, mia.Keys, "a member sees keys that are not hers")
		assert.True(t, mia.NewKeyButton, "a member has no New key")
		assert.False(t, mia.CreateForm, "a member sees the full create form of those who govern keys")
		assert.Zero(t, mia.Buttons.Limits, "a member may not set a key's limits")
		assert.Zero(t, mia.Buttons.ProjectMembers+mia.Buttons.ProjectLimits, "a member may not govern the project")
		require.NotNil(t, mia.NewKey, "the member made no key")
		assert.Equal(t, "ready", mia.NewKey.State, "the New key dialog did not get to its set-up")
		assert.True(t, mia.NewKey.SecretShape, "the dialog shows no sk-sy- secret")
		assert.True(t, mia.NewKey.SetupShown, "the dialog shows no set-up")
		assert.False(t, mia.NewKey.SetupHoldsSecret, "the set-up holds the secret")
		assert.Equal(t, http.StatusOK, mia.NewKey.ModelsStatus, "the key made in the page does not work on the gateway")
		assert.True(t, mia.NewKey.SecretGone, "the secret stays in the page after the dialog is closed")
		assert.Equal(t, []string{signInMemberKey}, mia.NewKey.KeysAfter, "after making a key a member sees exactly it")
		assert.Equal(t, "mia@example.test", mia.NewKey.OwnerShown, "the key's owner is not shown as her")
		assert.Nil(t, mia.SignOut)
	})

	t.Run("a project admin sees the project's keys and its rules for members", func(t *testing.T) {
		leo := rep.person(t, "leo")
		require.NotNil(t, leo.WrongPassword, "the wrong password was not tried")
		assert.Equal(t, http.StatusUnauthorized, leo.WrongPassword.Status, "the provider accepted a wrong password")
		assert.True(t, leo.WrongPassword.ErrorShown, "the provider's form shows no error")
		assert.True(t, leo.WrongPassword.OnProvider, "a wrong password left the provider")
		assert.False(t, leo.WrongPassword.SessionCookie, "a wrong password made a session")
		signedIn(t, leo, "leo@example.test", "project_admin")
		assert.ElementsMatch(t, []string{signInSvcKey, signInMemberKey}, leo.Keys, "a project admin sees the project's keys")
		assert.Equal(t, []string{"team-a"}, leo.Projects)
		// API tokens too: a project admin's reach within the project (access.matrix).
		assert.Equal(t, []string{"keys", "projects", "models", "usage", "requests", "connect", "audit", "tokens"}, leo.Nav)
		assert.Equal(t, 1, leo.Buttons.ProjectMembers, "a project admin has no Members… for the project")
		assert.True(t, leo.NewKeyButton, "a project admin may make keys")
		assert.Equal(t, 2, leo.Buttons.Rotate, "a project admin may rotate the project's keys")
	})

	t.Run("a viewer sees the project and changes nothing", func(t *testing.T) {
		vic := rep.person(t, "vic")
		signedIn(t, vic, "vic@example.test", "viewer")
		assert.ElementsMatch(t, []string{signInSvcKey, signInMemberKey}, vic.Keys, "a viewer sees the project's keys")
		assert.Equal(t, []string{"team-a"}, vic.Projects)
		// The project's audit trail, and no alerts: those are the whole gateway's.
		assert.Equal(t, []string{"keys", "projects", "models", "usage", "requests", "connect", "audit"}, vic.Nav)
		assert.False(t, vic.NewKeyButton, "a viewer is offered New key")
		assert.False(t, vic.CreateForm, "a viewer is offered the create form")
		assert.Zero(t, vic.Buttons.Rotate+vic.Buttons.Revoke+vic.Buttons.Limits, "a viewer is offered a change to a key")
		assert.Zero(t, vic.Buttons.ProjectMembers+vic.Buttons.ProjectLimits, "a viewer is offered a change to the project")
	})

	t.Run("signing out ends the session, not only the cookie", func(t *testing.T) {
		out := rep.person(t, "vic").SignOut
		require.NotNil(t, out, "nobody signed out")
		assert.True(t, out.SignInView, "after Sign out the sign-in view is not shown")
		assert.Equal(t, http.StatusUnauthorized, out.MeStatus, "api/me still answers after Sign out")
		assert.False(t, out.CookieLeft, "the session cookie is still in the browser")
		assert.Equal(t, http.StatusUnauthorized, out.OldCookieStatus, "the ended session's cookie still works when sent again")
	})

	t.Run("a person in no mapped group is refused", func(t *testing.T) {
		nora := rep.person(t, "nora")
		require.NotNil(t, nora.Refusal, "nora was not refused")
		assert.Equal(t, http.StatusForbidden, nora.CallbackStatus)
		assert.Equal(t, "/console/auth/callback", nora.LandedPath)
		assert.Equal(t, "You have no role here", nora.Refusal.Title)
		assert.Contains(t, nora.Refusal.Text, "nora@example.test")
		assert.False(t, nora.Refusal.SessionCookie, "a person without a role got a session cookie")
		assert.True(t, nora.Refusal.SignInView, "the console shows her more than its sign-in view")
		assert.Equal(t, http.StatusUnauthorized, nora.Refusal.MeStatus)
		assert.Empty(t, nora.Whoami)
	})

	t.Run("the store has the people, the member's key as hers, and the sign-ins audited", func(t *testing.T) {
		people := callAt(t, g.admin, "GET", "/switchyard/people", "")
		require.Equal(t, http.StatusOK, people.Status, "%s", people.Body)
		ids := map[string]string{}
		for _, u := range gjson.GetBytes(people.Body, "people").Array() {
			ids[u.Get("email").Str] = u.Get("id").Str
		}
		mia := ids["mia@example.test"]
		require.NotEmpty(t, mia, "mia is not among the people: %s", people.Body)
		assert.NotContains(t, ids, "nora@example.test", "a person without a role is kept")
		assert.Len(t, ids, 3)

		keys := callAt(t, g.admin, "GET", "/switchyard/keys", "")
		require.Equal(t, http.StatusOK, keys.Status, "%s", keys.Body)
		var made gjson.Result
		for _, k := range gjson.GetBytes(keys.Body, "keys").Array() {
			if k.Get("name").Str == signInMemberKey {
				require.False(t, made.Exists(), "two keys named %s", signInMemberKey)
				made = k
			}
		}
		require.True(t, made.Exists(), "the key made in the page is not in the store: %s", keys.Body)
		assert.Equal(t, "team-a", made.Get("project_id").Str)
		assert.Equal(t, mia, made.Get("owner").Str, "the key made in the page is not owned by the person who made it")
		expires, err := time.Parse(time.RFC3339Nano, made.Get("expires_at").Str)
		require.NoError(t, err, "the member's key has no expiry, though the project caps it at 720h")
		assert.WithinDuration(t, time.Now().Add(720*time.Hour), expires, 5*time.Minute, "the member's key is not capped by the project's rules")

		audit := callAt(t, g.admin, "GET", "/switchyard/audit?limit=200", "")
		require.Equal(t, http.StatusOK, audit.Status, "%s", audit.Body)
		var signIns, signOuts, created []string
		for _, e := range gjson.GetBytes(audit.Body, "entries").Array() {
			switch e.Get("action").Str {
			case auth.ActionSignIn:
				signIns = append(signIns, e.Get("actor").Str)
			case auth.ActionSignOut:
				signOuts = append(signOuts, e.Get("actor").Str)
			case auth.ActionKeyCreate:
				if e.Get("target").Str == made.Get("id").Str {
					created = append(created, e.Get("actor").Str)
				}
			}
		}
		// One sign-in each for mia, leo and vic: leo's wrong password and nora's refusal
		// made none.
		require.Len(t, signIns, 3, "session.sign_in entries: %q", signIns)
		for _, who := range []string{"mia@example.test", "leo@example.test", "vic@example.test"} {
			assert.Equal(t, 1, countContaining(signIns, who), "sign-ins naming %s: %q", who, signIns)
		}
		assert.Contains(t, signIns, "user mia@example.test (sub sub-mia) from 127.0.0.1", "the actor names the person and where she came from")
		require.Len(t, signOuts, 1, "session.sign_out entries: %q", signOuts)
		assert.Contains(t, signOuts[0], "vic@example.test")
		require.Len(t, created, 1, "key.create entries for the key made in the page: %q", created)
		assert.Contains(t, created[0], "mia@example.test", "the key's creation does not name the person")

		// The sessions left: mia's and leo's; vic's ended with Sign out.
		sessions := callAt(t, g.admin, "GET", "/switchyard/sessions", "")
		require.Equal(t, http.StatusOK, sessions.Status, "%s", sessions.Body)
		var owners []string
		for _, s := range gjson.GetBytes(sessions.Body, "sessions").Array() {
			owners = append(owners, s.Get("user_id").Str)
		}
		slices.Sort(owners)
		want := []string{mia, ids["leo@example.test"]}
		slices.Sort(want)
		assert.Equal(t, want, owners, "the live sessions")
	})
}
