package caddymodule

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/switchyard-gw/switchyard/admission"
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
	client redis.UniversalClient // nil for counters in memory
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
	switch lc.Mode {
	case "", "lease", "exact":
	default:
		return fmt.Errorf("limits: mode: %q is neither lease nor exact", lc.Mode)
	}
	if lc.DefaultOutputTokens < 0 {
		return errors.New("limits: default_output_tokens must not be negative")
	}
	if lc.DefaultToolUses < 0 || lc.DefaultToolUses > protocols.MaxToolUses {
		return fmt.Errorf("limits: default_tool_uses must be a whole number from 1 to %d", protocols.MaxToolUses)
	}
	store, err := redisStoreOf(lc, repl)
	if err != nil {
		return err
	}
	if strings.ContainsAny(lc.RedisPrefix, "{}") {
		return fmt.Errorf("limits: redis_prefix: %q holds '{' or '}', which the counters' names use as Redis Cluster hash tags", lc.RedisPrefix)
	}
	prefix := lc.RedisPrefix
	if prefix == "" {
		prefix = "switchyard"
	}
	prefix += ":"
	logger := a.logger
	key := strings.Join([]string{store.key, prefix, lc.WhenUnreachable, lc.Mode, time.Duration(lc.Lease).String(), a.storeKey}, "\x00")
	shared, _, err := limiterPool.LoadOrNew(key, func() (caddy.Destructor, error) {
		counters, client := limits.NewMemory(), redis.UniversalClient(nil)
		if store.client != nil {
			client = store.client()
			counters = limits.NewRedis(client, prefix)
		}
		return sharedLimiter{client: client, Limiter: limits.New(counters, limits.Options{
			Seeder:                a.spend,
			Lease:                 time.Duration(lc.Lease),
			BudgetWhenUnreachable: lc.WhenUnreachable,
			Exact:                 lc.Mode == "exact",
			// What a gateway that died held lapses after `lease`, whichever the mode:
			// its requests' reservations in exact mode, its leases otherwise (30s
			// unless set).
			LeaseLife: time.Duration(lc.Lease),
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
	a.admission = &admission.Policy{
		Limiter:             a.limiter,
		KeyDefaults:         lc.KeyDefaults,
		ProjectDefaults:     lc.ProjectDefaults,
		DefaultOutputTokens: lc.DefaultOutputTokens,
		DefaultToolUses:     lc.DefaultToolUses,
	}
	if a.manager != nil {
		cache := a.manager.Cache
		a.admission.Projects = func(id string) (admission.ProjectLimits, bool) {
			p, ok := cache.Project(id)
			if !ok {
				return admission.ProjectLimits{}, false
			}
			pl := admission.ProjectLimits{Own: p.Limits}
			if p.Members != nil {
				pl.Members = p.Members.Limits
			}
			return pl, true
		}
	}
	return nil
}

// redisStore is where the configuration shares its counters: key names it for the
// limiter pool (every field that makes another client), client makes the client (nil:
// counters in memory).
type redisStore struct {
	key    string
	client func() redis.UniversalClient
}

// redisStoreOf reads redis, redis_cluster or redis_sentinel, placeholders replaced. The
// errors name the field and a URL's place, never a URL: it may hold a password. Every
// kind of client gets the fail-fast options of limits.ParseRedisURL: a Redis that stops
// answering must cost a request half a second, not go-redis's default seconds of retries.
func redisStoreOf(lc *LimitsConfig, repl *caddy.Replacer) (redisStore, error) {
	kinds := 0
	for _, set := range []bool{lc.Redis != "", len(lc.RedisCluster) > 0, lc.RedisSentinel != nil} {
		if set {
			kinds++
		}
	}
	if kinds > 1 {
		return redisStore{}, errors.New("limits: redis, redis_cluster and redis_sentinel each say where the counters are: set one")
	}
	// resolve replaces placeholders in each of vals, refusing one that comes out empty.
	resolve := func(field string, vals []string) ([]string, error) {
		out := make([]string, len(vals))
		for i, v := range vals {
			out[i] = repl.ReplaceKnown(v, "")
			if strings.TrimSpace(out[i]) == "" {
				if v == out[i] {
					return nil, fmt.Errorf("limits: %s: value %d of %d is empty", field, i+1, len(vals))
				}
				return nil, fmt.Errorf("limits: %s: %s resolves to an empty value", field, placeholderNames(v))
			}
		}
		return out, nil
	}
	if lc.RedisTLSCA != "" && kinds == 0 {
		return redisStore{}, errors.New("limits: redis_tls_ca: no redis, redis_cluster or redis_sentinel to trust it for")
	}
	roots, caKey, err := redisRoots(lc.RedisTLSCA, repl)
	if err != nil {
		return redisStore{}, err
	}
	// trust applies roots to a client's TLS configuration, refusing them without TLS.
	trust := func(field string, tc *tls.Config) error {
		if roots == nil {
			return nil
		}
		if tc == nil {
			return fmt.Errorf("limits: redis_tls_ca: %s is not rediss:// (TLS)", field)
		}
		tc.RootCAs = roots
		return nil
	}
	switch {
	case lc.Redis != "":
		urls, err := resolve("redis", []string{lc.Redis})
		if err != nil {
			return redisStore{}, err
		}
		o, err := limits.ParseRedisURL(urls[0])
		if err != nil {
			return redisStore{}, errors.New("limits: redis: not a redis:// or rediss:// URL")
		}
		if err := trust("redis", o.TLSConfig); err != nil {
			return redisStore{}, err
		}
		return redisStore{key: "redis\x00" + caKey + urls[0], client: func() redis.UniversalClient { return redis.NewClient(o) }}, nil
	case len(lc.RedisCluster) > 0:
		urls, err := resolve("redis_cluster", lc.RedisCluster)
		if err != nil {
			return redisStore{}, err
		}
		o, err := limits.ParseRedisClusterURLs(urls)
		if err != nil {
			return redisStore{}, fmt.Errorf("limits: redis_cluster: %v", err)
		}
		if err := trust("redis_cluster", o.TLSConfig); err != nil {
			return redisStore{}, err
		}
		return redisStore{key: "cluster\x00" + caKey + strings.Join(urls, "\x00"), client: func() redis.UniversalClient { return redis.NewClusterClient(o) }}, nil
	case lc.RedisSentinel != nil:
		rs := lc.RedisSentinel
		if len(rs.Sentinels) == 0 {
			return redisStore{}, errors.New("limits: redis_sentinel: no sentinels: give the URL of one or more")
		}
		master, err := resolve("redis_sentinel: master", []string{rs.Master})
		if err != nil {
			return redisStore{}, err
		}
		urls, err := resolve("redis_sentinel: sentinels", rs.Sentinels)
		if err != nil {
			return redisStore{}, err
		}
		o, err := limits.ParseRedisSentinelURLs(master[0], urls)
		if err != nil {
			return redisStore{}, fmt.Errorf("limits: redis_sentinel: %v", err)
		}
		if err := trust("redis_sentinel", o.TLSConfig); err != nil {
			return redisStore{}, err
		}
		return redisStore{key: "sentinel\x00" + caKey + master[0] + "\x00" + strings.Join(urls, "\x00"), client: func() redis.UniversalClient { return redis.NewFailoverClient(o) }}, nil
	}
	return redisStore{key: "memory"}, nil
}

// maxRedisCAFile bounds the CA file read for redis_tls_ca.
const maxRedisCAFile = 1 << 20

// redisRoots reads redis_tls_ca (placeholders replaced): the system's authorities and
// the file's, and a key naming the file's content for the limiter pool (a reload after
// the file changed makes a new client). nil, "" without one.
func redisRoots(file string, repl *caddy.Replacer) (*x509.CertPool, string, error) {
	if file == "" {
		return nil, "", nil
	}
	path := repl.ReplaceKnown(file, "")
	if strings.TrimSpace(path) == "" {
		return nil, "", fmt.Errorf("limits: redis_tls_ca: %s resolves to an empty value", placeholderNames(file))
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, "", fmt.Errorf("limits: redis_tls_ca: %v", err)
	}
	defer f.Close()
	pem, err := io.ReadAll(io.LimitReader(f, maxRedisCAFile+1))
	if err != nil {
		return nil, "", fmt.Errorf("limits: redis_tls_ca: %v", err)
	}
	if len(pem) > maxRedisCAFile {
		return nil, "", fmt.Errorf("limits: redis_tls_ca: %s is over %d bytes: not a file of CA certificates", path, maxRedisCAFile)
	}
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if !roots.AppendCertsFromPEM(pem) {
		return nil, "", fmt.Errorf("limits: redis_tls_ca: %s holds no PEM certificate", path)
	}
	sum := sha256.Sum256(pem)
	return roots, "ca:" + hex.EncodeToString(sum[:]) + "\x00", nil
}

// admissionRequest is what admission needs of a request.
func admissionRequest(rt *route, id *auth.Identity, requestID string) admission.Request {
	return admission.Request{
		ID:     requestID,
		Who:    whoOf(id),
		Model:  admission.Model{ID: rt.model.ID, Prices: rt.model.CeilingPrices(), MaxOutputTokens: rt.model.MaxOutputTokens},
		Op:     rt.op,
		Parsed: rt.parsed,
	}
}

func whoOf(id *auth.Identity) admission.Who {
	return admission.Who{KeyID: id.KeyID, ProjectID: id.ProjectID, Limits: id.Limits, Owner: id.Owner}
}

// enter is admission's first phase, before the body is read (see admission.Enter),
// counting and logging refusals. A refusal closes the connection after its answer, so
// net/http does not wait for the unread body to drain it first.
func (h *Model) enter(w http.ResponseWriter, r *http.Request, id *auth.Identity, op protocols.Operation) (*admission.Entered, *protocols.APIError) {
	entered, res := h.app.admission.Enter(r.Context(), requestID(r), whoOf(id), op.Family, w.Header())
	if res.Refused != "" {
		loadLimitMetrics().rejections.WithLabelValues("", res.Refused).Inc()
		logOf(r).trace.refused(res.Refused)
		// Before the body: the model is not known yet.
		h.app.journalUnserved(unserved{requestID: requestID(r), identity: id, op: op,
			status: refusalStatus(res), outcome: metering.OutcomeRefused, refusedBy: res.Refused})
	}
	if res.Cause != nil {
		h.app.logger.Warn("limits could not be checked: request refused", zap.String("request_id", requestID(r)), zap.Error(res.Cause))
	}
	if res.Err != nil {
		w.Header().Set("Connection", "close")
	}
	return entered, res.Err
}

// admit reserves the request's worst case against every limit on its path (see package
// admission), counting and logging refusals. The result's Admitted is to be settled.
func (h *Proxy) admit(w http.ResponseWriter, r *http.Request, rt *route, id *auth.Identity, requestID string) admission.Result {
	if id == nil {
		return admission.Result{}
	}
	req := admissionRequest(rt, id, requestID)
	req.Entered, _ = caddyhttp.GetVar(r.Context(), varEntered).(*admission.Entered)
	res := h.app.admission.Admit(r.Context(), req, w.Header())
	if res.Refused != "" {
		loadLimitMetrics().rejections.WithLabelValues(rt.model.ID, res.Refused).Inc()
		logOf(r).trace.refused(res.Refused)
		h.app.journalUnserved(unserved{requestID: requestID, identity: id, model: rt.model.ID, op: rt.op,
			status: refusalStatus(res), outcome: metering.OutcomeRefused, refusedBy: res.Refused})
	}
	if res.Cause != nil {
		h.logger.Warn("spend limit could not be checked: request refused", zap.String("request_id", requestID), zap.Error(res.Cause))
	}
	return res
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

// refusalStatus is the status a refusal was answered with.
func refusalStatus(res admission.Result) int {
	if res.Err != nil {
		return res.Err.Status
	}
	return http.StatusTooManyRequests
}
