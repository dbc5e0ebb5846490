package limits

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

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
// Besides the gateway's side (ns/op, allocs/op) it reports Redis's: the server's CPU
// (INFO cpu) and the commands its scripts ran (INFO commandstats), per request.
func BenchmarkRequestRedis(b *testing.B) {
	srv := redistest.Start(b)
	l := benchRedisLimiter(b, srv, "benchr:")
	ids := benchIDs(b.N)
	bothSides(b, srv, l, func() {
		for i := 0; i < b.N; i++ {
			if r := request(b, l, ids[i], benchKey); r != nil {
				b.Fatalf("refused: %+v", r)
			}
		}
	})
}

// The same with 32 requests at once, as make bench sends them.
func BenchmarkRequestRedisConcurrent(b *testing.B) {
	srv := redistest.Start(b)
	l := benchRedisLimiter(b, srv, "benchc:")
	ids := benchIDs(b.N + 1024)
	var next atomic.Int64
	bothSides(b, srv, l, func() {
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if r := request(b, l, ids[next.Add(1)], benchKey); r != nil {
					b.Errorf("refused: %+v", r)
					return
				}
			}
		})
	})
}

// bothSides runs f, timed, and reports the CPU both sides used and the commands Redis
// ran, per request.
func bothSides(b *testing.B, srv *redistest.Server, l *Limiter, f func()) {
	admin := newClient(b, srv)
	ctx := context.Background()
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	cpu0, own0 := serverCPU(b, admin), ownCPU(b)
	b.ReportAllocs()
	b.ResetTimer()
	f()
	l.Flush()
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric((ownCPU(b)-own0)/n, "gw-cpu-µs/op")
	b.ReportMetric((serverCPU(b, admin)-cpu0)/n, "redis-µs/op")
	b.ReportMetric(float64(serverCommands(b, admin))/n, "redis-cmds/op")
	scripts, commands := scriptMicros(b, admin)
	b.ReportMetric(scripts/n, "redis-script-µs/op")
	b.ReportMetric(commands/n, "redis-script-cmds-µs/op")
	if testing.Verbose() {
		info, _ := admin.Info(ctx, "commandstats").Result()
		b.Log(info)
	}
}

// serverCPU is the CPU time redis-server has used, in µs.
func serverCPU(b *testing.B, admin *redis.Client) float64 {
	info, err := admin.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\r\n") {
		name, v, ok := strings.Cut(line, ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			sum += f * 1e6
		}
	}
	return sum
}

// ownCPU is the CPU time this process (the gateway's side) has used, in µs.
func ownCPU(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
}

// scriptMicros is the time redis-server spent running scripts (EVALSHA and EVAL, their
// commands included), and within it the commands the scripts called, in µs: the
// difference is the scripts' own Lua, arguments and calls.
func scriptMicros(b *testing.B, admin *redis.Client) (scripts, commands float64) {
	for name, st := range commandStats(b, admin) {
		if name == "evalsha" || name == "eval" {
			scripts += st.usec
		} else {
			commands += st.usec
		}
	}
	return scripts, commands
}

// BenchmarkRedisRoundTripFloor is what one call to this Redis costs before any limit is
// checked: a PING, and a script that does nothing, one at a time. A request's admission
// cannot take less than that on the same machine; BenchmarkRequestRedis less this is
// the limits' own share.
func BenchmarkRedisRoundTripFloor(b *testing.B) {
	srv := redistest.Start(b)
	c := newClient(b, srv)
	ctx := context.Background()
	b.Run("ping", func(b *testing.B) {
		for b.Loop() {
			if err := c.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	nothing := redis.NewScript(`return 1`)
	b.Run("empty-script", func(b *testing.B) {
		for b.Loop() {
			if err := nothing.Run(ctx, c, []string{"k"}).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
