package console

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/limits"
)

// readLimits reads a request body that is a limits.Policy, or null ({} and null clear).
func (a *API) readLimits(w http.ResponseWriter, r *http.Request) (*limits.Policy, bool) {
	var body *limits.Policy
	if !readJSON(w, r, &body) {
		return nil, false
	}
	p, err := checkLimits(body, a.modelExists)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return nil, false
	}
	return p, true
}

// setKeyLimits is PUT /keys/{id}/limits: the body replaces the key's own limits.
func (a *API) setKeyLimits(w http.ResponseWriter, r *http.Request) {
	if _, ok := a.reachableKey(w, r, access.ActKeysGovern); !ok {
		return
	}
	p, ok := a.readLimits(w, r)
	if !ok {
		return
	}
	k, err := a.Keys.SetKeyLimits(r.Context(), r.PathValue("id"), p)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, KeyAnswer{Key: a.viewStanding(r.Context(), k)})
}

// setKeyProject is PUT /keys/{id}/project: {"project_id": "platform"}, or "" to take the
// key out of its project.
func (a *API) setKeyProject(w http.ResponseWriter, r *http.Request) {
	var body struct {
		ProjectID *string `json:"project_id"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	if body.ProjectID == nil {
		writeError(w, http.StatusBadRequest, `project_id: required; give "" to take the key out of its project`)
		return
	}
	id := strings.TrimSpace(*body.ProjectID)
	if id != "" {
		if err := auth.ValidateProjectID(id); err != nil {
			writeError(w, http.StatusBadRequest, "project_id: "+err.Error())
			return
		}
	}
	// Moving a key takes governing it where it is and where it goes.
	if _, ok := a.reachableKey(w, r, access.ActKeysGovern); !ok {
		return
	}
	if !may(r.Context(), access.ActKeysGovern, access.Resource{Project: id}) {
		refuse(w, "the project the key would move to")
		return
	}
	k, err := a.Keys.SetKeyProject(r.Context(), r.PathValue("id"), id)
	if err != nil {
		a.failAbout(w, err, "a project")
		return
	}
	writeJSON(w, http.StatusOK, KeyAnswer{Key: a.viewStanding(r.Context(), k)})
}

// ProjectView is a project with its limits as operators write them, its standing, and
// how many of its keys are active.
type ProjectView struct {
	*auth.Project
	Limits     *limits.Policy `json:"limits,omitempty"`
	Standing   *Standing      `json:"standing,omitempty"`
	ActiveKeys int            `json:"key_count"`
}

// ProjectDetail is a project with its keys (every status, newest first).
type ProjectDetail struct {
	ProjectView
	Keys []KeyView `json:"keys"`
}

func (a *API) projectView(r *http.Request, p *auth.Project, keys []*auth.Key) ProjectView {
	v := ProjectView{Project: p, Limits: auth.NormalizeLimits(p.Limits), Standing: a.standing(r.Context(), limits.ScopeProject, p.ID, p.Limits)}
	now := a.now()
	for _, k := range keys {
		if k.ProjectID == p.ID && k.Active(now) {
			v.ActiveKeys++
		}
	}
	return v
}

func (a *API) listProjects(w http.ResponseWriter, r *http.Request) {
	projects, err := a.Keys.ListProjects(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	keys, err := a.Keys.List(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	out := make([]ProjectView, 0, len(projects))
	for _, p := range projects {
		if may(r.Context(), access.ActProjectsRead, access.Resource{Project: p.ID}) {
			out = append(out, a.projectView(r, p, keys))
		}
	}
	writeJSON(w, http.StatusOK, ProjectsAnswer{Projects: out})
}

// answerProject answers with project id, its standing and its keys.
func (a *API) answerProject(w http.ResponseWriter, r *http.Request, status int, p *auth.Project) {
	keys, err := a.Keys.List(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	d := ProjectDetail{ProjectView: a.projectView(r, p, keys), Keys: []KeyView{}}
	for _, k := range keys {
		if k.ProjectID == p.ID && may(r.Context(), access.ActKeysRead, keyResource(k)) {
			d.Keys = append(d.Keys, a.viewStanding(r.Context(), k))
		}
	}
	writeJSON(w, status, ProjectAnswer{Project: d})
}

func (a *API) getProject(w http.ResponseWriter, r *http.Request) {
	if id := r.PathValue("id"); !may(r.Context(), access.ActProjectsRead, access.Resource{Project: id}) {
		refuse(w, "project "+id)
		return
	}
	p, err := a.Keys.GetProject(r.Context(), r.PathValue("id"))
	if err != nil {
		a.fail(w, err)
		return
	}
	a.answerProject(w, r, http.StatusOK, p)
}

func (a *API) createProject(w http.ResponseWriter, r *http.Request) {
	var body struct {
		ID     string         `json:"id"`
		Name   string         `json:"name"`
		Limits *limits.Policy `json:"limits"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	body.ID = strings.TrimSpace(body.ID)
	if err := auth.ValidateProjectID(body.ID); err != nil {
		writeError(w, http.StatusBadRequest, "id: "+err.Error())
		return
	}
	policy, err := checkLimits(body.Limits, a.modelExists)
	if err != nil {
		writeError(w, http.StatusBadRequest, "limits."+err.Error())
		return
	}
	name := strings.TrimSpace(body.Name)
	if name == "" {
		name = body.ID
	}
	if name, err = auth.CheckKeyName(name); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	p, err := a.Keys.CreateProject(r.Context(), auth.ProjectRequest{ID: body.ID, Name: name, Limits: policy})
	if errors.Is(err, auth.ErrConflict) {
		writeError(w, http.StatusConflict, "id: a project "+strconv.Quote(body.ID)+" exists already; choose another id")
		return
	}
	if err != nil {
		a.fail(w, err)
		return
	}
	a.answerProject(w, r, http.StatusCreated, p)
}

func (a *API) setProjectLimits(w http.ResponseWriter, r *http.Request) {
	if id := r.PathValue("id"); !may(r.Context(), access.ActProjectsGovern, access.Resource{Project: id}) {
		refuse(w, "project "+id)
		return
	}
	p, ok := a.readLimits(w, r)
	if !ok {
		return
	}
	project, err := a.Keys.SetProjectLimits(r.Context(), r.PathValue("id"), p)
	if err != nil {
		a.fail(w, err)
		return
	}
	a.answerProject(w, r, http.StatusOK, project)
}

// listAudit is GET /audit?limit=50&before=<id>: changes, newest first. "more" says
// whether older entries remain (ask again with before set to the last entry's id).
func (a *API) listAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, before := 50, int64(0)
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > auth.MaxAuditPage {
			writeError(w, http.StatusBadRequest, "limit: want a whole number from 1 to "+strconv.Itoa(auth.MaxAuditPage))
			return
		}
		limit = n
	}
	if s := q.Get("before"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, "before: want an entry id (a positive whole number) from an earlier page")
			return
		}
		before = n
	}
	entries, err := a.Keys.Audit(r.Context(), limit, before)
	if err != nil {
		a.fail(w, err)
		return
	}
	more := len(entries) == limit
	if more {
		older, err := a.Keys.Audit(r.Context(), 1, entries[len(entries)-1].ID)
		if err != nil {
			a.fail(w, err)
			return
		}
		more = len(older) > 0
	}
	if entries, err = a.reachAudit(r.Context(), entries); err != nil {
		a.fail(w, err)
		return
	}
	if entries == nil {
		entries = []*auth.AuditEntry{}
	}
	writeJSON(w, http.StatusOK, AuditAnswer{Entries: entries, More: more})
}
