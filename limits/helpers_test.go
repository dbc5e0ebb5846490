package limits

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/internal/redistest"
)

// clock is a clock the test moves by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// ledger stands for the store's ledger: what requests cost, when they ended.
type ledger struct {
	mu      sync.Mutex
	entries []ledgerEntry
	queries atomic.Int64
	fail    atomic.Bool
}

type ledgerEntry struct {
	scope Scope
	at    time.Time
	cost  int64
}

func (lg *ledger) add(s Scope, at time.Time, cost int64) {
	lg.mu.Lock()
	lg.entries = append(lg.entries, ledgerEntry{s, at, cost})
	lg.mu.Unlock()
}

func (lg *ledger) Seeder(_ context.Context, s Scope, since time.Time) (int64, error) {
	lg.queries.Add(1)
	if lg.fail.Load() {
		return 0, fmt.Errorf("ledger down")
	}
	lg.mu.Lock()
	defer lg.mu.Unlock()
	var sum int64
	for _, e := range lg.entries {
		if e.scope == s && !e.at.Before(since) {
			sum += e.cost
		}
	}
	return sum, nil
}

// backend makes Limiters over one kind of counters; Redis ones share one Redis (a
// server, a Cluster, a Sentinel set-up) and, within a test, one prefix (two Limiters are
// two gateways).
type backend struct {
	name   string
	client func(t testing.TB) redis.UniversalClient // a new client of the Redis; nil: memory
	prefix string
	lease  bool // Redis counters through leases (lease.go); else exact
}

// shared reports whether the backend's counters are in Redis, shared by its Limiters.
func (b *backend) shared() bool { return b.client != nil }

func (b *backend) limiter(t testing.TB, opts Options) *Limiter {
	t.Helper()
	var c Counters
	if b.client == nil {
		c = NewMemory()
	} else {
		c = NewRedis(b.client(t), b.prefix)
		opts.Exact = !b.lease
	}
	l := New(c, opts)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func newClient(t testing.TB, srv *redistest.Server) *redis.Client {
	t.Helper()
	o, err := ParseRedisURL(srv.URL())
	require.NoError(t, err)
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newClusterClient is a client of the Cluster with the options a gateway would use.
func newClusterClient(t testing.TB, c *redistest.Cluster) *redis.ClusterClient {
	t.Helper()
	o, err := ParseRedisClusterURLs(c.URLs()[:2]) // two nodes are enough to find the rest
	require.NoError(t, err)
	cl := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// newSentinelClient is a client of the Sentinel set-up's master with the options a
// gateway would use.
func newSentinelClient(t testing.TB, s *redistest.Sentinel) *redis.Client {
	t.Helper()
	o, err := ParseRedisSentinelURLs(redistest.MasterName, s.URLs())
	require.NoError(t, err)
	cl := redis.NewFailoverClient(o)
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

var prefixes atomic.Int64

// redisKinds are the kinds of Redis the counters run on: one server of the test's own,
// and the package's shared Cluster and Sentinel set-up (see redistest.SharedCluster).
var redisKinds = []struct {
	name   string
	client func(t *testing.T) func(testing.TB) redis.UniversalClient
}{
	{"redis", func(t *testing.T) func(testing.TB) redis.UniversalClient {
		srv := redistest.Start(t)
		return func(t testing.TB) redis.UniversalClient { return newClient(t, srv) }
	}},
	{"cluster", func(t *testing.T) func(testing.TB) redis.UniversalClient {
		c := redistest.SharedCluster(t)
		return func(t testing.TB) redis.UniversalClient { return newClusterClient(t, c) }
	}},
	{"sentinel", func(t *testing.T) func(testing.TB) redis.UniversalClient {
		s := redistest.SharedSentinel(t)
		return func(t testing.TB) redis.UniversalClient { return newSentinelClient(t, s) }
	}},
}

// eachBackend runs f against memory counters and against Redis counters of each kind,
// exact and through leases.
func eachBackend(t *testing.T, f func(t *testing.T, b *backend)) {
	t.Run("memory", func(t *testing.T) { f(t, &backend{name: "memory"}) })
	eachRedis(t, f)
}

// eachRedis runs f against Redis counters of each kind, in exact mode ("redis",
// "cluster", "sentinel") and through leases ("redis-lease", ...).
func eachRedis(t *testing.T, f func(t *testing.T, b *backend)) {
	for _, lease := range []bool{false, true} {
		for _, k := range redisKinds {
			name := k.name
			if lease {
				name += "-lease"
			}
			t.Run(name, func(t *testing.T) {
				f(t, &backend{name: name, client: k.client(t), prefix: fmt.Sprintf("sy%d:", prefixes.Add(1)), lease: lease})
			})
		}
	}
}

func keyScope(id string) Scope     { return Scope{Kind: ScopeKey, ID: id} }
func projectScope(id string) Scope { return Scope{Kind: ScopeProject, ID: id} }

var askIDs atomic.Int64

func ask(tokens, cost int64, checks ...Check) Ask {
	return Ask{ID: fmt.Sprintf("req-%d", askIDs.Add(1)), Checks: checks, Tokens: tokens, CostMicros: cost}
}

// admit reserves and fails the test unless admitted.
func admit(t testing.TB, l *Limiter, a Ask) *Reservation {
	t.Helper()
	d, err := l.Reserve(context.Background(), a)
	require.NoError(t, err)
	require.Nil(t, d.Refused, "refused: %+v", d.Refused)
	require.NotNil(t, d.Reservation)
	return d.Reservation
}

// refuse reserves and fails the test unless refused.
func refuse(t testing.TB, l *Limiter, a Ask) *Refusal {
	t.Helper()
	d, err := l.Reserve(context.Background(), a)
	require.NoError(t, err)
	require.NotNil(t, d.Refused, "admitted")
	require.Nil(t, d.Reservation)
	return d.Refused
}

func status(t testing.TB, l *Limiter, c Check) *Status {
	t.Helper()
	st, err := l.Status(context.Background(), c)
	require.NoError(t, err)
	return st
}

func budget(micros int64, p Period) *Budget { return &Budget{Micros: micros, Period: p} }
