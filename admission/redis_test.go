package admission

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/internal/redistest"
	"github.com/switchyard-gw/switchyard/limits"
	"github.com/switchyard-gw/switchyard/protocols"
)

// redisFixture is a fixture whose limiter counts in a redis-server of its own, through a
// client whose round trips are counted.
func redisFixture(t *testing.T, settleEvery time.Duration) (*fixture, *redistest.RoundTrips) {
	return redisGateway(t, redistest.Start(t), settleEvery)
}

// redisGateway is a fixture on srv's counters in exact mode: another gateway sharing them.
func redisGateway(t *testing.T, srv *redistest.Server, settleEvery time.Duration) (*fixture, *redistest.RoundTrips) {
	return redisGatewayIn(t, srv, settleEvery, true)
}

// redisGatewayIn is a fixture on srv's counters, in exact mode or through leases.
func redisGatewayIn(t *testing.T, srv *redistest.Server, settleEvery time.Duration, exact bool) (*fixture, *redistest.RoundTrips) {
	o, err := limits.ParseRedisURL(srv.URL())
	require.NoError(t, err)
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	count := &redistest.RoundTrips{}
	c.AddHook(count)
	f := &fixture{t: t, now: t0}
	f.limiter = limits.New(limits.NewRedis(c, "adm:"), limits.Options{Now: func() time.Time { return f.now }, SettleEvery: settleEvery, Exact: exact})
	t.Cleanup(func() { _ = f.limiter.Close() })
	f.policy = &Policy{Limiter: f.limiter, Now: func() time.Time { return f.now }}
	return f, count
}

// With counters in Redis, a request of a key with every kind of limit (the bench key's)
// makes one round trip: its first phase is this gateway's own count, its second asks
// Redis once for everything, and its settlement travels ahead of the next admission.
func TestOneRoundTripPerRequestWithCountersInRedis(t *testing.T) {
	f, count := redisFixture(t, time.Hour)
	pol := limits.Policy{RPM: 1 << 30, TPM: 1 << 40, Concurrency: 64, Budget: budget("1000000/month")}
	who := Who{KeyID: "k", Limits: &pol}
	serve := func() {
		e, res, rec := f.enter("e", who, protocols.FamilyA)
		require.Nil(t, res.Err, "%s", rec.Body.String())
		req := f.request(who, model, protocols.FamilyA, 100)
		req.Entered = e
		adm := f.mustAdmit(req)
		adm.Settle(50, 10)
		e.Release()
	}
	for range 5 {
		serve() // scripts loaded, counters made
	}
	before := count.Trips.Load()
	const n = 100
	for range n {
		serve()
	}
	assert.Equal(t, int64(n), count.Trips.Load()-before, "one admission round trip a request; settlement batched")

	st := f.status(keyScope("k"), pol)
	assert.Equal(t, int64(1<<30-5-n), st.Requests.Remaining, "each request counted once, in Redis")
	assert.Zero(t, st.InFlight)
	assert.Equal(t, int64(10*(5+n)), st.SpentMicros)
}

// Through leases the same requests make a round trip only now and then: far from its
// limits a key's leases serve many requests from memory, and the spend still counts.
func TestLeasesMakeARoundTripOnlyNowAndThen(t *testing.T) {
	f, count := redisGatewayIn(t, redistest.Start(t), time.Hour, false)
	pol := limits.Policy{RPM: 1 << 30, TPM: 1 << 40, Concurrency: 64, Budget: budget("1000000/month")}
	who := Who{KeyID: "k", Limits: &pol}
	const n = 1000
	before := count.Trips.Load()
	for range n {
		e, res, rec := f.enter("e", who, protocols.FamilyA)
		require.Nil(t, res.Err, "%s", rec.Body.String())
		req := f.request(who, model, protocols.FamilyA, 100)
		req.Entered = e
		f.mustAdmit(req).Settle(50, 10)
		e.Release()
	}
	trips := count.Trips.Load() - before
	t.Logf("%d requests, %d round trips to Redis", n, trips)
	assert.LessOrEqual(t, float64(trips)/n, 0.1, "round trips a request")
	f.limiter.Flush()
	assert.Equal(t, int64(10*n), f.status(keyScope("k"), pol).SpentMicros)
}

// With counters in Redis a key at its concurrency limit on this gateway is still
// refused before its body is read, at once, in its family's envelope; the shared slots
// hold across gateways once the body is in.
func TestTheFirstPhaseIsTheGatewaysOwnCountWithCountersInRedis(t *testing.T) {
	srv := redistest.Start(t)
	f, _ := redisGateway(t, srv, 0)
	pol := limits.Policy{Concurrency: 1, Budget: budget("1/month")}
	who := Who{KeyID: "k", Limits: &pol}
	e, res, _ := f.enter("a", who, protocols.FamilyA)
	require.Nil(t, res.Err)
	req := f.request(who, model, protocols.FamilyA, 100)
	req.Entered = e
	adm := f.mustAdmit(req)
	assert.Equal(t, int64(1), f.status(keyScope("k"), pol).InFlight, "the shared slot is taken once the body is in")

	_, res, rec := f.enter("b", who, protocols.FamilyB)
	require.NotNil(t, res.Err, "a second body may not start on this gateway")
	assert.Equal(t, "key_concurrency", res.Refused)
	assert.Equal(t, 429, rec.Code)

	// Another gateway on the same counters: its first phase lets the body in, the
	// shared slot refuses it.
	other, _ := redisGateway(t, srv, 0)
	e2, res, _ := other.enter("c", who, protocols.FamilyA)
	require.Nil(t, res.Err)
	req2 := f.request(who, model, protocols.FamilyA, 100)
	req2.Entered = e2
	other.mustRefuse(req2, "key_concurrency")
	e2.Release()

	adm.Settle(0, 0)
	e.Release()
	for i := range 20 { // back to back: never refused for its own finished request
		e, res, _ := f.enter("n"+strconv.Itoa(i), who, protocols.FamilyA)
		require.Nil(t, res.Err, "request %d", i)
		req := f.request(who, model, protocols.FamilyA, 100)
		req.Entered = e
		f.mustAdmit(req).Settle(0, 0)
		e.Release()
	}
}
