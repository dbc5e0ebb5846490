package admission

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/limits"
	"github.com/switchyard-gw/switchyard/metering"
	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// t0 is a Wednesday afternoon, UTC: far from the day's and the month's end.
var t0 = time.Date(2026, 3, 11, 14, 0, 0, 0, time.UTC)

// prices make worst cases easy to read: an input token costs 1 micro-unit, a cache
// write 3, an output token 2, a reasoning token 4.
var prices = routing.Prices{Input: 1_000_000, CacheWrite: 3_000_000, Output: 2_000_000, Reasoning: 4_000_000}

var model = Model{ID: "m", Prices: prices}

// fixture is admission over counters in memory, on a clock the test sets.
type fixture struct {
	t       *testing.T
	now     time.Time
	limiter *limits.Limiter
	policy  *Policy
	seq     int
}

func newFixture(t *testing.T, configure func(*Policy), opts limits.Options) *fixture {
	f := &fixture{t: t, now: t0}
	opts.Now = func() time.Time { return f.now }
	f.limiter = limits.New(limits.NewMemory(), opts)
	t.Cleanup(func() { _ = f.limiter.Close() })
	f.policy = &Policy{Limiter: f.limiter, Now: func() time.Time { return f.now }}
	if configure != nil {
		configure(f.policy)
	}
	return f
}

// body is a request of the family with an output cap of maxTokens (none when 0).
func body(fam protocols.Family, maxTokens int) (protocols.Operation, string) {
	cap := ""
	if maxTokens > 0 {
		cap = `,"max_tokens":` + strconv.Itoa(maxTokens)
	}
	if fam == protocols.FamilyB {
		return protocols.Operation{Family: protocols.FamilyB, Kind: protocols.KindMessages},
			`{"model":"m","messages":[{"role":"user","content":"Say hello to the gateway."}]` + cap + `}`
	}
	return protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindChat},
		`{"model":"m","messages":[{"role":"user","content":"Say hello to the gateway."}]` + cap + `}`
}

func (f *fixture) request(who Who, m Model, fam protocols.Family, maxTokens int) Request {
	op, b := body(fam, maxTokens)
	parsed, apiErr := protocols.ParseRequest(fam, []byte(b))
	require.Nil(f.t, apiErr)
	f.seq++
	return Request{ID: "req_" + strconv.Itoa(f.seq), Who: who, Model: m, Op: op, Parsed: parsed}
}

// admit asks admission as the glue does and returns its answer, with the response that
// the glue would send for a refusal.
func (f *fixture) admit(req Request) (Result, *httptest.ResponseRecorder) {
	rec := httptest.NewRecorder()
	res := f.policy.Admit(context.Background(), req, rec.Header())
	if res.Err != nil {
		res.Err.Write(rec, req.ID)
	}
	return res, rec
}

func (f *fixture) mustAdmit(req Request) *Admitted {
	f.t.Helper()
	res, rec := f.admit(req)
	require.Nil(f.t, res.Err, "%s", rec.Body.String())
	return res.Admitted
}

func (f *fixture) mustRefuse(req Request, label string) *httptest.ResponseRecorder {
	f.t.Helper()
	res, rec := f.admit(req)
	require.NotNil(f.t, res.Err, "admitted, want refused by %s", label)
	assert.Equal(f.t, label, res.Refused)
	assert.Nil(f.t, res.Admitted)
	return rec
}

func (f *fixture) status(scope limits.Scope, p limits.Policy) *limits.Status {
	f.t.Helper()
	st, err := f.limiter.Status(context.Background(), limits.Check{Scope: scope, Policy: p})
	require.NoError(f.t, err)
	return st
}

func keyScope(id string) limits.Scope     { return limits.Scope{Kind: limits.ScopeKey, ID: id} }
func projectScope(id string) limits.Scope { return limits.Scope{Kind: limits.ScopeProject, ID: id} }

func budget(amount string) *limits.Budget {
	b, err := limits.ParseBudget(amount)
	if err != nil {
		panic(err)
	}
	return &b
}

func TestNothingLimitedAdmitsWithoutAReservation(t *testing.T) {
	var nilPolicy *Policy
	assert.False(t, nilPolicy.Applies(Who{KeyID: "k"}, "m"))
	assert.Equal(t, Result{}, nilPolicy.Admit(context.Background(), Request{}, http.Header{}))
	assert.False(t, (&Policy{KeyDefaults: &limits.Policy{RPM: 1}}).Applies(Who{KeyID: "k"}, "m"), "no limiter: nothing is counted")

	f := newFixture(t, nil, limits.Options{})
	who := Who{KeyID: "k", ProjectID: "p"}
	assert.False(t, f.policy.Applies(who, "m"))
	res, rec := f.admit(f.request(who, model, protocols.FamilyA, 0))
	assert.Equal(t, Result{}, res)
	assert.Empty(t, rec.Header(), "no allowance to tell")
	res.Admitted.Settle(1, 1)           // nil: harmless
	res.Admitted.Serve(func(*Usage) {}) // and served all the same
	assert.NotPanics(t, func() { res.Admitted.Serve(func(u *Usage) { u.Tokens = 5 }) })
}

// A key without limits of its own is held to key_defaults; one with its own, to those.
func TestKeyDefaultsApplyToKeysWithoutLimitsOfTheirOwn(t *testing.T) {
	f := newFixture(t, func(p *Policy) { p.KeyDefaults = &limits.Policy{RPM: 1} }, limits.Options{})
	plain := Who{KeyID: "plain"}
	require.True(t, f.policy.Applies(plain, "m"))
	f.mustAdmit(f.request(plain, model, protocols.FamilyA, 10)).Settle(0, 0)
	f.mustRefuse(f.request(plain, model, protocols.FamilyA, 10), "key_requests")

	own := Who{KeyID: "own", Limits: &limits.Policy{RPM: 3}}
	for range 3 {
		f.mustAdmit(f.request(own, model, protocols.FamilyA, 10)).Settle(0, 0)
	}
	f.mustRefuse(f.request(own, model, protocols.FamilyA, 10), "key_requests")
}

// A project's own limits hold for every key in it, those with limits of their own too;
// a project without its own (or one the lookup does not know) gets project_defaults.
func TestProjectLimitsApplyOnTopOfTheKeys(t *testing.T) {
	projects := map[string]*limits.Policy{"tight": {RPM: 1}, "bare": nil}
	f := newFixture(t, func(p *Policy) {
		p.ProjectDefaults = &limits.Policy{RPM: 2}
		p.Projects = func(id string) (ProjectLimits, bool) { v, ok := projects[id]; return ProjectLimits{Own: v}, ok }
	}, limits.Options{})

	roomy := &limits.Policy{RPM: 100}
	first := Who{KeyID: "a", ProjectID: "tight", Limits: roomy}
	second := Who{KeyID: "b", ProjectID: "tight", Limits: roomy}
	f.mustAdmit(f.request(first, model, protocols.FamilyA, 10)).Settle(0, 0)
	rec := f.mustRefuse(f.request(second, model, protocols.FamilyA, 10), "project_requests")
	assert.Contains(t, gjson.Get(rec.Body.String(), "error.message").Str, "this key's project's limit of 1 requests per minute")

	for _, project := range []string{"bare", "unknown"} {
		who := Who{KeyID: "k-" + project, ProjectID: project, Limits: roomy}
		for range 2 {
			f.mustAdmit(f.request(who, model, protocols.FamilyA, 10)).Settle(0, 0)
		}
		f.mustRefuse(f.request(who, model, protocols.FamilyA, 10), "project_requests")
	}

	// Without a project lookup (no store), a key's project adds nothing.
	f.policy.Projects = nil
	who := Who{KeyID: "c", ProjectID: "tight"}
	assert.False(t, f.policy.Applies(who, "m"))
}

// A project's limits for its members hold all of one person's keys there together:
// a second key of the same person shares the first's allowance; another person's key,
// or the same person's key in another project, has its own.
func TestAMembersKeysShareTheProjectsMemberLimits(t *testing.T) {
	f := newFixture(t, func(p *Policy) {
		p.Projects = func(id string) (ProjectLimits, bool) {
			if id == "team" {
				return ProjectLimits{Members: &limits.Policy{RPM: 2}}, true
			}
			return ProjectLimits{}, true
		}
	}, limits.Options{})
	roomy := &limits.Policy{RPM: 100}
	first := Who{KeyID: "a1", ProjectID: "team", Owner: "usr_ann", Limits: roomy}
	second := Who{KeyID: "a2", ProjectID: "team", Owner: "usr_ann", Limits: roomy}
	f.mustAdmit(f.request(first, model, protocols.FamilyA, 10)).Settle(0, 0)
	f.mustAdmit(f.request(second, model, protocols.FamilyA, 10)).Settle(0, 0)
	rec := f.mustRefuse(f.request(first, model, protocols.FamilyB, 10), "member_requests")
	assert.Contains(t, gjson.Get(rec.Body.String(), "error.message").Str, "your keys' (together, in this project) limit of 2 requests per minute")

	for _, who := range []Who{
		{KeyID: "b1", ProjectID: "team", Owner: "usr_bob", Limits: roomy},  // another person
		{KeyID: "a3", ProjectID: "other", Owner: "usr_ann", Limits: roomy}, // elsewhere
		{KeyID: "s1", ProjectID: "team", Limits: roomy},                    // a key of no one
	} {
		f.mustAdmit(f.request(who, model, protocols.FamilyA, 10)).Settle(0, 0)
	}
}

// A per-model variant counts the requests for its model apart, on top of the policy
// itself, for keys and projects alike.
func TestPerModelVariantsCountTheirModelApart(t *testing.T) {
	projects := map[string]*limits.Policy{"p": {Models: map[string]*limits.Policy{"big": {RPM: 1}}}}
	f := newFixture(t, func(p *Policy) {
		p.Projects = func(id string) (ProjectLimits, bool) { v, ok := projects[id]; return ProjectLimits{Own: v}, ok }
	}, limits.Options{})
	who := Who{KeyID: "k", ProjectID: "p", Limits: &limits.Policy{RPM: 10, Models: map[string]*limits.Policy{"m": {RPM: 1}}}}
	other := Model{ID: "other", Prices: prices}
	big := Model{ID: "big", Prices: prices}
	assert.True(t, f.policy.Applies(Who{KeyID: "x", ProjectID: "p"}, "big"))

	f.mustAdmit(f.request(who, model, protocols.FamilyA, 10)).Settle(0, 0)
	rec := f.mustRefuse(f.request(who, model, protocols.FamilyA, 10), "key_requests")
	assert.Contains(t, gjson.Get(rec.Body.String(), "error.message").Str, "this key's limit for model 'm': limit of 1 requests per minute")
	f.mustAdmit(f.request(who, other, protocols.FamilyA, 10)).Settle(0, 0)
	f.mustAdmit(f.request(who, big, protocols.FamilyA, 10)).Settle(0, 0)
	rec = f.mustRefuse(f.request(who, big, protocols.FamilyB, 10), "project_requests")
	assert.Contains(t, gjson.Get(rec.Body.String(), "error.message").Str, "this key's project's limit for model 'big':")
	assert.Equal(t, int64(3), 10-f.status(keyScope("k"), limits.Policy{RPM: 10}).Requests.Remaining, "three admitted for the key in all")
}

// The worst case is the input estimate and the output the request may generate: its own
// cap, else the model's declared cap, else the configured default, else 4096; at the
// dearer of the input and cache-write prices, and of the output and reasoning prices.
func TestWorstCaseReservesTheOutputTheRequestMayGenerate(t *testing.T) {
	f := newFixture(t, nil, limits.Options{})
	who := Who{KeyID: "k", Limits: &limits.Policy{Budget: budget("1000/month")}}
	_, b := body(protocols.FamilyA, 0)
	capped := Model{ID: "m", Prices: prices, MaxOutputTokens: 700}

	for _, c := range []struct {
		name       string
		m          Model
		maxTokens  int
		defaultOut int64
		output     int64
	}{
		{"the request's own cap", capped, 50, 0, 50},
		{"the model's declared cap", capped, 0, 0, 700},
		{"the configured default", model, 0, 300, 300},
		{"4096 at last", model, 0, 0, DefaultOutputReservation},
	} {
		f.policy.DefaultOutputTokens = c.defaultOut
		req := f.request(who, c.m, protocols.FamilyA, c.maxTokens)
		input := metering.EstimateInputTokens(req.Parsed.Body)
		require.Positive(t, input)
		tokens, cost := f.policy.WorstCase(req.Op, req.Parsed, req.Model)
		assert.Equal(t, input+c.output, tokens, c.name)
		assert.Equal(t, 3*input+4*c.output, cost, "%s: input at the cache-write price, output at the reasoning price", c.name)

		adm := f.mustAdmit(req)
		assert.Equal(t, 3*input+4*c.output, f.status(keyScope("k"), *who.Limits).ReservedMicros, c.name)
		adm.Settle(0, 0)
	}

	// A token count generates nothing: it reserves nothing.
	count := protocols.Operation{Family: protocols.FamilyB, Kind: protocols.KindMessagesCountTokens}
	parsed, _ := protocols.ParseRequest(protocols.FamilyB, []byte(b))
	tokens, cost := f.policy.WorstCase(count, parsed, capped)
	assert.Zero(t, tokens)
	assert.Zero(t, cost)
}

// A budget that fits the declared cap's worst case but not the default's: a request
// without a cap on a model with a small declared cap is admitted, one that asks for
// more output is refused before any upstream is called.
func TestABudgetHoldsAgainstTheDeclaredCap(t *testing.T) {
	f := newFixture(t, nil, limits.Options{})
	who := Who{KeyID: "k", Limits: &limits.Policy{Budget: budget("0.001/month")}} // 1000 micros
	small := Model{ID: "m", Prices: prices, MaxOutputTokens: 100}
	f.mustAdmit(f.request(who, small, protocols.FamilyB, 0)).Settle(0, 0)
	f.mustRefuse(f.request(who, small, protocols.FamilyB, 1000), "key_budget")
	f.mustRefuse(f.request(who, model, protocols.FamilyB, 0), "key_budget") // 4096 output
}

type refusalCase struct {
	name   string
	label  string
	setup  func(f *fixture) (Who, int) // the key, and the max_tokens of the refused request
	check  func(t *testing.T, fam protocols.Family, rec *httptest.ResponseRecorder)
	family protocols.Family
}

// Every refusal, in both families: 429 in the family's own envelope, type and code,
// the wait in Retry-After (whole seconds, rounded up) and Retry-After-Ms, and
// x-should-retry false only where waiting cannot help.
func TestEveryRefusalInEachFamilysEnvelope(t *testing.T) {
	retry := func(t *testing.T, rec *httptest.ResponseRecorder, after, afterMs, should string) {
		t.Helper()
		assert.Equal(t, after, rec.Header().Get("Retry-After"), "Retry-After")
		assert.Equal(t, afterMs, rec.Header().Get("Retry-After-Ms"), "Retry-After-Ms")
		assert.Equal(t, should, rec.Header().Get("X-Should-Retry"), "x-should-retry")
	}
	envelope := func(t *testing.T, fam protocols.Family, rec *httptest.ResponseRecorder, typeA, typeB, code, message string) {
		t.Helper()
		require.Equal(t, http.StatusTooManyRequests, rec.Code)
		b := rec.Body.String()
		if fam == protocols.FamilyB {
			assert.Equal(t, "error", gjson.Get(b, "type").Str, b)
			assert.Equal(t, typeB, gjson.Get(b, "error.type").Str, b)
			assert.NotEmpty(t, gjson.Get(b, "request_id").Str, b)
			assert.Contains(t, gjson.Get(b, "error.message").Str, message)
			assert.False(t, gjson.Get(b, "error.param").Exists())
		} else {
			assert.Equal(t, typeA, gjson.Get(b, "error.type").Str, b)
			assert.Equal(t, code, gjson.Get(b, "error.code").Str, b)
			assert.Contains(t, gjson.Get(b, "error.message").Str, message)
			assert.False(t, gjson.Get(b, "type").Exists(), "no Family B envelope: %s", b)
		}
	}
	spend := func(f *fixture, who Who, micros int64) {
		f.mustAdmit(f.request(who, model, protocols.FamilyA, 1)).Settle(1, micros)
	}
	for _, fam := range []protocols.Family{protocols.FamilyA, protocols.FamilyB} {
		t.Run(string(fam), func(t *testing.T) {
			t.Run("requests", func(t *testing.T) {
				f := newFixture(t, nil, limits.Options{})
				who := Who{KeyID: "k", Limits: &limits.Policy{RPM: 2}}
				f.mustAdmit(f.request(who, model, fam, 1)).Settle(0, 0)
				f.mustAdmit(f.request(who, model, fam, 1)).Settle(0, 0)
				f.now = f.now.Add(250 * time.Millisecond) // a quarter of a second refilled
				rec := f.mustRefuse(f.request(who, model, fam, 1), "key_requests")
				envelope(t, fam, rec, "rate_limit_error", "rate_limit_error", protocols.CodeRateLimited,
					"this key's limit of 2 requests per minute; retry in 29.8s")
				retry(t, rec, "30", "29750", "")
			})
			t.Run("tokens", func(t *testing.T) {
				f := newFixture(t, nil, limits.Options{})
				who := Who{KeyID: "k", Limits: &limits.Policy{TPM: 600}}
				req := f.request(who, model, fam, 200)
				take, _ := f.policy.WorstCase(req.Op, req.Parsed, req.Model)
				f.mustAdmit(req).Settle(take, 0)
				f.mustAdmit(f.request(who, model, fam, 200)).Settle(take, 0)
				// 600 - 2*take left; take needed; 10 tokens a second refill.
				wait := time.Duration(take-(600-2*take)) * 100 * time.Millisecond
				rec := f.mustRefuse(f.request(who, model, fam, 200), "key_tokens")
				envelope(t, fam, rec, "rate_limit_error", "rate_limit_error", protocols.CodeRateLimited, "this key's limit of 600 tokens per minute; retry in")
				retry(t, rec, strconv.Itoa(int((wait+time.Second-1)/time.Second)), strconv.FormatInt(wait.Milliseconds(), 10), "")
			})
			t.Run("tokens beyond the whole allowance", func(t *testing.T) {
				f := newFixture(t, nil, limits.Options{})
				who := Who{KeyID: "k", Limits: &limits.Policy{TPM: 600}}
				rec := f.mustRefuse(f.request(who, model, fam, 5000), "key_tokens")
				envelope(t, fam, rec, "rate_limit_error", "rate_limit_error", protocols.CodeRateLimited,
					"limit of 600 tokens per minute is smaller than this request's input and output cap")
				retry(t, rec, "", "", "false")
				assert.Equal(t, int64(600), f.status(keyScope("k"), *who.Limits).Tokens.Remaining, "nothing taken")
			})
			t.Run("concurrency", func(t *testing.T) {
				f := newFixture(t, nil, limits.Options{})
				who := Who{KeyID: "k", ProjectID: "p", Limits: &limits.Policy{Concurrency: 1}}
				held := f.mustAdmit(f.request(who, model, fam, 1))
				rec := f.mustRefuse(f.request(who, model, fam, 1), "key_concurrency")
				envelope(t, fam, rec, "rate_limit_error", "rate_limit_error", protocols.CodeRateLimited,
					"this key's limit of 1 concurrent requests; retry when one ends")
				retry(t, rec, "1", "1000", "")
				held.Settle(0, 0)
				f.mustAdmit(f.request(who, model, fam, 1)).Settle(0, 0)
			})
			t.Run("budget per day, resetting within the hour", func(t *testing.T) {
				f := newFixture(t, nil, limits.Options{})
				f.now = time.Date(2026, 3, 11, 23, 20, 0, 0, time.UTC)
				who := Who{KeyID: "k", Limits: &limits.Policy{Budget: budget("0.01/day")}}
				spend(f, who, 10_000)
				rec := f.mustRefuse(f.request(who, model, fam, 1), "key_budget")
				envelope(t, fam, rec, "insufficient_quota", "rate_limit_error", protocols.CodeBudgetExceeded,
					"budget exceeded: this key's spend budget of 0.01/day (per day) has no room for this request; it resets at 2026-03-12T00:00:00Z")
				retry(t, rec, "2400", "", "false")
			})
			t.Run("budget per month", func(t *testing.T) {
				f := newFixture(t, nil, limits.Options{})
				who := Who{KeyID: "k", Limits: &limits.Policy{Budget: budget("0.01/month")}}
				spend(f, who, 10_000)
				rec := f.mustRefuse(f.request(who, model, fam, 1), "key_budget")
				envelope(t, fam, rec, "insufficient_quota", "rate_limit_error", protocols.CodeBudgetExceeded,
					"this key's spend budget of 0.01/month (per month) has no room for this request; it resets at 2026-04-01T00:00:00Z")
				retry(t, rec, "", "", "false") // weeks away: no Retry-After
			})
			t.Run("budget in total", func(t *testing.T) {
				f := newFixture(t, nil, limits.Options{})
				who := Who{KeyID: "k", ProjectID: "p", Limits: &limits.Policy{}}
				f.policy.Projects = func(string) (ProjectLimits, bool) {
					return ProjectLimits{Own: &limits.Policy{Budget: budget("0.01/total")}}, true
				}
				spend(f, who, 10_000)
				rec := f.mustRefuse(f.request(who, model, fam, 1), "project_budget")
				envelope(t, fam, rec, "insufficient_quota", "rate_limit_error", protocols.CodeBudgetExceeded,
					"this key's project's spend budget of 0.01/total is used up; it does not reset")
				retry(t, rec, "", "", "false")
			})
			t.Run("budget held by requests in flight", func(t *testing.T) {
				f := newFixture(t, nil, limits.Options{})
				who := Who{KeyID: "k", Limits: &limits.Policy{Budget: budget("0.02/month")}}
				held := f.mustAdmit(f.request(who, model, fam, 2000)) // 8000 and more reserved
				held2 := f.mustAdmit(f.request(who, model, fam, 2000))
				rec := f.mustRefuse(f.request(who, model, fam, 2000), "key_budget")
				envelope(t, fam, rec, "rate_limit_error", "rate_limit_error", protocols.CodeRateLimited,
					"this key's spend budget of 0.02/month has 0.0")
				assert.Contains(t, rec.Body.String(), "held by requests in flight")
				assert.NotContains(t, rec.Body.String(), "used up")
				retry(t, rec, "1", "1000", "true")
				held.Settle(10, 20)
				held2.Settle(10, 20)
				f.mustAdmit(f.request(who, model, fam, 2000)).Settle(0, 0)
			})
		})
	}
}

// An admitted request gets its tightest allowances in its family's own headers.
func TestAllowancesInEachFamilysHeaders(t *testing.T) {
	f := newFixture(t, nil, limits.Options{})
	who := Who{KeyID: "k", ProjectID: "p", Limits: &limits.Policy{RPM: 10, TPM: 100_000}}
	f.policy.Projects = func(string) (ProjectLimits, bool) { return ProjectLimits{Own: &limits.Policy{RPM: 5}}, true }
	res, rec := f.admit(f.request(who, model, protocols.FamilyA, 100))
	require.Nil(t, res.Err)
	res.Admitted.Settle(0, 0)
	assert.Equal(t, "5", rec.Header().Get("X-Ratelimit-Limit-Requests"), "the project's is tighter")
	assert.Equal(t, "4", rec.Header().Get("X-Ratelimit-Remaining-Requests"))
	assert.Equal(t, "100000", rec.Header().Get("X-Ratelimit-Limit-Tokens"))
	assert.Empty(t, rec.Header().Get("Anthropic-Ratelimit-Requests-Limit"))

	res, rec = f.admit(f.request(who, model, protocols.FamilyB, 100))
	require.Nil(t, res.Err)
	res.Admitted.Settle(0, 0)
	assert.Equal(t, "3", rec.Header().Get("Anthropic-Ratelimit-Requests-Remaining"))
	assert.Equal(t, "5", rec.Header().Get("Anthropic-Ratelimit-Requests-Limit"))
	assert.NotEmpty(t, rec.Header().Get("Anthropic-Ratelimit-Tokens-Remaining"))
	assert.Empty(t, rec.Header().Get("X-Ratelimit-Limit-Requests"))
}

// Settlement on every way a request ends: what the answer was metered at is spent, the
// rest of the reservation and the concurrency slot are freed; no answer costs nothing;
// a panic in the relay frees them too.
func TestSettlementOnEveryPath(t *testing.T) {
	pol := limits.Policy{Concurrency: 1, TPM: 100_000, Budget: budget("1/month")}
	for _, c := range []struct {
		name          string
		serve         func(u *Usage)
		spent, tokens int64
		panics        bool
	}{
		{"an answer, metered", func(u *Usage) { u.Tokens, u.CostMicros = 120, 345 }, 345, 120, false},
		{"the upstream failed after the answer began", func(u *Usage) { u.Tokens, u.CostMicros = 30, 60 }, 60, 30, false},
		{"every candidate failed: no answer", func(*Usage) {}, 0, 0, false},
		{"the client left before any answer", func(*Usage) {}, 0, 0, false},
		{"the relay panicked", func(*Usage) { panic("relay bug") }, 0, 0, true},
		{"the relay panicked after metering", func(u *Usage) { u.Tokens, u.CostMicros = 7, 9; panic("late bug") }, 9, 7, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, nil, limits.Options{})
			who := Who{KeyID: "k", Limits: &pol}
			adm := f.mustAdmit(f.request(who, model, protocols.FamilyB, 500))
			st := f.status(keyScope("k"), pol)
			require.Positive(t, st.ReservedMicros)
			require.Equal(t, int64(1), st.InFlight)
			if c.panics {
				assert.Panics(t, func() { adm.Serve(c.serve) }, "the panic goes on up")
			} else {
				adm.Serve(c.serve)
			}
			st = f.status(keyScope("k"), pol)
			assert.Zero(t, st.ReservedMicros, "the reservation is released")
			assert.Zero(t, st.InFlight, "the slot is freed")
			assert.Equal(t, c.spent, st.SpentMicros)
			assert.Equal(t, 100_000-c.tokens, st.Tokens.Remaining)
			adm.Settle(1000, 1000) // a second settlement changes nothing
			assert.Equal(t, c.spent, f.status(keyScope("k"), pol).SpentMicros)
			f.mustAdmit(f.request(who, model, protocols.FamilyB, 500)).Settle(0, 0)
		})
	}
}

// A budget whose counter does not exist yet (a restart, a new period, a lost Redis)
// starts from the ledger's spend, not from zero.
func TestABudgetsNewCounterStartsFromTheLedger(t *testing.T) {
	var asked []limits.Scope
	ledger := func(_ context.Context, s limits.Scope, since time.Time) (int64, error) {
		asked = append(asked, s)
		assert.Equal(t, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), since, "the period's start")
		if s == projectScope("p") {
			return 995_000, nil
		}
		return 0, nil
	}
	f := newFixture(t, func(p *Policy) {
		p.ProjectDefaults = &limits.Policy{Budget: budget("1/month")}
		p.Projects = func(string) (ProjectLimits, bool) { return ProjectLimits{}, true }
	}, limits.Options{Seeder: ledger})
	who := Who{KeyID: "k", ProjectID: "p"}
	rec := f.mustRefuse(f.request(who, model, protocols.FamilyA, 10_000), "project_budget")
	assert.Contains(t, rec.Body.String(), "budget exceeded")
	assert.Equal(t, []limits.Scope{projectScope("p")}, asked)
	assert.Equal(t, int64(995_000), f.status(projectScope("p"), limits.Policy{Budget: budget("1/month")}).SpentMicros)
	f.mustAdmit(f.request(who, model, protocols.FamilyA, 1)).Settle(1, 10)
	assert.Len(t, asked, 1, "seeded once")
}

// Counters that cannot be asked refuse the request (503) rather than let it through
// unmetered, and say why for the log only.
func TestUnavailableCountersRefuse(t *testing.T) {
	f := newFixture(t, nil, limits.Options{Seeder: func(context.Context, limits.Scope, time.Time) (int64, error) {
		return 0, context.DeadlineExceeded
	}})
	who := Who{KeyID: "k", Limits: &limits.Policy{Budget: budget("1/month")}}
	for _, fam := range []protocols.Family{protocols.FamilyA, protocols.FamilyB} {
		res, rec := f.admit(f.request(who, model, fam, 1))
		require.NotNil(t, res.Err)
		assert.Equal(t, "unavailable", res.Refused)
		assert.ErrorIs(t, res.Cause, limits.ErrUnavailable)
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
		assert.Equal(t, "1", rec.Header().Get("Retry-After"))
		assert.NotContains(t, rec.Body.String(), "deadline", "the cause stays in the log")
	}
}
