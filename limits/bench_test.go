package limits

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/switchyard-gw/switchyard/internal/redistest"
)

// A typical request's path: a key with rates, concurrency and a monthly budget, and its
// project with a budget. Budgets never run out here, and the clock stands still while
// the buckets are large enough for every iteration: every ask is admitted and settled.
func benchChecks() []Check {
	return []Check{
		{Scope: keyScope("k1"), Policy: Policy{RPM: 1 << 40, TPM: 1 << 50, Concurrency: 1 << 20, Budget: budget(1e15, PeriodMonth)}},
		{Scope: projectScope("p1"), Policy: Policy{RPM: 1 << 40, Budget: budget(1e15, PeriodMonth)}},
	}
}

// ids are made before the timer so that building them is not measured.
func benchIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "req-" + strconv.Itoa(i)
	}
	return ids
}

func benchReserveSettle(b *testing.B, l *Limiter) {
	checks := benchChecks()
	ids := benchIDs(b.N)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, err := l.Reserve(ctx, Ask{ID: ids[i], Checks: checks, Tokens: 1000, CostMicros: 50})
		if err != nil || d.Refused != nil {
			b.Fatalf("not admitted: %v %+v", err, d.Refused)
		}
		d.Reservation.Settle(ctx, 800, 40)
	}
}

func benchReserveSettleParallel(b *testing.B, l *Limiter) {
	checks := benchChecks()
	ids := benchIDs(b.N + 1024)
	var next atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			d, err := l.Reserve(ctx, Ask{ID: ids[next.Add(1)], Checks: checks, Tokens: 1000, CostMicros: 50})
			if err != nil || d.Refused != nil {
				b.Errorf("not admitted: %v %+v", err, d.Refused)
				return
			}
			d.Reservation.Settle(ctx, 800, 40)
		}
	})
}

func BenchmarkReserveSettleMemory(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		benchReserveSettle(b, New(NewMemory(), Options{Now: newClock(t0).Now}))
	})
	b.Run("parallel", func(b *testing.B) {
		benchReserveSettleParallel(b, New(NewMemory(), Options{Now: newClock(t0).Now}))
	})
}

func BenchmarkReserveSettleRedis(b *testing.B) {
	srv := redistest.Start(b)
	b.Run("serial", func(b *testing.B) {
		benchReserveSettle(b, benchRedisLimiter(b, srv, "bench:"))
	})
	b.Run("parallel", func(b *testing.B) {
		benchReserveSettleParallel(b, benchRedisLimiter(b, srv, "benchp:"))
	})
}

// benchRedisLimiter is closed before its client (cleanups run last first), so that its
// last queued settlements go out on an open client.
func benchRedisLimiter(b *testing.B, srv *redistest.Server, prefix string) *Limiter {
	l := New(NewRedis(newClient(b, srv), prefix), Options{Now: newClock(t0).Now})
	b.Cleanup(func() { _ = l.Close() })
	return l
}

// One request of the bench key the way admission makes it: two phases, both settled.
func BenchmarkRequestRedis(b *testing.B) {
	srv := redistest.Start(b)
	l := benchRedisLimiter(b, srv, "benchr:")
	ids := benchIDs(b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r := request(b, l, ids[i], benchKey); r != nil {
			b.Fatalf("refused: %+v", r)
		}
	}
}
