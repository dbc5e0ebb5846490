package console

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/auth"
)

// API tokens live at most this long, and a year when the caller says nothing shorter:
// a token is for a pipeline, and a pipeline's secret should be renewed.
const (
	maxTokenLifetime     = 366 * 24 * time.Hour
	defaultTokenLifetime = 90 * 24 * time.Hour
)

// TokensAnswer is GET /tokens: the tokens the caller could have made.
type TokensAnswer struct {
	Tokens []*TokenView `json:"tokens"`
}

// TokenView is a token and its state.
type TokenView struct {
	*access.Token
	Status string `json:"status"`
}

// TokenAnswer is a token made (with its secret, shown this once) or revoked.
type TokenAnswer struct {
	Token  *TokenView `json:"token"`
	Secret string     `json:"secret,omitempty"`
}

// PeopleAnswer is GET /people.
type PeopleAnswer struct {
	People []*access.User `json:"people"`
}

// SessionsAnswer is GET /sessions: sessions that have not ended.
type SessionsAnswer struct {
	Sessions []*access.Session `json:"sessions"`
}

func (a *API) tokenView(t *access.Token) *TokenView {
	status := "active"
	switch now := a.now(); {
	case !t.RevokedAt.IsZero():
		status = "revoked"
	case !now.Before(t.ExpiresAt):
		status = "expired"
	}
	return &TokenView{Token: t, Status: status}
}

// people answers 503 and reports false when there is no people store.
func (a *API) people(w http.ResponseWriter) bool {
	if a.People == nil {
		writeError(w, http.StatusServiceUnavailable, "this gateway keeps no people or tokens (it needs a key store: switchyard { store ... })")
		return false
	}
	return true
}

// tokens lists every token, or answers why it cannot and reports false.
func (a *API) tokens(w http.ResponseWriter, r *http.Request) ([]*access.Token, bool) {
	if !a.people(w) {
		return nil, false
	}
	tokens, err := a.People.ListTokens(r.Context())
	if err != nil {
		a.fail(w, err)
		return nil, false
	}
	return tokens, true
}

func (a *API) listTokens(w http.ResponseWriter, r *http.Request) {
	tokens, ok := a.tokens(w, r)
	if !ok {
		return
	}
	p := principal(r.Context())
	out := []*TokenView{}
	for _, t := range tokens {
		// A caller sees the tokens it could have made, and so may revoke.
		if p.MayGive(t.Grant) {
			out = append(out, a.tokenView(t))
		}
	}
	writeJSON(w, http.StatusOK, TokensAnswer{Tokens: out})
}

func (a *API) createToken(w http.ResponseWriter, r *http.Request) {
	if !a.people(w) {
		return
	}
	var body struct {
		Name      string   `json:"name"`
		Role      string   `json:"role"`
		Projects  []string `json:"projects"`
		ExpiresIn string   `json:"expires_in"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	name, err := auth.CheckKeyName(body.Name)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	grant := access.Grant{Role: access.Role(body.Role), Projects: body.Projects}
	for _, id := range grant.Projects {
		if err := auth.ValidateProjectID(id); err != nil {
			writeError(w, http.StatusBadRequest, "projects: "+err.Error())
			return
		}
	}
	if err := grant.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !principal(r.Context()).MayGive(grant) {
		writeError(w, http.StatusForbidden, "a token cannot reach further than you do: your roles do not cover "+describeGrant(grant))
		return
	}
	lifetime := defaultTokenLifetime
	if body.ExpiresIn != "" {
		d, err := ParseDuration(body.ExpiresIn)
		if err != nil || d <= 0 || d > maxTokenLifetime {
			writeError(w, http.StatusBadRequest, "expires_in: a duration from 1m to 366d (for example 30d)")
			return
		}
		lifetime = d
	}
	secret := access.NewSecret(access.TokenPrefix)
	now := a.now()
	t := &access.Token{
		ID: access.NewID("tok_"), Name: name, Prefix: secret[:len(access.TokenPrefix)+6], Hash: access.HashSecret(secret),
		Grant: grant, CreatedBy: auth.ActorOf(r.Context()), CreatedAt: now, ExpiresAt: now.Add(lifetime),
	}
	detail := name + ": " + describeGrant(grant) + ", expires " + t.ExpiresAt.UTC().Format(time.RFC3339)
	if err := a.People.CreateToken(r.Context(), t, a.Keys.NewAuditEntry(r.Context(), auth.ActionTokenCreate, t.ID, detail)); err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, TokenAnswer{Token: a.tokenView(t), Secret: secret})
}

func describeGrant(g access.Grant) string {
	if len(g.Projects) == 0 {
		return "role " + string(g.Role) + " over every project"
	}
	return "role " + string(g.Role) + " over " + strings.Join(g.Projects, ", ")
}

func (a *API) revokeToken(w http.ResponseWriter, r *http.Request) {
	tokens, ok := a.tokens(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	for _, t := range tokens {
		if t.ID != id {
			continue
		}
		if !principal(r.Context()).MayGive(t.Grant) {
			refuse(w, "this token")
			return
		}
		now := a.now()
		if t.RevokedAt.IsZero() {
			if err := a.People.RevokeToken(r.Context(), id, now, a.Keys.NewAuditEntry(r.Context(), auth.ActionTokenRevoke, id, t.Name)); err != nil {
				a.fail(w, err)
				return
			}
			t.RevokedAt = now
		}
		writeJSON(w, http.StatusOK, TokenAnswer{Token: a.tokenView(t)})
		return
	}
	writeError(w, http.StatusNotFound, "no token with that id")
}

func (a *API) listPeople(w http.ResponseWriter, r *http.Request) {
	if !a.people(w) {
		return
	}
	users, err := a.People.ListUsers(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	if users == nil {
		users = []*access.User{}
	}
	writeJSON(w, http.StatusOK, PeopleAnswer{People: users})
}

// PersonAnswer is a person after a change.
type PersonAnswer struct {
	Person *access.User `json:"person"`
}

func (a *API) disablePerson(w http.ResponseWriter, r *http.Request) {
	a.changePerson(w, r, func(ctx context.Context, id string) error {
		e := a.Keys.NewAuditEntry(ctx, auth.ActionUserDisable, id, "disabled in the console; their sessions end")
		return a.People.DisableUser(ctx, id, "disabled by "+auth.ActorOf(ctx), a.now(), e)
	})
}

func (a *API) enablePerson(w http.ResponseWriter, r *http.Request) {
	a.changePerson(w, r, func(ctx context.Context, id string) error {
		return a.People.EnableUser(ctx, id, a.Keys.NewAuditEntry(ctx, auth.ActionUserEnable, id, "may sign in again"))
	})
}

func (a *API) changePerson(w http.ResponseWriter, r *http.Request, change func(ctx context.Context, id string) error) {
	if !a.people(w) {
		return
	}
	id := r.PathValue("id")
	if _, err := a.People.GetUser(r.Context(), id); err != nil {
		a.failPeople(w, err, "person")
		return
	}
	if err := change(r.Context(), id); err != nil {
		a.failPeople(w, err, "person")
		return
	}
	u, err := a.People.GetUser(r.Context(), id)
	if err != nil {
		a.failPeople(w, err, "person")
		return
	}
	writeJSON(w, http.StatusOK, PersonAnswer{Person: u})
}

func (a *API) failPeople(w http.ResponseWriter, err error, what string) {
	if errors.Is(err, access.ErrNotFound) {
		writeError(w, http.StatusNotFound, "no "+what+" with that id")
		return
	}
	a.fail(w, err)
}

func (a *API) listSessions(w http.ResponseWriter, r *http.Request) {
	if !a.people(w) {
		return
	}
	sessions, err := a.People.ListSessions(r.Context(), a.now())
	if err != nil {
		a.fail(w, err)
		return
	}
	if sessions == nil {
		sessions = []*access.Session{}
	}
	writeJSON(w, http.StatusOK, SessionsAnswer{Sessions: sessions})
}

func (a *API) revokeSession(w http.ResponseWriter, r *http.Request) {
	if !a.people(w) {
		return
	}
	id := r.PathValue("id")
	e := a.Keys.NewAuditEntry(r.Context(), auth.ActionSessionEnd, id, "ended in the console")
	now := a.now()
	if err := a.People.RevokeSession(r.Context(), id, now, e); err != nil {
		a.failPeople(w, err, "session")
		return
	}
	writeJSON(w, http.StatusOK, SessionAnswer{Session: &access.Session{ID: id, RevokedAt: now}})
}

// SessionAnswer is a session after it was ended.
type SessionAnswer struct {
	Session *access.Session `json:"session"`
}

func (a *API) settings(w http.ResponseWriter, _ *http.Request) {
	if a.Settings == nil {
		writeError(w, http.StatusNotFound, "no sign-in settings here: they are the console's, at its api/settings")
		return
	}
	writeJSON(w, http.StatusOK, a.Settings())
}

// setProjectMembers is PUT /projects/{id}/members: the body (auth.MemberRules, or null)
// replaces the project's rules for its members' keys.
func (a *API) setProjectMembers(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !may(r.Context(), access.ActProjectsGovern, access.Resource{Project: id}) {
		refuse(w, "project "+id)
		return
	}
	var rules *auth.MemberRules
	if !readJSON(w, r, &rules) {
		return
	}
	p, err := a.Keys.SetProjectMembers(r.Context(), id, rules)
	if err != nil {
		a.fail(w, err)
		return
	}
	a.answerProject(w, r, http.StatusOK, p)
}
