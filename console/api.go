package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/limits"
	"github.com/switchyard-gw/switchyard/metering"
)

// ModelInfo is a model as operators see it: its candidates by name, never their upstream
// hosts, models or credentials.
type ModelInfo struct {
	ID           string          `json:"id"`
	DisplayName  string          `json:"display_name"`
	Protocols    []string        `json:"protocols"`
	Capabilities map[string]bool `json:"capabilities"`
	Candidates   []CandidateInfo `json:"candidates"`
	// ContextWindow and MaxOutputTokens are the limits the operator declared; zero
	// (left out) when none.
	ContextWindow   int64 `json:"context_window,omitempty"`
	MaxOutputTokens int64 `json:"max_output_tokens,omitempty"`
}

// CandidateInfo is one candidate of a model, with its live circuit state.
type CandidateInfo struct {
	Name     string `json:"name"`
	Protocol string `json:"protocol"`
	Priority int    `json:"priority"`
	State    string `json:"state"`
}

// API serves keys and models as JSON.
type API struct {
	Keys   *auth.Manager
	Models func() []ModelInfo
	// Usage answers usage queries; nil when the store keeps no usage.
	Usage metering.Reader
	// Requests lists the request log; nil when the store keeps none.
	Requests metering.RequestLog
	// Latency answers the Models view's latency per candidate; nil when the store keeps
	// no usage.
	Latency metering.LatencyReader
	// RequireHeader, when set, must be present on every request that changes something:
	// a browser cannot send a custom header to another site without that site agreeing,
	// so a page elsewhere cannot make a logged-in operator's browser create or revoke keys.
	RequireHeader string
	Now           func() time.Time
	// Standing is a scope's spend and remaining allowance under policy p; nil (or an
	// error) shows none.
	Standing func(ctx context.Context, scope limits.Scope, p *limits.Policy) (*limits.Status, error)
	// Authenticate says who is calling: a person's session, an API token, the
	// break-glass password. A nil principal with a nil error is no one (401); an error
	// that errors.Is access.ErrRefused is a credential refused (401 too, with its
	// reason); any other error is the sign-in store away (503). Nil Authenticate: every
	// call is the operator's (Caddy's admin endpoint).
	Authenticate func(r *http.Request) (*access.Principal, error)
	// People keeps people, sessions and API tokens; nil: this gateway has no sign-in
	// store, and those routes answer 503.
	People access.Store
	// SignIn says which doors the console has, for GET /me.
	SignIn SignInInfo
	// Settings is the console's sign-in settings as owners see them (never a secret);
	// nil (the admin endpoint, which serves no one console): GET /settings answers 404.
	Settings func() any
	// Alerts reads the configured webhooks and the latest deliveries (at most limit);
	// nil: alerts are not configured.
	Alerts func(ctx context.Context, limit int) (*AlertsView, error)
	// ResetHealth clears the live health of a model's candidate (every protocol it is
	// on), reporting false when the model has no candidate of that name; nil: no reset.
	ResetHealth func(model, candidate string) bool

	latency latencyCache
}

// ConsoleHeader is the header the web console sends with every change.
const ConsoleHeader = "X-Switchyard-Console"

// Handler routes the API (Routes lists every route and its action). Every call is
// decided before it is served: who is calling (Authenticate), whether their roles take
// the route's action, and, in the handler, whether they reach the resource. Every change
// is recorded in the audit trail with the caller as its actor.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range Routes() {
		mux.HandleFunc(rt.Pattern, a.guard(rt, rt.handle(a)))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such API route: "+r.Method+" "+r.URL.Path)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := access.Operator()
		if a.Authenticate != nil {
			var err error
			p, err = a.Authenticate(r)
			switch {
			case errors.Is(err, access.ErrRefused):
				a.signInAnswer(w, err.Error())
				return
			case err != nil:
				writeError(w, http.StatusServiceUnavailable, "who you are could not be checked (is the store reachable?); try again")
				return
			}
		}
		ctx := r.Context()
		if p != nil {
			ctx = access.WithPrincipal(auth.WithActor(ctx, p.Actor()), p)
		}
		mux.ServeHTTP(w, r.WithContext(ctx))
	})
}

func (a *API) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// KeyView is a key with its status at the time of the answer, its limits as operators
// write them, and, for an active key, its standing against them.
type KeyView struct {
	*auth.Key
	Status   string         `json:"status"`
	Limits   *limits.Policy `json:"limits,omitempty"`
	Standing *Standing      `json:"standing,omitempty"`
}

// view is k without its standing, for answers about a change.
func (a *API) view(k *auth.Key) KeyView {
	if k == nil {
		return KeyView{}
	}
	return KeyView{Key: k, Status: k.Status(a.now()), Limits: auth.NormalizeLimits(k.Limits)}
}

// viewStanding is k with its standing when it is active.
func (a *API) viewStanding(ctx context.Context, k *auth.Key) KeyView {
	v := a.view(k)
	if v.Status == "active" {
		v.Standing = a.standing(ctx, limits.ScopeKey, k.ID, k.Limits)
	}
	return v
}

// standing is a scope's standing and that of each of its per-model variants; nil when
// the API has no Standing or it failed (limits not enforced here, counters away).
func (a *API) standing(ctx context.Context, kind limits.ScopeKind, id string, p *limits.Policy) *Standing {
	if a.Standing == nil {
		return nil
	}
	st, err := a.Standing(ctx, limits.Scope{Kind: kind, ID: id}, p)
	if err != nil || st == nil {
		return nil
	}
	out := StandingOf(st)
	if p != nil {
		for model, v := range p.Models {
			if ms, err := a.Standing(ctx, limits.Scope{Kind: kind, ID: id, Model: model}, v); err == nil && ms != nil {
				if out.Models == nil {
					out.Models = map[string]*Standing{}
				}
				out.Models[model] = StandingOf(ms)
			}
		}
	}
	return out
}

func (a *API) listKeys(w http.ResponseWriter, r *http.Request) {
	keys, err := a.Keys.List(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	out := make([]KeyView, 0, len(keys))
	for _, k := range keys {
		if may(r.Context(), access.ActKeysRead, keyResource(k)) {
			out = append(out, a.viewStanding(r.Context(), k))
		}
	}
	writeJSON(w, http.StatusOK, KeysAnswer{Keys: out})
}

func (a *API) getKey(w http.ResponseWriter, r *http.Request) {
	k, ok := a.reachableKey(w, r, access.ActKeysRead)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, KeyAnswer{Key: a.viewStanding(r.Context(), k)})
}

type createBody struct {
	Name      string         `json:"name"`
	Models    []string       `json:"models"`
	ExpiresAt string         `json:"expires_at"` // RFC 3339
	ExpiresIn string         `json:"expires_in"` // a duration: 90m, 12h, 30d
	ProjectID string         `json:"project_id"`
	Limits    *limits.Policy `json:"limits"`
	// Owner is whose key it is: a person's user id or a service account
	// ("svc:<name>"); left out, the caller's own (a person) or none.
	Owner string `json:"owner"`
}

// modelExists checks the models named in per-model limits.
func (a *API) modelExists(id string) bool {
	return a.Keys.ModelExists == nil || a.Keys.ModelExists(id)
}

func (a *API) createKey(w http.ResponseWriter, r *http.Request) {
	var body createBody
	if !readJSON(w, r, &body) {
		return
	}
	name, err := auth.CheckKeyName(body.Name)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	policy, err := checkLimits(body.Limits, a.modelExists)
	if err != nil {
		writeError(w, http.StatusBadRequest, "limits."+err.Error())
		return
	}
	req := auth.CreateRequest{Name: name, Models: body.Models, ProjectID: strings.TrimSpace(body.ProjectID), Limits: policy}
	if req.ProjectID != "" {
		if err := auth.ValidateProjectID(req.ProjectID); err != nil {
			writeError(w, http.StatusBadRequest, "project_id: "+err.Error())
			return
		}
	}
	switch {
	case body.ExpiresAt != "" && body.ExpiresIn != "":
		writeError(w, http.StatusBadRequest, "give expires_at or expires_in, not both")
		return
	case body.ExpiresAt != "":
		t, err := time.Parse(time.RFC3339, body.ExpiresAt)
		if err != nil {
			writeError(w, http.StatusBadRequest, "expires_at: not an RFC 3339 time (for example 2027-01-31T00:00:00Z)")
			return
		}
		req.ExpiresAt = t
	case body.ExpiresIn != "":
		d, err := ParseDuration(body.ExpiresIn)
		if err != nil || d <= 0 {
			writeError(w, http.StatusBadRequest, "expires_in: not a positive duration (for example 12h or 30d)")
			return
		}
		req.ExpiresAt = a.now().Add(d)
	}
	if !a.decideNewKey(w, r, &req, body.Owner) {
		return
	}
	created, err := a.Keys.Create(r.Context(), req)
	if err != nil {
		a.failAbout(w, err, "a project")
		return
	}
	writeJSON(w, http.StatusCreated, KeyAnswer{Key: a.viewStanding(r.Context(), created.Key), Secret: created.Secret})
}

func (a *API) rotateKey(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Grace string `json:"grace"`
	}
	if r.ContentLength != 0 && !readJSON(w, r, &body) {
		return
	}
	var grace time.Duration
	if body.Grace != "" {
		d, err := ParseDuration(body.Grace)
		if err != nil || d < 0 {
			writeError(w, http.StatusBadRequest, "grace: not a duration (for example 0, 10m or 1d)")
			return
		}
		grace = d
	}
	if _, ok := a.reachableKey(w, r, access.ActKeysWrite); !ok {
		return
	}
	rotated, err := a.Keys.Rotate(r.Context(), r.PathValue("id"), grace)
	if err != nil {
		a.fail(w, err)
		return
	}
	replaced := a.view(rotated.Replaced)
	writeJSON(w, http.StatusCreated, KeyAnswer{Key: a.view(rotated.Key), Secret: rotated.Secret, Replaced: &replaced})
}

func (a *API) revokeKey(w http.ResponseWriter, r *http.Request) {
	if _, ok := a.reachableKey(w, r, access.ActKeysWrite); !ok {
		return
	}
	k, err := a.Keys.Revoke(r.Context(), r.PathValue("id"))
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, KeyAnswer{Key: a.view(k)})
}

func (a *API) listModels(w http.ResponseWriter, _ *http.Request) {
	models := []ModelInfo{}
	if a.Models != nil {
		models = a.Models()
	}
	writeJSON(w, http.StatusOK, ModelsAnswer{Models: models})
}

// resetHealth is POST /health/{model}/{candidate}/reset: the candidate takes traffic
// again at once, its circuit closed and its cooldown, pause and demotion forgotten. The
// audit trail records it first: a reset that could not be recorded is not made.
func (a *API) resetHealth(w http.ResponseWriter, r *http.Request) {
	model, name := r.PathValue("model"), r.PathValue("candidate")
	var found *CandidateInfo
	if a.ResetHealth != nil && a.Models != nil {
		for _, m := range a.Models() {
			for i, c := range m.Candidates {
				if m.ID == model && c.Name == name {
					found = &m.Candidates[i]
				}
			}
		}
	}
	if found == nil {
		writeError(w, http.StatusNotFound, "no candidate with that name in that model; GET /models lists them")
		return
	}
	detail := "health reset: circuit closed; cooldown, pause, failures and demotion cleared (was " + found.State + ")"
	if err := a.Keys.RecordChange(r.Context(), auth.ActionCandidateReset, model+"/"+name, detail); err != nil {
		writeError(w, http.StatusInternalServerError, "the reset could not be recorded in the audit trail (is the key store reachable?), so it was not made")
		return
	}
	if !a.ResetHealth(model, name) {
		writeError(w, http.StatusNotFound, "no candidate with that name in that model; GET /models lists them")
		return
	}
	answer := HealthResetAnswer{Model: model, Candidate: *found, Was: found.State}
	answer.Candidate.State = "closed"
	writeJSON(w, http.StatusOK, answer)
}

// queryUsage sums usage: ?from=YYYY-MM-DD&to=YYYY-MM-DD (to inclusive, UTC days;
// default the last 30 days), &key=<id>, &model=<id>, &owner=<usr_… or svc:name>,
// &group=day,key,model,candidate,channel,owner.
func (a *API) queryUsage(w http.ResponseWriter, r *http.Request) {
	if a.Usage == nil {
		writeError(w, http.StatusServiceUnavailable, "this gateway's store keeps no usage")
		return
	}
	q, err := a.usageQuery(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	rows, ok := a.reachUsage(w, r, q)
	if !ok {
		return
	}
	if rows == nil {
		rows = []metering.Row{}
	}
	writeJSON(w, http.StatusOK, UsageAnswer{
		From: q.From.Format(time.DateOnly), To: q.To.Add(-24 * time.Hour).Format(time.DateOnly),
		Group: q.GroupBy, Rows: rows, Total: metering.Total(rows),
	})
}

func (a *API) usageQuery(r *http.Request) (metering.Query, error) {
	v := r.URL.Query()
	today := a.now().UTC().Truncate(24 * time.Hour)
	q := metering.Query{From: today.AddDate(0, 0, -29), To: today.AddDate(0, 0, 1), KeyID: v.Get("key"), Model: v.Get("model"),
		Owner: v.Get("owner")}
	for name, dst := range map[string]*time.Time{"from": &q.From, "to": &q.To} {
		if s := v.Get(name); s != "" {
			d, err := time.Parse(time.DateOnly, s)
			if err != nil {
				return q, errors.New(name + ": not a YYYY-MM-DD date")
			}
			if name == "to" {
				d = d.AddDate(0, 0, 1) // the to day is included
			}
			*dst = d
		}
	}
	if !q.From.Before(q.To) {
		return q, errors.New("from: must not be after to")
	}
	if g := v.Get("group"); g != "" {
		for _, dim := range strings.Split(g, ",") {
			switch dim {
			case "day", "key", "model", "candidate", "channel", "owner":
				q.GroupBy = append(q.GroupBy, dim)
			default:
				return q, errors.New("group: " + dim + " is not day, key, model, candidate, channel or owner")
			}
		}
	}
	return q, nil
}

// fail maps an error to its status; a store failure is reported without its details,
// which may name hosts or paths.
func (a *API) fail(w http.ResponseWriter, err error) { a.failAbout(w, err, "") }

// failAbout is fail for a request that names something besides the key or project in
// its path (e.g. "a project" in a body): that thing not existing is the request's
// mistake, 400, not 404.
func (a *API) failAbout(w http.ResponseWriter, err error, named string) {
	var nf *auth.NotFoundError
	switch {
	case named != "" && auth.IsProjectNotFound(err):
		writeError(w, http.StatusBadRequest, "project_id: "+err.Error()+"; create the project first")
	case errors.As(err, &nf):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, auth.ErrNotFound):
		writeError(w, http.StatusNotFound, "no key with that id")
	case auth.IsInvalid(err):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, auth.ErrConflict):
		writeError(w, http.StatusConflict, "the key changed meanwhile (rotated or revoked elsewhere); reload and try again")
	default:
		writeError(w, http.StatusInternalServerError, "the key store could not complete the request; see the gateway's log")
	}
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		writeError(w, http.StatusUnsupportedMediaType, "send the request body as application/json")
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "the request body is not the expected JSON: "+err.Error())
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store") // answers may carry a secret shown once
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, message string) {
	writeJSON(w, status, ErrorAnswer{Error: message})
}

// ParseDuration reads a Go duration, or a whole number of days ("30d").
func ParseDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil {
			return 0, err
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}
