package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/limits"
	"github.com/switchyard-gw/switchyard/metering"
	"github.com/switchyard-gw/switchyard/protocols"
)

// limiterPool shares one limiter (its counters, its Redis connection) between the
// configurations that name the same counters, so a reload keeps every count.
var limiterPool = caddy.NewUsagePool()

type sharedLimiter struct {
	*limits.Limiter
	client *redis.Client // nil for counters in memory
}

// Destruct stops the limiter and closes its Redis connections, which it does not own.
func (s sharedLimiter) Destruct() error {
	err := s.Close()
	if s.client != nil {
		err = errors.Join(err, s.client.Close())
	}
	return err
}

// openLimiter joins (or makes) the limiter of this configuration. Budgets are seeded from
// the store's ledger (a.spend); without a store they count from this process's start.
func (a *App) openLimiter(repl *caddy.Replacer) error {
	lc := a.Limits
	if lc == nil {
		lc = &LimitsConfig{}
		a.Limits = lc
	}
	for _, p := range []struct {
		name   string
		policy *limits.Policy
	}{{"key_defaults", lc.KeyDefaults}, {"project_defaults", lc.ProjectDefaults}} {
		if err := p.policy.Validate(); err != nil {
			return fmt.Errorf("limits: %s: %v", p.name, err)
		}
		if err := a.checkPolicyModels(p.policy); err != nil {
			return fmt.Errorf("limits: %s: %v", p.name, err)
		}
	}
	switch lc.WhenUnreachable {
	case "", "refuse", "local":
	default:
		return fmt.Errorf("limits: when_unreachable: %q is neither refuse nor local", lc.WhenUnreachable)
	}
	if lc.DefaultOutputTokens < 0 {
		return errors.New("limits: default_output_tokens must not be negative")
	}
	url := repl.ReplaceKnown(lc.Redis, "")
	if lc.Redis != "" && strings.TrimSpace(url) == "" {
		return fmt.Errorf("limits: redis: %s resolves to an empty value", placeholderNames(lc.Redis))
	}
	prefix := lc.RedisPrefix
	if prefix == "" {
		prefix = "switchyard"
	}
	prefix += ":"
	var redisOpts *redis.Options
	if url != "" {
		var err error
		// Fail-fast client options: a Redis that stops answering must cost a request
		// half a second, not go-redis's default seconds of retries.
		if redisOpts, err = limits.ParseRedisURL(url); err != nil {
			// The URL may hold a password: name the field, not the value.
			return errors.New("limits: redis: not a redis:// or rediss:// URL")
		}
	}
	logger := a.logger
	key := strings.Join([]string{url, prefix, lc.WhenUnreachable, time.Duration(lc.Lease).String(), a.storeKey}, "\x00")
	shared, _, err := limiterPool.LoadOrNew(key, func() (caddy.Destructor, error) {
		counters, client := limits.NewMemory(), (*redis.Client)(nil)
		if redisOpts != nil {
			client = redis.NewClient(redisOpts)
			counters = limits.NewRedis(client, prefix)
		}
		return sharedLimiter{client: client, Limiter: limits.New(counters, limits.Options{
			Seeder:                a.spend,
			Lease:                 time.Duration(lc.Lease),
			BudgetWhenUnreachable: lc.WhenUnreachable,
			OnUnreachable: func(err error) {
				if err != nil {
					logger.Warn("limit counters unreachable: rate limits count in this gateway meanwhile", zap.String("budgets", orDefault(lc.WhenUnreachable, "refuse")), zap.Error(err))
				} else {
					logger.Info("limit counters answering again")
				}
			},
		})}, nil
	})
	if err != nil {
		return err
	}
	a.limiterKey = key
	a.limiter = shared.(sharedLimiter).Limiter
	return nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// checkPolicyModels refuses per-model limits for models the configuration lacks.
func (a *App) checkPolicyModels(p *limits.Policy) error {
	if p == nil {
		return nil
	}
	for id := range p.Models {
		if _, ok := a.catalog.Lookup(id); !ok {
			return fmt.Errorf("model %q is not a declared model", id)
		}
	}
	return nil
}

// keyPolicy is the policy a key's requests are held to: its own, or the defaults.
func (a *App) keyPolicy(id *auth.Identity) *limits.Policy {
	if id.Limits != nil {
		return id.Limits
	}
	return a.Limits.KeyDefaults
}

// projectPolicy is the policy of the key's project, or nil when it has none.
func (a *App) projectPolicy(id *auth.Identity) *limits.Policy {
	if id.ProjectID == "" || a.manager == nil {
		return nil
	}
	if p, ok := a.manager.Cache.Project(id.ProjectID); ok && p.Limits != nil {
		return p.Limits
	}
	return a.Limits.ProjectDefaults
}

// checksFor lists every limit on a request's path: the key's, then its project's, each
// with its per-model variant for the model asked for.
func (a *App) checksFor(id *auth.Identity, model string) []limits.Check {
	var checks []limits.Check
	add := func(kind limits.ScopeKind, scopeID string, p *limits.Policy) {
		if p.IsZero() {
			return
		}
		checks = append(checks, limits.Check{Scope: limits.Scope{Kind: kind, ID: scopeID}, Policy: *p})
		if v := p.Models[model]; !v.IsZero() {
			checks = append(checks, limits.Check{Scope: limits.Scope{Kind: kind, ID: scopeID, Model: model}, Policy: *v})
		}
	}
	add(limits.ScopeKey, id.KeyID, a.keyPolicy(id))
	if id.ProjectID != "" {
		add(limits.ScopeProject, id.ProjectID, a.projectPolicy(id))
	}
	return checks
}

// worstCase is what admission reserves for a request: its input estimated from its text
// and the output it may generate (its own cap, else the model's, else the default, times
// the answers it asks for), at the model's prices.
func (a *App) worstCase(rt *route) (tokens, costMicros int64) {
	if !rt.op.Generates() {
		return 0, 0 // a token count produces nothing to bill
	}
	input := metering.EstimateInputTokens(rt.parsed.Body)
	output, ok := rt.parsed.OutputCap(rt.op)
	if !ok {
		output = rt.model.MaxOutputTokens
	}
	if output <= 0 {
		output = a.Limits.DefaultOutputTokens
		if output <= 0 {
			output = DefaultOutputReservation
		}
	}
	// The upstream writes n answers, each up to the cap (saturating, never wrapping).
	if n := rt.parsed.Choices(rt.op); n > 1 {
		output = satMul(output, n)
	}
	// A claimed cap near the int64 limit must not wrap the sum into a small ask.
	tokens = input + output
	if output > math.MaxInt64-input {
		tokens = math.MaxInt64
	}
	return tokens, metering.WorstCaseCost(rt.model.Prices, input, output)
}

// admit reserves a request's worst case against every limit on its path. It answers the
// reservation to settle (nil when no limit applies) or the error to send instead; on
// admission the remaining allowances go in the response headers.
func (h *Proxy) admit(ctx context.Context, w http.ResponseWriter, rt *route, id *auth.Identity, requestID string) (*limits.Reservation, *protocols.APIError) {
	a := h.app
	if a.limiter == nil || id == nil {
		return nil, nil
	}
	checks := a.checksFor(id, rt.model.ID)
	if len(checks) == 0 {
		return nil, nil
	}
	tokens, cost := a.worstCase(rt)
	dec, err := a.limiter.Reserve(ctx, limits.Ask{ID: requestID, Checks: checks, Tokens: tokens, CostMicros: cost})
	if err != nil {
		loadLimitMetrics().rejections.WithLabelValues(rt.model.ID, "unavailable").Inc()
		h.logger.Warn("spend limit could not be checked: request refused", zap.String("request_id", requestID), zap.Error(err))
		return nil, protocols.ErrLimitsUnavailable(rt.op.Family)
	}
	now := time.Now()
	if r := dec.Refused; r != nil {
		loadLimitMetrics().rejections.WithLabelValues(rt.model.ID, string(r.Scope.Kind)+"_"+string(r.Kind)).Inc()
		return nil, refusalError(rt.op.Family, r, now)
	}
	hdr := w.Header()
	if al := dec.Requests; al != nil {
		protocols.SetRateLimitHeaders(rt.op.Family, hdr, protocols.LimitRequests, al.Limit, al.Remaining, al.Reset, now)
	}
	if al := dec.Tokens; al != nil {
		protocols.SetRateLimitHeaders(rt.op.Family, hdr, protocols.LimitTokens, al.Limit, al.Remaining, al.Reset, now)
	}
	return dec.Reservation, nil
}

// refusalError words a refusal for the client: which limit (the key's or its
// project's, for which model), and when it frees up; never another key's figures.
func refusalError(f protocols.Family, r *limits.Refusal, now time.Time) *protocols.APIError {
	whose := "this key's"
	if r.Scope.Kind == limits.ScopeProject {
		whose = "this key's project's"
	}
	if r.Scope.Model != "" {
		whose += " limit for model '" + r.Scope.Model + "':"
	}
	switch r.Kind {
	case limits.KindBudget:
		b := r.Budget
		if b == nil {
			b = &limits.Budget{Period: limits.PeriodTotal}
		}
		msg := fmt.Sprintf("budget exceeded: %s spend budget of %s", whose, b.String())
		var until time.Duration
		switch {
		case b.Period == limits.PeriodTotal:
			msg += " is used up; it does not reset, ask the gateway's operator to raise it"
		case r.ResetAt.IsZero():
			msg += " cannot cover this request"
		default:
			until = r.ResetAt.Sub(now)
			msg += fmt.Sprintf(" (per %s) has no room for this request; it resets at %s", b.Period, r.ResetAt.UTC().Format(time.RFC3339))
		}
		return protocols.ErrBudgetExceeded(f, msg, until)
	case limits.KindConcurrency:
		return protocols.ErrRateLimited(f, fmt.Sprintf("rate limit reached: %s limit of %d concurrent requests; retry when one ends", whose, r.Limit), r.RetryAfter)
	case limits.KindTokens:
		msg := fmt.Sprintf("rate limit reached: %s limit of %d tokens per minute", whose, r.Limit)
		if r.RetryAfter <= 0 {
			// The request alone needs more than a minute's allowance: waiting cannot help.
			e := protocols.ErrRateLimited(f, msg+" is smaller than this request's input and output cap; lower max_tokens or shorten the input", time.Second)
			e.NoRetry, e.RetryAfter, e.RetryAfterMillis = true, 0, 0
			return e
		}
		return protocols.ErrRateLimited(f, fmt.Sprintf("%s; retry in %.1fs", msg, r.RetryAfter.Seconds()), r.RetryAfter)
	}
	return protocols.ErrRateLimited(f, fmt.Sprintf("rate limit reached: %s limit of %d requests per minute; retry in %.1fs", whose, r.Limit, r.RetryAfter.Seconds()), r.RetryAfter)
}

// settle replaces a reservation by what the answer cost: the record's tokens and price,
// or nothing when no answer reached the client. It must not wait on the client, so it
// runs on a context of its own.
func settle(res *limits.Reservation, tokens, costMicros int64) {
	if res == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res.Settle(ctx, tokens, costMicros)
}

// limitStanding is a scope's spend and remaining allowance, for the console and the
// admin API.
func (a *App) limitStanding(ctx context.Context, scope limits.Scope, p *limits.Policy) (*limits.Status, error) {
	if a.limiter == nil {
		return nil, errors.New("limits are not enforced by this gateway")
	}
	if p == nil {
		switch scope.Kind {
		case limits.ScopeKey:
			p = a.Limits.KeyDefaults
		case limits.ScopeProject:
			p = a.Limits.ProjectDefaults
		}
	}
	var policy limits.Policy
	if p != nil {
		policy = *p
	}
	return a.limiter.Status(ctx, limits.Check{Scope: scope, Policy: policy})
}

// limitMetrics count refusals, process-wide like the other gateway metrics.
type limitMetrics struct {
	rejections *prometheus.CounterVec
}

var loadLimitMetrics = sync.OnceValue(func() *limitMetrics {
	return &limitMetrics{rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "switchyard", Name: "limit_rejections_total",
		Help: "Requests refused by the gateway's own limits before any upstream call, by service model and limit " +
			"(key_requests, key_tokens, key_concurrency, key_budget, the same for project_, or unavailable).",
	}, []string{"model", "limit"})}
})

func (m *limitMetrics) register(reg prometheus.Registerer) error {
	return registerCollectors(reg, m.rejections)
}

// satMul is a×b for positive a and b, or math.MaxInt64 when that would not fit.
func satMul(a, b int64) int64 {
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}
