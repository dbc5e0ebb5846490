package console

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/metering"
)

// Route is one route of the API and the action it takes: every route is in this one
// table, so none can be served without a decision (TestEveryRouteAsEveryRole walks it).
type Route struct {
	// Pattern is the method and path as net/http's ServeMux reads it ("GET /keys/{id}").
	Pattern string
	Action  access.Action
	handle  func(*API) http.HandlerFunc
}

// Changes reports whether the route changes something (anything but GET).
func (r Route) Changes() bool { return !strings.HasPrefix(r.Pattern, "GET ") }

// Routes is every route of the API, with its action. Handlers decide on each resource
// they touch (a key's project and owner) beyond the route's action.
func Routes() []Route {
	h := func(f func(*API, http.ResponseWriter, *http.Request)) func(*API) http.HandlerFunc {
		return func(a *API) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) { f(a, w, r) }
		}
	}
	return []Route{
		{"GET /me", access.ActSelf, h((*API).me)},
		{"GET /keys", access.ActKeysRead, h((*API).listKeys)},
		{"POST /keys", access.ActKeysWrite, h((*API).createKey)},
		{"GET /keys/{id}", access.ActKeysRead, h((*API).getKey)},
		{"POST /keys/{id}/rotate", access.ActKeysWrite, h((*API).rotateKey)},
		{"POST /keys/{id}/revoke", access.ActKeysWrite, h((*API).revokeKey)},
		{"DELETE /keys/{id}", access.ActKeysWrite, h((*API).revokeKey)},
		{"PUT /keys/{id}/limits", access.ActKeysGovern, h((*API).setKeyLimits)},
		{"PUT /keys/{id}/project", access.ActKeysGovern, h((*API).setKeyProject)},
		{"GET /projects", access.ActProjectsRead, h((*API).listProjects)},
		{"POST /projects", access.ActProjectsCreate, h((*API).createProject)},
		{"GET /projects/{id}", access.ActProjectsRead, h((*API).getProject)},
		{"PUT /projects/{id}/limits", access.ActProjectsGovern, h((*API).setProjectLimits)},
		{"PUT /projects/{id}/members", access.ActProjectsGovern, h((*API).setProjectMembers)},
		{"GET /audit", access.ActAuditRead, h((*API).listAudit)},
		{"GET /models", access.ActModelsRead, h((*API).listModels)},
		{"POST /health/{model}/{candidate}/reset", access.ActHealthReset, h((*API).resetHealth)},
		{"GET /usage", access.ActUsageRead, h((*API).queryUsage)},
		{"GET /requests", access.ActRequestsRead, h((*API).listRequests)},
		{"GET /latency", access.ActModelsRead, h((*API).queryLatency)},
		{"GET /connect/{client}", access.ActConnectRead, h((*API).connectSetup)},
		{"GET /alerts", access.ActAlertsRead, h((*API).listAlerts)},
		{"GET /tokens", access.ActTokensRead, h((*API).listTokens)},
		{"POST /tokens", access.ActTokensWrite, h((*API).createToken)},
		{"POST /tokens/{id}/revoke", access.ActTokensWrite, h((*API).revokeToken)},
		{"GET /people", access.ActPeopleRead, h((*API).listPeople)},
		{"POST /people/{id}/disable", access.ActPeopleWrite, h((*API).disablePerson)},
		{"POST /people/{id}/enable", access.ActPeopleWrite, h((*API).enablePerson)},
		{"GET /sessions", access.ActPeopleRead, h((*API).listSessions)},
		{"POST /sessions/{id}/revoke", access.ActPeopleWrite, h((*API).revokeSession)},
		{"GET /settings", access.ActSettingsRead, h((*API).settings)},
	}
}

// guard puts the route's decision in front of its handler: no principal is 401, a
// principal whose roles never take the action is 403, and a change that came with a
// credential the browser sends by itself (a session cookie, a basic-auth password)
// needs the console's header and must not come from another origin.
func (a *API) guard(rt Route, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := access.PrincipalOf(r.Context())
		if p == nil {
			a.signInAnswer(w, "sign in first")
			return
		}
		if rt.Changes() && ambient(p) {
			if a.RequireHeader != "" && r.Header.Get(a.RequireHeader) == "" {
				writeError(w, http.StatusForbidden, "changes need the "+a.RequireHeader+" header")
				return
			}
			if FromAnotherSite(r) {
				writeError(w, http.StatusForbidden, "a change from another site is refused")
				return
			}
		}
		if !takes(p, rt.Action) {
			writeError(w, http.StatusForbidden, "your role does not allow this ("+string(rt.Action)+")")
			return
		}
		next(w, r)
	}
}

// ambient reports whether p may have come with a credential a browser sends on its
// own: a session cookie, or a basic-auth password it remembers. Only an API token is
// surely sent by code that holds it.
func ambient(p *access.Principal) bool { return p.Kind != access.KindToken }

// FromAnotherSite reports a request a browser marked as coming from another site: its
// Sec-Fetch-Site says so, or its Origin is not this host. Every change made with a
// credential the browser sends by itself is refused when it holds.
func FromAnotherSite(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return true
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	return err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host)
}

// refuse answers 403 for a resource outside the principal's reach.
func refuse(w http.ResponseWriter, what string) {
	writeError(w, http.StatusForbidden, "your role does not reach "+what)
}

// keyResource is what a key is, for a decision.
func keyResource(k *auth.Key) access.Resource {
	return access.Resource{Project: k.ProjectID, Owner: k.Owner}
}

// principal is the caller of r (never nil past the guard).
func principal(ctx context.Context) *access.Principal { return access.PrincipalOf(ctx) }

// may reports whether the caller may take action on res.
func may(ctx context.Context, action access.Action, res access.Resource) bool {
	return principal(ctx).Decide(action, res)
}

// keyOwners maps every key to what it is for decisions, for filtering rows that name a
// key (usage, requests, audit).
func (a *API) keyResources(ctx context.Context) (map[string]access.Resource, error) {
	keys, err := a.Keys.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]access.Resource, len(keys))
	for _, k := range keys {
		out[k.ID] = keyResource(k)
	}
	return out, nil
}

// takes reports whether p's roles take action at all: somewhere for a project's
// action, everywhere for one that belongs to no project.
func takes(p *access.Principal, action access.Action) bool {
	if access.Global(action) {
		return p.Decide(action, access.Resource{})
	}
	return p.Can(action)
}

// canAll lists the actions p may take, for the console to show only what the API
// would allow.
func canAll(p *access.Principal) map[access.Action]bool {
	out := map[access.Action]bool{}
	for _, act := range access.Actions {
		if takes(p, act) {
			out[act] = true
		}
	}
	return out
}

// MeAnswer is GET /me: who is calling, what they may do, and how one signs in here.
type MeAnswer struct {
	Principal *access.Principal      `json:"principal"`
	Can       map[access.Action]bool `json:"can"`
	SignIn    SignInInfo             `json:"sign_in"`
}

// SignInInfo says which doors this console has, and where to sign in.
type SignInInfo struct {
	Provider   bool   `json:"provider"`
	BreakGlass bool   `json:"break_glass"`
	Login      string `json:"login"`
}

// signInDoors is the console's doors with the place to sign in (relative to it).
func (a *API) signInDoors() SignInInfo {
	doors := a.SignIn
	doors.Login = "auth/login"
	return doors
}

// signInAnswer is the 401 that tells the page how one signs in here.
func (a *API) signInAnswer(w http.ResponseWriter, message string) {
	doors := a.signInDoors()
	writeJSON(w, http.StatusUnauthorized, ErrorAnswer{Error: message, SignIn: &doors})
}

func (a *API) me(w http.ResponseWriter, r *http.Request) {
	p := principal(r.Context())
	shown := *p
	shown.Grants = slices.Clone(p.Grants)
	if shown.Grants == nil {
		shown.Grants = []access.Grant{}
	}
	writeJSON(w, http.StatusOK, MeAnswer{Principal: &shown, Can: canAll(p), SignIn: a.signInDoors()})
}

// reachableKey loads the key the path names and decides action on it: 404 when there is
// no such key, 403 when it is outside the caller's reach.
func (a *API) reachableKey(w http.ResponseWriter, r *http.Request, action access.Action) (*auth.Key, bool) {
	k, err := a.Keys.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		a.fail(w, err)
		return nil, false
	}
	if !may(r.Context(), action, keyResource(k)) {
		refuse(w, "key "+k.ID)
		return nil, false
	}
	return k, true
}

// maxOwnerLen bounds an owner id: a user id is 20 characters, a service account's name
// is a key name.
const maxOwnerLen = 120

// checkOwner reads an owner as a request names it: a person's user id ("usr_…") or a
// service account ("svc:<name>").
func checkOwner(owner string) (string, bool) {
	if len(owner) > maxOwnerLen {
		return "", false
	}
	if name, ok := strings.CutPrefix(owner, "svc:"); ok {
		n, err := auth.CheckKeyName(name)
		return "svc:" + n, err == nil
	}
	if id, ok := strings.CutPrefix(owner, "usr_"); ok && id != "" && !strings.ContainsFunc(id, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7')
	}) {
		return owner, true
	}
	return "", false
}

// decideNewKey decides a key about to be made and fills in what the caller's roles
// settle: its owner (the caller, when a person names none) and, for a member making
// their own key where they do not govern keys, the project's rules for members' keys
// (models, longest lifetime, the key's limits). It answers and reports false when the
// key may not be made.
func (a *API) decideNewKey(w http.ResponseWriter, r *http.Request, req *auth.CreateRequest, owner string) bool {
	ctx := r.Context()
	p := principal(ctx)
	if owner = strings.TrimSpace(owner); owner == "" {
		owner = p.Owner()
	} else if checked, ok := checkOwner(owner); ok {
		owner = checked
	} else {
		writeError(w, http.StatusBadRequest, `owner: a person's id ("usr_…") or a service account ("svc:<name>")`)
		return false
	}
	req.Owner = owner
	res := access.Resource{Project: req.ProjectID, Owner: owner}
	if !p.Decide(access.ActKeysWrite, res) {
		switch {
		case req.ProjectID == "":
			refuse(w, "keys outside a project; name one of your projects (project_id)")
		case owner != p.Owner():
			refuse(w, "keys of others in project "+req.ProjectID)
		default:
			refuse(w, "project "+req.ProjectID)
		}
		return false
	}
	if p.Decide(access.ActKeysGovern, access.Resource{Project: req.ProjectID}) {
		return true
	}
	// A member's own key: inside the rules the project sets for them.
	project, err := a.Keys.GetProject(ctx, req.ProjectID)
	if err != nil {
		a.failAbout(w, err, "a project")
		return false
	}
	rules := project.Members
	if rules == nil {
		refuse(w, "keys in project "+req.ProjectID+" yet: its admins have not set rules for members' keys")
		return false
	}
	if req.Limits != nil {
		writeError(w, http.StatusForbidden, "a member's key takes its limits from the project's rules; leave out limits")
		return false
	}
	req.Limits = rules.KeyLimits
	if len(rules.Models) > 0 {
		if len(req.Models) == 0 {
			req.Models = slices.Clone(rules.Models)
		}
		for _, m := range req.Models {
			if !slices.Contains(rules.Models, m) {
				writeError(w, http.StatusForbidden, "models: "+m+" is not among the models project "+req.ProjectID+" lets members' keys use")
				return false
			}
		}
	}
	if max := time.Duration(rules.MaxExpiry); max > 0 {
		latest := a.now().Add(max)
		if req.ExpiresAt.IsZero() {
			req.ExpiresAt = latest
		} else if req.ExpiresAt.After(latest) {
			writeError(w, http.StatusForbidden, "expires: project "+req.ProjectID+" lets members' keys live at most "+max.String())
			return false
		}
	}
	return true
}

// reachUsage narrows a usage query to what the caller reaches: the rows are summed per
// key as well, those of keys outside the reach are dropped, and the rest summed again
// by what was asked. It returns the rows, or an error answer already written.
func (a *API) reachUsage(w http.ResponseWriter, r *http.Request, q metering.Query) ([]metering.Row, bool) {
	ctx := r.Context()
	reach := principal(ctx).ReachOf(access.ActUsageRead)
	if reach.All {
		rows, err := a.Usage.QueryUsage(ctx, q)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "the usage query failed; see the gateway's log")
			return nil, false
		}
		return rows, true
	}
	keys, err := a.keyResources(ctx)
	if err != nil {
		a.fail(w, err)
		return nil, false
	}
	if q.KeyID != "" && !reach.Admits(keys[q.KeyID]) {
		refuse(w, "key "+q.KeyID)
		return nil, false
	}
	byKey := q
	askedKey := slices.Contains(q.GroupBy, "key")
	if !askedKey {
		byKey.GroupBy = append(slices.Clone(q.GroupBy), "key")
	}
	rows, err := a.Usage.QueryUsage(ctx, byKey)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "the usage query failed; see the gateway's log")
		return nil, false
	}
	var out []metering.Row
	at := map[metering.Row]int{} // a row's dimensions (sums zeroed) -> its place in out
	for _, row := range rows {
		res, known := keys[row.KeyID]
		if !known || !reach.Admits(res) {
			continue
		}
		if askedKey {
			out = append(out, row)
			continue
		}
		row.KeyID = ""
		if i, ok := at[row.Dims()]; ok {
			out[i].Add(row)
			continue
		}
		at[row.Dims()] = len(out)
		out = append(out, row)
	}
	return out, true
}

// reachRequests keeps the request log rows the caller reaches, each with its key's
// owner: a row is its key's owner's, in the project it was made in.
func (a *API) reachRequests(ctx context.Context, rows []metering.RequestRow) ([]metering.RequestRow, error) {
	if len(rows) == 0 {
		return rows, nil
	}
	reach := principal(ctx).ReachOf(access.ActRequestsRead)
	keys, err := a.keyResources(ctx)
	if err != nil {
		return nil, err
	}
	out := rows[:0]
	for _, row := range rows {
		row.Owner = keys[row.KeyID].Owner
		if reach.Admits(access.Resource{Project: row.ProjectID, Owner: row.Owner}) {
			out = append(out, row)
		}
	}
	return out, nil
}

// reachAudit keeps the audit entries the caller reaches: those about a key or a project
// in reach. Changes to health, people, sessions and tokens belong to no project and are
// seen by those whose roles reach every project.
func (a *API) reachAudit(ctx context.Context, entries []*auth.AuditEntry) ([]*auth.AuditEntry, error) {
	reach := principal(ctx).ReachOf(access.ActAuditRead)
	if reach.All {
		return entries, nil
	}
	keys, err := a.keyResources(ctx)
	if err != nil {
		return nil, err
	}
	out := entries[:0]
	for _, e := range entries {
		res, isKey := keys[e.Target]
		switch {
		case isKey:
		case strings.HasPrefix(e.Action, "project."):
			res = access.Resource{Project: e.Target}
		default:
			continue
		}
		if reach.Admits(res) {
			out = append(out, e)
		}
	}
	return out, nil
}
