package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/console"
	"github.com/switchyard-gw/switchyard/limits"
	"github.com/switchyard-gw/switchyard/store"
)

// newLimitsAPI is the API over a fresh SQLite store with projects, for models "m" and
// "sim-gpt"; api is returned to set Standing and Authenticate before use.
func newLimitsAPI(t *testing.T) (*console.API, http.Handler) {
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite", filepath.Join(t.TempDir(), "keys.db"))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	cache, err := auth.NewCache(ctx, st)
	require.NoError(t, err)
	api := &console.API{Keys: &auth.Manager{Store: st, Projects: st, Cache: cache,
		ModelExists: func(id string) bool { return id == "m" || id == "sim-gpt" }}}
	return api, console.New(api)
}

// Limits are written and read back the way operators write them, budgets included, and
// what limits nothing clears them.
func TestLimitsRoundTripAsWritten(t *testing.T) {
	_, h := newLimitsAPI(t)
	id := gjson.Get(do(h, "POST", "/api/keys", `{"name":"k"}`).Body.String(), "key.id").Str
	require.NotEmpty(t, id)
	const written = `{"rpm":60,"tpm":100000,"concurrency":4,"budget":"50/month","models":{"sim-gpt":{"budget":"5/day"}}}`
	w := do(h, "PUT", "/api/keys/"+id+"/limits", written)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.JSONEq(t, written, gjson.Get(w.Body.String(), "key.limits").Raw)
	assert.JSONEq(t, written, gjson.Get(do(h, "GET", "/api/keys/"+id, "").Body.String(), "key.limits").Raw)

	for _, empty := range []string{`{}`, `null`, `{"rpm":0,"budget":"none","models":{"m":{}}}`} {
		require.Equal(t, http.StatusOK, do(h, "PUT", "/api/keys/"+id+"/limits", written).Code)
		w := do(h, "PUT", "/api/keys/"+id+"/limits", empty)
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		assert.False(t, gjson.Get(w.Body.String(), "key.limits").Exists(), "%s limits nothing", empty)
	}
}

func TestLimitsAPIRefusesBadLimitsSayingHowToFixThem(t *testing.T) {
	_, h := newLimitsAPI(t)
	id := gjson.Get(do(h, "POST", "/api/keys", `{"name":"k"}`).Body.String(), "key.id").Str
	require.NotEmpty(t, id)
	for _, c := range []struct{ body, want string }{
		{`{"budget":"50/week"}`, "budget: want <amount>/<day|month|total>, e.g. 50/month"},
		{`{"budget":"fifty/month"}`, "budget: want <amount>/<day|month|total>"},
		{`{"budget":"50"}`, "budget: want <amount>/<day|month|total>"},
		{`{"budget":"0.0000001/day"}`, "at most six decimals"},
		{`{"rpm":-1}`, "rpm must not be negative"},
		{`{"budget":""}`, `budget: empty; want <amount>/<day|month|total>, e.g. "50/month" (leave it out, or "none", for no budget)`},
		{`{"models":{"m":{"budget":""}}}`, "models.m.budget: empty"},
		{`{"tpm":9223372036854775807}`, "tpm 9223372036854775807 is more than the most it may be, 1000000000000"},
		{`{"rpm":1000000000001}`, "rpm 1000000000001 is more than the most it may be"},
		{`{"concurrency":1000000000001}`, "concurrency 1000000000001 is more than the most it may be"},
		{`{"budget":"1000000001/month"}`, "more than the most a budget may be, 1000000000"},
		{`{"models":{"nope":{"budget":"1/day"}}}`, `models: "nope" is not a model of this gateway`},
		{`{"models":{"m":{"budget":"1/fortnight"}}}`, "models.m.budget: want"},
		{`{"models":{"m":{"models":{"m":{"rpm":1}}}}}`, "cannot have per-model limits of its own"},
		{`{"rpm":"60"}`, "not the expected JSON"},
		{`{"colour":"blue"}`, "colour"},
	} {
		w := do(h, "PUT", "/api/keys/"+id+"/limits", c.body)
		assert.Equal(t, http.StatusBadRequest, w.Code, c.body)
		assert.Contains(t, gjson.Get(w.Body.String(), "error").Str, c.want, c.body)
	}
	w := do(h, "POST", "/api/keys", `{"name":"x","limits":{"budget":"5/week"}}`)
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.Contains(t, gjson.Get(w.Body.String(), "error").Str, "budget: want")
	w = do(h, "POST", "/api/projects", `{"id":"Bad Id"}`)
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.Contains(t, gjson.Get(w.Body.String(), "error").Str, "e.g. platform")
	// Nothing refused was recorded or changed.
	assert.Empty(t, gjson.Get(do(h, "GET", "/api/keys/"+id, "").Body.String(), "key.limits").Raw)
}

// A project with a budget, a key created in it with its own limits, moved out and back,
// its limits changed and cleared: each answer shows what is stored, as written, and the
// audit trail records every change with who made it.
func TestProjectsKeysLimitsAndTheAuditTrail(t *testing.T) {
	api, h := newLimitsAPI(t)
	api.Authenticate = func(r *http.Request) (*access.Principal, error) {
		if name := r.Header.Get("X-Test-Actor"); name != "" {
			return &access.Principal{Kind: access.KindBreakGlass, ID: name, Grants: []access.Grant{{Role: access.RoleOwner}}}, nil
		}
		return access.Operator(), nil
	}
	as := func(actor string) []string { return []string{"X-Test-Actor", actor} }

	w := do(h, "POST", "/api/projects", `{"id":"platform","name":"Platform team","limits":{"budget":"50/month","rpm":600}}`, as("ana")...)
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	assert.Equal(t, "50/month", gjson.Get(w.Body.String(), "project.limits.budget").Str)
	assert.Equal(t, "Platform team", gjson.Get(w.Body.String(), "project.name").Str)
	assert.Equal(t, http.StatusConflict, do(h, "POST", "/api/projects", `{"id":"platform"}`).Code)

	w = do(h, "POST", "/api/keys", `{"name":"ci","project_id":"nowhere"}`)
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.Contains(t, gjson.Get(w.Body.String(), "error").Str, "create it first")

	w = do(h, "POST", "/api/keys", `{"name":"ci","project_id":"platform","limits":{"budget":"5/day","concurrency":2,"models":{"sim-gpt":{"budget":"1/day"}}}}`, as("ana")...)
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	key := gjson.Get(w.Body.String(), "key")
	id := key.Get("id").Str
	assert.Equal(t, "platform", key.Get("project_id").Str)
	assert.JSONEq(t, `{"budget":"5/day","concurrency":2,"models":{"sim-gpt":{"budget":"1/day"}}}`, key.Get("limits").Raw)
	assert.False(t, key.Get("standing").Exists(), "no Standing: none shown")

	// The project lists its key; the key list shows project and limits.
	w = do(h, "GET", "/api/projects/platform", "")
	require.Equal(t, 200, w.Code, w.Body.String())
	assert.Equal(t, []any{id}, gjson.Get(w.Body.String(), "project.keys.#.id").Value())
	assert.Equal(t, int64(1), gjson.Get(w.Body.String(), "project.key_count").Int())
	list := do(h, "GET", "/api/keys", "").Body.String()
	assert.Equal(t, "platform", gjson.Get(list, "keys.0.project_id").Str)
	assert.Equal(t, "5/day", gjson.Get(list, "keys.0.limits.budget").Str)
	assert.Equal(t, http.StatusNotFound, do(h, "GET", "/api/projects/nowhere", "").Code)

	// Out of the project and back; a project that does not exist is the caller's mistake.
	w = do(h, "PUT", "/api/keys/"+id+"/project", `{"project_id":""}`)
	require.Equal(t, 200, w.Code, w.Body.String())
	assert.False(t, gjson.Get(w.Body.String(), "key.project_id").Exists())
	w = do(h, "PUT", "/api/keys/"+id+"/project", `{"project_id":"nowhere"}`)
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.Contains(t, gjson.Get(w.Body.String(), "error").Str, "create it first")
	assert.Equal(t, http.StatusBadRequest, do(h, "PUT", "/api/keys/"+id+"/project", `{}`).Code, "project_id is required")
	require.Equal(t, 200, do(h, "PUT", "/api/keys/"+id+"/project", `{"project_id":"platform"}`, as("bo")...).Code)
	assert.Equal(t, http.StatusNotFound, do(h, "PUT", "/api/keys/key_nope/project", `{"project_id":""}`).Code)

	// The key's limits replaced, then cleared with {} and with null.
	w = do(h, "PUT", "/api/keys/"+id+"/limits", `{"budget":"0.000001/day"}`, as("bo")...)
	require.Equal(t, 200, w.Code, w.Body.String())
	assert.JSONEq(t, `{"budget":"0.000001/day"}`, gjson.Get(w.Body.String(), "key.limits").Raw)
	for _, clear := range []string{`{}`, `null`} {
		require.Equal(t, 200, do(h, "PUT", "/api/keys/"+id+"/limits", `{"rpm":5}`).Code)
		w = do(h, "PUT", "/api/keys/"+id+"/limits", clear)
		require.Equal(t, 200, w.Code, w.Body.String())
		assert.False(t, gjson.Get(w.Body.String(), "key.limits").Exists(), "%s clears the limits", clear)
		assert.False(t, gjson.Get(do(h, "GET", "/api/keys/"+id, "").Body.String(), "key.limits").Exists(), "%s clears the limits", clear)
	}
	w = do(h, "PUT", "/api/projects/platform/limits", `{"tpm":1000}`)
	require.Equal(t, 200, w.Code, w.Body.String())
	assert.JSONEq(t, `{"tpm":1000}`, gjson.Get(w.Body.String(), "project.limits").Raw)
	assert.Equal(t, http.StatusNotFound, do(h, "PUT", "/api/projects/nowhere/limits", `{}`).Code)

	// The audit trail, newest first, with the actor of each change.
	w = do(h, "GET", "/api/audit", "")
	require.Equal(t, 200, w.Code, w.Body.String())
	var got struct {
		Entries []auth.AuditEntry `json:"entries"`
		More    bool              `json:"more"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &got))
	var seen []string
	for _, e := range got.Entries {
		seen = append(seen, e.Actor+" "+e.Action+" "+e.Target)
		assert.WithinDuration(t, time.Now(), e.At, time.Minute)
	}
	assert.Equal(t, []string{
		"admin API project.limits platform",
		"admin API key.limits " + id, // null
		"admin API key.limits " + id, // rpm 5
		"admin API key.limits " + id, // {}
		"admin API key.limits " + id, // rpm 5
		"break-glass bo key.limits " + id,
		"break-glass bo key.project " + id,
		"admin API key.project " + id,
		"break-glass ana key.create " + id,
		"break-glass ana project.create platform",
	}, seen)
	assert.False(t, got.More)
	assert.Contains(t, got.Entries[5].Detail, "0.000001/day")
	assert.Contains(t, got.Entries[0].Detail, "1000")

	// Paging back: two at a time until no more.
	var paged []int64
	before := ""
	for i := 0; i < 10; i++ {
		w = do(h, "GET", "/api/audit?limit=2"+before, "")
		require.Equal(t, 200, w.Code, w.Body.String())
		ids := gjson.Get(w.Body.String(), "entries.#.id").Array()
		for _, v := range ids {
			paged = append(paged, v.Int())
		}
		if !gjson.Get(w.Body.String(), "more").Bool() {
			break
		}
		before = "&before=" + strconv.FormatInt(paged[len(paged)-1], 10)
	}
	var all []int64
	for _, e := range got.Entries {
		all = append(all, e.ID)
	}
	assert.Equal(t, all, paged)
	for _, q := range []string{"limit=0", "limit=x", "limit=100000", "before=-1", "before=x"} {
		assert.Equal(t, http.StatusBadRequest, do(h, "GET", "/api/audit?"+q, "").Code, q)
	}
}

// A key's standing is shown as operators read it: amounts as decimals and exactly in
// micro-units, the budget as written, what is left of each rate, each per-model
// variant's own; none when the limiter cannot say (here for projects), nor for a
// revoked key.
func TestStandingShownAsOperatorsReadIt(t *testing.T) {
	api, h := newLimitsAPI(t)
	reset := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var asked []string
	api.Standing = func(_ context.Context, scope limits.Scope, p *limits.Policy) (*limits.Status, error) {
		asked = append(asked, scope.String())
		if scope.Kind == limits.ScopeProject {
			return nil, errors.New("counters away")
		}
		st := &limits.Status{Scope: scope.String(), SpentMicros: 1_250_000, ReservedMicros: 300_000, ResetAt: reset,
			Requests: &limits.Allowance{Limit: 60, Remaining: 57, Reset: 20 * time.Second}}
		if p != nil {
			st.Policy = *p
		}
		if scope.Model != "" {
			st.SpentMicros, st.ReservedMicros, st.Requests = 10, 0, nil
		}
		if st.Policy.Budget != nil {
			left := max(0, st.Policy.Budget.Micros-st.SpentMicros-st.ReservedMicros)
			st.RemainingMicros = &left
		}
		return st, nil
	}
	require.Equal(t, http.StatusCreated, do(h, "POST", "/api/projects", `{"id":"p","limits":{"budget":"1/day"}}`).Code)
	w := do(h, "POST", "/api/keys", `{"name":"k","project_id":"p","limits":{"budget":"50/month","rpm":60,"models":{"sim-gpt":{"budget":"5/day"}}}}`)
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	id := gjson.Get(w.Body.String(), "key.id").Str

	st := gjson.Get(do(h, "GET", "/api/keys/"+id, "").Body.String(), "key.standing")
	require.True(t, st.Exists())
	assert.Equal(t, "50/month", st.Get("budget").Str)
	assert.Equal(t, "1.25", st.Get("spent").Str)
	assert.Equal(t, int64(1_250_000), st.Get("spent_micros").Int())
	assert.Equal(t, "0.3", st.Get("reserved").Str)
	assert.Equal(t, "48.45", st.Get("remaining").Str)
	assert.Equal(t, int64(48_450_000), st.Get("remaining_micros").Int())
	assert.Equal(t, reset.Format(time.RFC3339), st.Get("reset_at").Str)
	assert.JSONEq(t, `{"limit":60,"remaining":57,"reset_seconds":20}`, st.Get("requests").Raw)
	assert.False(t, st.Get("tokens").Exists(), "tokens per minute are not limited")
	assert.Equal(t, "5/day", st.Get("models.sim-gpt.budget").Str)
	assert.Equal(t, "0.00001", st.Get("models.sim-gpt.spent").Str)
	assert.Contains(t, asked, "key:"+id+"/model:sim-gpt")

	list := do(h, "GET", "/api/keys", "").Body.String()
	assert.Equal(t, "1.25", gjson.Get(list, "keys.0.standing.spent").Str)
	project := do(h, "GET", "/api/projects/p", "").Body.String()
	assert.Equal(t, "1/day", gjson.Get(project, "project.limits.budget").Str)
	assert.False(t, gjson.Get(project, "project.standing").Exists(), "the limiter failed: no standing, and no error")
	assert.Equal(t, "1.25", gjson.Get(project, "project.keys.0.standing.spent").Str)

	require.Equal(t, 200, do(h, "POST", "/api/keys/"+id+"/revoke", "").Code)
	assert.False(t, gjson.Get(do(h, "GET", "/api/keys/"+id, "").Body.String(), "key.standing").Exists(), "a revoked key spends nothing more")
}
