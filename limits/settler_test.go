package limits

import (
	"bufio"
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/switchyard-gw/switchyard/internal/redistest"
)

// serverCommands is how many commands Redis ran (scripts' own commands included), less
// the scripts' calls and the test's bookkeeping.
func serverCommands(t testing.TB, admin *redis.Client) int64 {
	t.Helper()
	var n int64
	for name, st := range commandStats(t, admin) {
		if name != "evalsha" && name != "eval" {
			n += st.calls
		}
	}
	return n
}

// commandStat is one command's line of INFO commandstats: its calls and the µs they took.
type commandStat struct {
	calls int64
	usec  float64
}

// commandStats reads INFO commandstats, without the calls tests and benchmarks make
// themselves (INFO, CONFIG RESETSTAT, script loading, the client's handshake).
func commandStats(t testing.TB, admin *redis.Client) map[string]commandStat {
	t.Helper()
	info, err := admin.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	out := map[string]commandStat{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || line == name {
			continue
		}
		switch name {
		case "script|load", "info", "config|resetstat", "ping", "hello", "client|setinfo", "select":
			continue
		}
		var st commandStat
		for _, field := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			switch k {
			case "calls":
				st.calls, err = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.usec, err = strconv.ParseFloat(v, 64)
			}
			require.NoError(t, err, line)
		}
		out[name] = st
	}
	return out
}

// request is one request the way admission makes it for the bench key (rpm, tpm,
// concurrency and a budget) with counters in Redis: its first phase before the body (the
// gateway's own slot), its second after (every limit, in Redis), both settled when it
// ends.
func request(t testing.TB, l *Limiter, id string, key Policy) (refused *Refusal) {
	t.Helper()
	ctx := context.Background()
	scope := keyScope("bench")
	enter, err := l.ReserveLocal(ctx, Ask{ID: id + "/enter", Checks: []Check{{Scope: scope, Policy: Policy{Concurrency: key.Concurrency}}}})
	require.NoError(t, err)
	if enter.Refused != nil {
		return enter.Refused
	}
	admit, err := l.Reserve(ctx, Ask{ID: id, Tokens: 1000, CostMicros: 50,
		Checks: []Check{{Scope: scope, Policy: key}}})
	require.NoError(t, err)
	if admit.Refused != nil {
		enter.Reservation.Settle(ctx, 0, 0)
		return admit.Refused
	}
	admit.Reservation.Settle(ctx, 800, 40)
	enter.Reservation.Settle(ctx, 0, 0)
	return nil
}

var benchKey = Policy{RPM: 1 << 40, TPM: 1 << 50, Concurrency: 1 << 20, Budget: budget(1e15, PeriodMonth)}

// One request with every kind of limit costs the request's path one round trip, and
// settles within it: a request's settlement travels ahead of the next call in the same
// pipeline.
func TestARequestsSettlementTravelsWithTheNextAdmission(t *testing.T) {
	g := newGateways(t)
	c := newClient(t, g.srv)
	count := &redistest.RoundTrips{}
	c.AddHook(count)
	// A flusher that never fires on its own: whatever is sent, calls carried it.
	l := New(NewRedis(c, g.prefix), Options{Now: newClock(t0).Now, SettleEvery: time.Hour, Exact: true})
	for i := range 10 { // the scripts loaded, the counters made
		require.Nil(t, request(t, l, "warm-"+strconv.Itoa(i), benchKey))
	}
	ctx := context.Background()
	require.NoError(t, g.admin.ConfigResetStat(ctx).Err())
	trips0, cmds0 := count.Trips.Load(), count.Cmds.Load()
	const n = 200
	for i := range n {
		require.Nil(t, request(t, l, "req-"+strconv.Itoa(i), benchKey))
	}
	trips, sent := count.Trips.Load()-trips0, count.Cmds.Load()-cmds0
	inRedis := serverCommands(t, g.admin)
	t.Logf("per request: %.2f round trips, %.2f script calls, %.2f Redis commands", float64(trips)/n, float64(sent)/n, float64(inRedis)/n)
	require.Equal(t, int64(n), trips, "one admission round trip a request; settlement adds none")
	require.Equal(t, int64(2*n), sent, "a reserve and a settle a request, the settle pipelined ahead of the next reserve")
	require.LessOrEqual(t, inRedis, int64(16*n), "commands Redis runs for a request (29 before issue 30, 25 before the scripts shared hashes and swept lazily)")

	// What the last request queued goes when the gateway stops.
	require.NoError(t, l.Close())
	st := status(t, g.limiter(t, Options{Now: newClock(t0).Now}), Check{Scope: keyScope("bench"), Policy: benchKey})
	require.Equal(t, int64(0), st.InFlight)
	require.Equal(t, int64(0), st.ReservedMicros)
	require.Equal(t, int64(40*(n+10)), st.SpentMicros)
}

// A key without a concurrency limit still has its requests in flight counted, but its
// slots can refuse nobody: admitting one never sweeps the set for lapsed or released
// slots, which would cost every such request two more commands in Redis.
func TestAnUnlimitedSlotCountIsNeverSweptOnTheRequestsPath(t *testing.T) {
	g := newGateways(t)
	l := New(NewRedis(newClient(t, g.srv), g.prefix), Options{Now: newClock(t0).Now, Exact: true})
	key := Policy{RPM: 1 << 40}
	require.Nil(t, request(t, l, "warm", key))
	l.Flush()
	require.NoError(t, g.admin.ConfigResetStat(context.Background()).Err())
	for i := range 20 {
		require.Nil(t, request(t, l, "req-"+strconv.Itoa(i), key))
	}
	l.Flush()
	stats := commandStats(t, g.admin)
	require.NotZero(t, stats["zadd"].calls, "the requests in flight are counted")
	require.Zero(t, stats["zremrangebyscore"].calls, "sweeps of a slot set that cannot refuse")
	st := status(t, l, Check{Scope: keyScope("bench"), Policy: key})
	require.Equal(t, int64(0), st.InFlight)
}

// A key with a concurrency of 1 sending requests back to back, the next the moment the
// last has ended, is never refused for its own finished request: its settlement goes
// ahead of the next admission.
func TestBackToBackRequestsAtConcurrencyOneAreNeverRefused(t *testing.T) {
	g := newGateways(t)
	l := g.limiter(t, Options{Now: newClock(t0).Now})
	key := benchKey
	key.Concurrency = 1
	for i := range 300 {
		require.Nil(t, request(t, l, "b2b-"+strconv.Itoa(i), key), "request %d", i)
	}
}

// A slot whose settlement is still on its way to Redis on another connection (taken by
// another request's pipeline, not answered yet) is freed by the next admission itself.
func TestASlotWhoseSettlementIsOnItsWayIsFreeForTheNextRequest(t *testing.T) {
	g := newGateways(t)
	l := g.limiter(t, Options{Now: newClock(t0).Now, SettleEvery: time.Hour, Exact: true})
	c := Check{Scope: keyScope("k1"), Policy: Policy{Concurrency: 1}}
	admit(t, l, ask(0, 0, c)).Settle(context.Background(), 0, 0)
	onItsWay := l.redis.take() // as if another call had it in flight
	require.Len(t, onItsWay, 1)
	next := admit(t, l, ask(0, 0, c))
	refuse(t, l, ask(0, 0, c)) // the limit still holds
	// The settlement arrives late: harmless.
	ctx := context.Background()
	p := onItsWay[0].parts[0]
	v, err := settleScript.Run(ctx, l.redis.c, p.keys, p.args...).Int64Slice()
	l.settled(onItsWay[0], v, err)
	refuse(t, l, ask(0, 0, c))
	next.Settle(ctx, 0, 0)
	admit(t, l, ask(0, 0, c))
}

// Another gateway sees a settlement within SettleEvery, with no further call from the
// gateway that made it.
func TestAnotherGatewaySeesASettlementWithinSettleEvery(t *testing.T) {
	g := newGateways(t)
	clk := newClock(t0)
	a := g.limiter(t, Options{Now: clk.Now, SettleEvery: 2 * time.Millisecond})
	b := g.limiter(t, Options{Now: clk.Now})
	c := Check{Scope: keyScope("k1"), Policy: Policy{Concurrency: 1, Budget: budget(1000, PeriodMonth)}}
	// Twice: the second after the flusher has gone back to sleep.
	for i := range int64(2) {
		admit(t, a, ask(0, 500, c)).Settle(context.Background(), 0, 300)
		ended := time.Now()
		require.Eventually(t, func() bool {
			st := status(t, b, c)
			return st.InFlight == 0 && st.SpentMicros == 300*(i+1) && st.ReservedMicros == 0
		}, 5*time.Second, time.Millisecond)
		t.Logf("seen by the other gateway after %v", time.Since(ended))
		require.Eventually(t, func() bool { // the flusher has found the queue empty
			a.redis.qmu.Lock()
			defer a.redis.qmu.Unlock()
			return !a.redis.armed
		}, 5*time.Second, time.Millisecond)
	}
}

// Requests at once share pipelines once two are on their way, and each still gets its
// own answer.
func TestConcurrentRequestsShareRoundTripsAndEachGetsItsOwnAnswer(t *testing.T) {
	g := newGateways(t)
	c := newClient(t, g.srv)
	count := &redistest.RoundTrips{}
	c.AddHook(count)
	l := New(NewRedis(c, g.prefix), Options{Now: newClock(t0).Now, SettleEvery: time.Hour, Exact: true})
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	admit(t, l, ask(0, 0, Check{Scope: keyScope("warm"), Policy: Policy{RPM: 10}})).Settle(ctx, 0, 0)
	trips0 := count.Trips.Load()
	const workers, each = 32, 10
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			<-start
			rpm := int64(1000 + w) // each key its own limit: a crossed answer shows
			c := Check{Scope: keyScope("k" + strconv.Itoa(w)), Policy: Policy{RPM: rpm, Concurrency: 5}}
			for j := range int64(each) {
				d, err := l.Reserve(ctx, ask(0, 0, c))
				if !assert.NoError(t, err) || !assert.Nil(t, d.Refused) {
					return
				}
				assert.Equal(t, rpm-j-1, d.Requests.Remaining, "key %d, request %d", w, j)
				d.Reservation.Settle(ctx, 0, 0)
			}
		})
	}
	close(start)
	wg.Wait()
	trips := count.Trips.Load() - trips0
	t.Logf("%d requests in %d round trips", workers*each, trips)
	require.Less(t, trips, int64(workers*each))
}

// gate holds every call to Redis while closed, and says when one is held.
type gate struct {
	closed atomic.Bool
	open   chan struct{}
	held   chan struct{}
}

func (h *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *gate) wait() {
	if h.closed.Load() {
		h.held <- struct{}{}
		<-h.open
	}
}

func (h *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.wait()
		return next(ctx, cmd)
	}
}

func (h *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.wait()
		return next(ctx, cmds)
	}
}

// A request waiting for a pipeline leaves the moment its context ends, and is then never
// sent: it holds nothing.
func TestARequestWaitingForAPipelineLeavesWithItsContext(t *testing.T) {
	g := newGateways(t)
	c := newClient(t, g.srv)
	h := &gate{open: make(chan struct{}), held: make(chan struct{}, 8)}
	c.AddHook(h)
	l := New(NewRedis(c, g.prefix), Options{Now: newClock(t0).Now, SettleEvery: time.Hour, Exact: true})
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	chk := Check{Scope: keyScope("k1"), Policy: Policy{Concurrency: 10}}
	admit(t, l, ask(0, 0, chk)).Settle(ctx, 0, 0)
	l.Flush()
	h.closed.Store(true)
	var wg sync.WaitGroup
	for range maxPipelines {
		wg.Go(func() { admit(t, l, ask(0, 0, chk)) })
		<-h.held
	}
	cctx, cancel := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() {
		_, err := l.Reserve(cctx, ask(0, 0, chk))
		left <- err
	}()
	require.Eventually(t, func() bool {
		l.redis.cmu.Lock()
		defer l.redis.cmu.Unlock()
		return len(l.redis.waiting) == 1
	}, 5*time.Second, time.Millisecond)
	cancel()
	select { // while the gate is still closed
	case err := <-left:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting request stayed past its context")
	}
	h.closed.Store(false)
	close(h.open)
	wg.Wait()
	require.Equal(t, int64(maxPipelines), status(t, l, chk).InFlight)
}
