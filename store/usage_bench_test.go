package store

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-gw/switchyard/metering"
)

// Benchmarks of the usage ledger's database side. Run them with
//
//	go test -run '^$' -bench 'Usage|Ledger' -benchmem ./store/
//
// The PostgreSQL ones use SWITCHYARD_TEST_POSTGRES_DSN, or the throwaway cluster the
// tests start, which runs with fsync and synchronous_commit off: point the variable at
// a server with its production settings to measure what commits cost there. SQLite
// runs with its production settings (WAL, synchronous=FULL) in the temporary directory.
//
// Their figures are reported as metrics (ms/op and the like) and the query plans are
// logged; they assert nothing about time, which depends on the machine.

var (
	usageBenchKeys   = flag.Int("usage.keys", 1000, "BenchmarkUsageQuery: keys")
	usageBenchDays   = flag.Int("usage.days", 30, "BenchmarkUsageQuery: days")
	usageBenchPerDay = flag.Int("usage.perday", 20, "BenchmarkUsageQuery: records per key and day")
	ledgerRate       = flag.Int("ledger.rate", 2000, "BenchmarkLedgerThroughput: appends per second")
	ledgerSeconds    = flag.Duration("ledger.duration", 10*time.Second, "BenchmarkLedgerThroughput: how long to append")
)

// BenchmarkUsageQuery times the console's two usual questions over a month of usage:
// 30 days × 1,000 keys × 20 records (600,000 rows) by default.
//
//   - key-month: one key's month, by day (QueryUsage{KeyID, From, To, GroupBy: day}).
//   - day-all-keys: everyone's usage of one day, by day and model.
//
// Each iteration asks about another key or day, so the figures are not those of one
// page kept hot.
func BenchmarkUsageQuery(b *testing.B) {
	for _, d := range drivers {
		b.Run(d, func(b *testing.B) {
			ctx := context.Background()
			f := newFixture(b, d)
			s := f.open(b)
			start := utc(2026, 3, 1, 0, 0, 0, 0)
			keys, days, perDay := *usageBenchKeys, *usageBenchDays, *usageBenchPerDay
			loadStart := time.Now()
			for day := range days {
				rs := generateUsageDay(start, day, keys, perDay)
				for i := 0; i < len(rs); i += 5000 {
					if err := s.WriteUsage(ctx, "generator", int64(day), rs[i:min(i+5000, len(rs))]); err != nil {
						b.Fatal(err)
					}
				}
			}
			load := time.Since(loadStart)
			n := keys * days * perDay
			if f.driver == DriverPostgres {
				f.rows(b, `ANALYZE usage_records`) // what autovacuum does after such a load
			}
			b.Logf("%s: loaded %d rows in %v (%.0f rows/s through WriteUsage, batches of 5,000); %s",
				d, n, load.Round(time.Millisecond), float64(n)/load.Seconds(), usageSize(b, f))

			end := start.AddDate(0, 0, days)
			keyMonth := func(i int) metering.Query {
				// Keys visited in a scattered order.
				return metering.Query{KeyID: benchKeyID(i * 7919 % keys), From: start, To: end, GroupBy: []string{"day"}}
			}
			dayAll := func(i int) metering.Query {
				from := start.AddDate(0, 0, i*7%days)
				return metering.Query{From: from, To: from.AddDate(0, 0, 1), GroupBy: []string{"day", "model"}}
			}
			for _, bc := range []struct {
				name     string
				query    func(int) metering.Query
				wantRows int
			}{
				{"key-month", keyMonth, days},
				{"day-all-keys", dayAll, len(benchModels)},
			} {
				b.Logf("%s %s, plan:\n%s", d, bc.name, explainUsage(b, f, s, bc.query(1)))
				if f.driver == DriverPostgres {
					b.Logf("%s %s, EXPLAIN ANALYZE:\n%s", d, bc.name, explainAnalyze(b, f, s, bc.query(2)))
				}
				b.Run(bc.name, func(b *testing.B) {
					b.ReportAllocs()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						rows, err := s.QueryUsage(ctx, bc.query(i))
						if err != nil {
							b.Fatal(err)
						}
						if len(rows) != bc.wantRows {
							b.Fatalf("%d rows, want %d", len(rows), bc.wantRows)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
				})
			}
		})
	}
}

func explainAnalyze(tb testing.TB, f *fixture, s *Store, q metering.Query) string {
	uq, err := buildUsageQuery(s.ref.Load().usageDialect(), q)
	if err != nil {
		tb.Fatal(err)
	}
	var lines []string
	for _, r := range f.rows(tb, `EXPLAIN (ANALYZE, BUFFERS) `+uq.sql, uq.args...) {
		lines = append(lines, fmt.Sprint(r...))
	}
	return strings.Join(lines, "\n")
}

// usageSize describes how much room the usage table and its indexes take.
func usageSize(tb testing.TB, f *fixture) string {
	switch f.driver {
	case DriverSQLite:
		var total int64
		for _, suffix := range []string{"", "-wal"} {
			if info, err := os.Stat(f.dsn + suffix); err == nil {
				total += info.Size()
			}
		}
		return fmt.Sprintf("database file and WAL %.1f MB", float64(total)/1e6)
	default:
		r := f.rows(tb, `SELECT pg_table_size('usage_records'), pg_indexes_size('usage_records')`)[0]
		return fmt.Sprintf("table %.1f MB, indexes %.1f MB", float64(r[0].(int64))/1e6, float64(r[1].(int64))/1e6)
	}
}

// timedSink records how long each WriteUsage takes.
type timedSink struct {
	metering.Sink
	mu      sync.Mutex
	times   []time.Duration
	records int
}

func (t *timedSink) WriteUsage(ctx context.Context, journal string, upTo int64, rs []metering.Record) error {
	start := time.Now()
	err := t.Sink.WriteUsage(ctx, journal, upTo, rs)
	took := time.Since(start)
	t.mu.Lock()
	t.times = append(t.times, took)
	t.records += len(rs)
	t.mu.Unlock()
	return err
}

// loadRecord is a record as a gateway writes it, for request n.
func loadRecord(n int) metering.Record {
	return metering.Record{
		RequestID: fmt.Sprintf("sy_%08x%016x", n, n*2654435761), KeyID: benchKeyID(n % 1000),
		Model: benchModels[n%len(benchModels)], Candidate: "openai-primary", Protocol: "openai", Operation: "responses",
		Status: 200, Usage: metering.Usage{Input: 1800, CachedInput: 1024, Output: 420, Reasoning: 128},
		CostMicros: 5230, LatencyMs: 2300, TTFBMs: 410, Attempts: 1, Time: time.Now().UTC(),
		Tries: []metering.Try{{Candidate: "openai-primary", Status: 200, DurationMs: 2300}},
	}
}

// BenchmarkLedgerThroughput drives a ledger over each store at -ledger.rate appends a
// second (2,000) for -ledger.duration (10 s), with the ledger's default options (those
// the gateway uses), and reports:
//
//   - max-pending-B: the most journal bytes not yet in the database, sampled every
//     100 ms; the queue is bounded when this stays near one batch interval's worth.
//   - drain-ms: from the last Append until nothing is pending.
//   - batch-p50-ms, batch-p99-ms, batch-max-ms, records/batch: WriteUsage's latency.
//   - cpu-%: this process's CPU time (appends, journal reads, the driver, and for SQLite
//     the database itself) as a share of one core.
//
// One iteration takes the whole duration; run it with -benchtime=1x.
func BenchmarkLedgerThroughput(b *testing.B) {
	for _, d := range drivers {
		b.Run(d, func(b *testing.B) {
			f := newFixture(b, d)
			s := f.open(b)
			for i := 0; i < b.N; i++ {
				runLedgerLoad(b, f, s, *ledgerRate, *ledgerSeconds)
			}
		})
	}
}

func runLedgerLoad(b *testing.B, f *fixture, s *Store, rate int, duration time.Duration) {
	ctx := context.Background()
	sink := &timedSink{Sink: s}
	before := f.usageCount(b)
	l, err := metering.OpenLedger(ctx, b.TempDir(), sink, metering.Options{
		OnError: func(what string, err error) { b.Errorf("%s: %v", what, err) },
	})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()

	// The sampler: PendingBytes every 100 ms.
	var (
		samplesMu sync.Mutex
		samples   []int64
	)
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
				p := l.Stats().PendingBytes
				samplesMu.Lock()
				samples = append(samples, p)
				samplesMu.Unlock()
			}
		}
	}()

	var cpu0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &cpu0)
	total := int(float64(rate) * duration.Seconds())
	records := make([]metering.Record, total)
	for i := range records {
		records[i] = loadRecord(i)
	}
	start := time.Now()
	// Paced: each millisecond, the appends that are due by then.
	for sent := 0; sent < total; {
		due := min(total, int(time.Since(start).Seconds()*float64(rate)))
		for ; sent < due; sent++ {
			records[sent].Time = time.Now().UTC()
			if err := l.Append(&records[sent]); err != nil {
				b.Fatal(err)
			}
		}
		time.Sleep(time.Millisecond)
	}
	lastAppend := time.Now()
	appendPeriod := lastAppend.Sub(start)
	for l.Stats().PendingBytes > 0 {
		if time.Since(lastAppend) > time.Minute {
			b.Fatalf("still %d bytes pending a minute after the last append", l.Stats().PendingBytes)
		}
		time.Sleep(200 * time.Microsecond)
	}
	drain := time.Since(lastAppend)
	var cpu1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &cpu1)
	close(stopSampling)
	<-sampled

	if got := f.usageCount(b) - before; got != int64(total) {
		b.Fatalf("%d records in the database, want %d", got, total)
	}
	cpu := time.Duration(cpu1.Utime.Nano() + cpu1.Stime.Nano() - cpu0.Utime.Nano() - cpu0.Stime.Nano())
	elapsed := time.Since(start)

	sink.mu.Lock()
	times := slices.Clone(sink.times)
	batches, stored := len(times), sink.records
	sink.mu.Unlock()
	slices.Sort(times)
	pct := func(p float64) time.Duration { return times[min(len(times)-1, int(p*float64(len(times))))] }
	samplesMu.Lock()
	maxPending := int64(0)
	perSecond := make([]int64, 0, len(samples)/10+1) // the largest sample of each second
	for i, p := range samples {
		maxPending = max(maxPending, p)
		if i%10 == 0 {
			perSecond = append(perSecond, 0)
		}
		perSecond[len(perSecond)-1] = max(perSecond[len(perSecond)-1], p)
	}
	samplesMu.Unlock()

	b.ReportMetric(float64(total)/appendPeriod.Seconds(), "appends/s")
	b.ReportMetric(float64(maxPending), "max-pending-B")
	b.ReportMetric(float64(drain.Microseconds())/1000, "drain-ms")
	b.ReportMetric(float64(pct(0.5).Microseconds())/1000, "batch-p50-ms")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "batch-p99-ms")
	b.ReportMetric(float64(times[len(times)-1].Microseconds())/1000, "batch-max-ms")
	b.ReportMetric(float64(stored)/float64(batches), "records/batch")
	b.ReportMetric(100*cpu.Seconds()/elapsed.Seconds(), "cpu-%")
	b.Logf("%s: %d appends in %v; %d batches; max pending per second (bytes): %v",
		f.driver, total, appendPeriod.Round(time.Millisecond), batches, perSecond)
}

// BenchmarkLedgerAppend is what each request pays to put its record in the journal:
// one JSON encoding and one write(2) under the ledger's lock. Over sqlite and postgres
// the background writer moves earlier records into the store meanwhile, competing for
// the CPU, and its allocations are counted in B/op and allocs/op too; with
// "no-database" the sink refuses every batch, so the writer backs off and the figures
// are Append's alone. "parallel" appends from every core at once.
func BenchmarkLedgerAppend(b *testing.B) {
	for _, d := range append([]string{"no-database"}, drivers...) {
		for _, parallel := range []bool{false, true} {
			name := d
			if parallel {
				name += "/parallel"
			}
			b.Run(name, func(b *testing.B) {
				var sink metering.Sink = downSink{}
				if d != "no-database" {
					sink = newFixture(b, d).open(b)
				}
				l, err := metering.OpenLedger(context.Background(), filepath.Join(b.TempDir(), "journal"), sink, metering.Options{})
				if err != nil {
					b.Fatal(err)
				}
				// A fixed set of records in turn: the database skips repeats.
				records := make([]metering.Record, 4096)
				for i := range records {
					records[i] = loadRecord(i)
				}
				b.ReportAllocs()
				b.ResetTimer()
				if parallel {
					var next atomic.Int64
					b.RunParallel(func(pb *testing.PB) {
						i := int(next.Add(1)) * 997
						for pb.Next() {
							if err := l.Append(&records[i%len(records)]); err != nil {
								b.Error(err)
								return
							}
							i++
						}
					})
				} else {
					for i := 0; i < b.N; i++ {
						if err := l.Append(&records[i%len(records)]); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.StopTimer()
				_ = l.Close()
			})
		}
	}
}

// downSink is a database that is away.
type downSink struct{}

func (downSink) WriteUsage(context.Context, string, int64, []metering.Record) error {
	return errors.New("database away")
}

func (downSink) JournalPosition(context.Context, string) (int64, error) { return 0, nil }

// BenchmarkWriteUsage is the store's side alone: one WriteUsage of a batch of new
// records, by batch size. records/s is how many a single ledger could move at most.
func BenchmarkWriteUsage(b *testing.B) {
	for _, d := range drivers {
		for _, size := range []int{40, 1000} {
			b.Run(fmt.Sprintf("%s/batch=%d", d, size), func(b *testing.B) {
				ctx := context.Background()
				f := newFixture(b, d)
				s := f.open(b)
				n := 0
				batch := make([]metering.Record, size)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					for j := range batch {
						batch[j] = loadRecord(n)
						n++
					}
					b.StartTimer()
					if err := s.WriteUsage(ctx, "bench", int64(n), batch); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
				b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "records/s")
			})
		}
	}
}
