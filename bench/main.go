// Command bench is Switchyard's load benchmark (`make bench`): it starts on 127.0.0.1 a
// fixed-response upstream, a stock Caddy reverse_proxy built from the same Caddy version,
// and Switchyard configured as in production, drives each in interleaved rounds with its
// own load generator, prints a table with Switchyard ÷ stock Caddy ratios, and writes
// the raw figures as JSON. Switchyard also runs with the bench key's limits on (counters
// in memory, and in a throwaway redis-server when there is one) in the latency,
// throughput and stream rounds, for a second table: limits on ÷ limits off.
//
//	bench [-switchyard bin/switchyard] [-stock bin/caddy-stock] [-out bench/results/latest.json]
//	      [-pprof DIR] [-quick] [-timeout 9m30s] [-limits limits_memory,limits_redis]
//
// Every run is bounded in count and time, binds only to 127.0.0.1, and stops every
// process it started. `bench upstream` is the fixed upstream itself (a child process).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"
)

// plan holds the counts of every phase.
type plan struct {
	Warmup int `json:"warmup_requests"`

	LatRounds int `json:"latency_rounds"`
	LatN      int `json:"latency_requests_per_round"`

	TpRounds int `json:"throughput_rounds"`
	TpN      int `json:"throughput_requests_per_round"`
	TpConc   int `json:"throughput_concurrency"`

	StrRounds int `json:"stream_rounds"`
	StrN      int `json:"stream_requests_per_round"`
	StrConc   int `json:"stream_concurrency"`

	PacedRounds int           `json:"paced_rounds"`
	PacedN      int           `json:"paced_streams_per_round"`
	PacedConc   int           `json:"paced_concurrency"`
	PacedEvery  time.Duration `json:"paced_interval_ns"`

	BigRounds int `json:"body_rounds"`
	BigN      int `json:"body_requests_per_round"`
	BigSize   int `json:"body_bytes"`

	AgentRounds int `json:"agent_rounds"`
	AgentN      int `json:"agent_requests_per_round"`

	MemLevels   []int         `json:"memory_levels"`
	MemH1Levels []int         `json:"memory_levels_http1"`
	MemDrip     time.Duration `json:"memory_drip_interval_ns"`
}

var fullPlan = plan{
	Warmup:    500,
	LatRounds: 10, LatN: 2000,
	TpRounds: 5, TpN: 15000, TpConc: 32,
	StrRounds: 5, StrN: 1000, StrConc: 8,
	PacedRounds: 6, PacedN: 12, PacedConc: 4, PacedEvery: 10 * time.Millisecond,
	BigRounds: 3, BigN: 20, BigSize: 1 << 20,
	AgentRounds: 6, AgentN: 200,
	MemLevels: []int{1000, 10000}, MemH1Levels: []int{1000}, MemDrip: time.Second,
}

var quickPlan = plan{
	Warmup:    100,
	LatRounds: 2, LatN: 300,
	TpRounds: 2, TpN: 2000, TpConc: 32,
	StrRounds: 1, StrN: 50, StrConc: 8,
	PacedRounds: 1, PacedN: 4, PacedConc: 4, PacedEvery: 10 * time.Millisecond,
	BigRounds: 1, BigN: 5, BigSize: 1 << 20,
	AgentRounds: 1, AgentN: 20,
	MemLevels: []int{200, 1000}, MemH1Levels: []int{200}, MemDrip: time.Second,
}

type options struct {
	switchyard, stock string
	out               string
	pprofDir          string
	phases            map[string]bool
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "upstream" {
		if err := runUpstream(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "upstream:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.StringVar(&o.switchyard, "switchyard", "bin/switchyard", "the Switchyard binary (make build)")
	flag.StringVar(&o.stock, "stock", "bin/caddy-stock", "the stock Caddy binary (bench/stock-caddy.json)")
	flag.StringVar(&o.out, "out", "bench/results/latest.json", "where to write the raw figures (JSON); empty for nowhere")
	flag.StringVar(&o.pprofDir, "pprof", "", "save CPU, heap and allocation profiles of both proxies into this folder")
	flag.StringVar(&stockFlushInterval, "stock-flush-interval", stockFlushInterval, "flush_interval of stock Caddy's reverse_proxy; empty for Caddy's default")
	flag.DurationVar(&memChurn, "mem-churn", memChurn, "longest a proxy holding streams serves requests before its resident memory is read (it stops after two GC cycles)")
	memDrip := flag.Duration("mem-drip", 0, "interval between the events of each held stream (default: the plan's)")
	flag.StringVar(&memProtocols, "mem-protocols", memProtocols, "protocols the memory phase uses, comma-separated (h1, h2c)")
	flag.StringVar(&memUpstreams, "mem-upstreams", memUpstreams, "how the proxies reach the upstream in the memory phase, comma-separated (h2 over TLS, h1 in clear)")
	flag.StringVar(&memProxies, "mem-proxies", memProxies, "proxies the memory phase measures, comma-separated (stock, switchyard)")
	flag.BoolVar(&memTrace, "mem-trace", false, "print resident memory every second while streams settle")
	flag.StringVar(&limitVariants, "limits", limitVariants, "Switchyard-with-limits variants the latency, throughput and stream phases add, comma-separated (limits_memory, limits_redis, limits_redis_exact); empty for none")
	flag.StringVar(&switchyardStore, "switchyard-store", switchyardStore, `Switchyard's store: "sqlite" (production) or "off" (no keys store, metering or ledger)`)
	flag.BoolVar(&benchTracing, "tracing", benchTracing, "add Switchyard with tracing on (spans exported to a sink here) to the latency, throughput and stream phases")
	quick := flag.Bool("quick", false, "small counts: a check that everything runs, not a measurement")
	timeout := flag.Duration("timeout", 9*time.Minute+30*time.Second, "stop everything after this long")
	only := flag.String("only", "", "comma-separated phases to run (latency,throughput,stream,paced,body,agent,memory); default all")
	flag.Parse()

	p := fullPlan
	if *quick {
		p = quickPlan
		// A quick run is no measurement: keep it away from the figures docs/benchmarks.md quotes.
		if filepath.Base(o.out) == "latest.json" {
			o.out = filepath.Join(filepath.Dir(o.out), "quick.json")
		}
	}
	if *memDrip > 0 {
		p.MemDrip = *memDrip
	}
	o.phases = map[string]bool{}
	for _, ph := range strings.Split(*only, ",") {
		if ph = strings.TrimSpace(ph); ph != "" {
			o.phases[ph] = true
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sigs
		progress("received %v: stopping", s)
		cancel()
		time.Sleep(10 * time.Second)
		killAll()
		os.Exit(130)
	}()
	// A hard stop a little after the time limit, whatever is stuck.
	watchdog := time.AfterFunc(*timeout+45*time.Second, func() {
		fmt.Fprintln(os.Stderr, "bench: time limit exceeded; killing every child process")
		killAll()
		os.Exit(3)
	})
	defer watchdog.Stop()

	err := run(ctx, o, p, *quick)
	killAll()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

var benchStart = time.Now()

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%5.1fs] %s\n", time.Since(benchStart).Seconds(), fmt.Sprintf(format, args...))
}

func (o options) want(phase string) bool { return len(o.phases) == 0 || o.phases[phase] }

func run(ctx context.Context, o options, p plan, quick bool) error {
	debug.SetGCPercent(400)
	for _, bin := range []*string{&o.switchyard, &o.stock} {
		if _, err := os.Stat(*bin); err != nil {
			return fmt.Errorf("%s: %w (make bench builds it)", *bin, err)
		}
		abs, err := filepath.Abs(*bin)
		if err != nil {
			return err
		}
		*bin = abs
	}
	swVersion, err := binaryVersion(o.switchyard)
	if err != nil {
		return err
	}
	stockVersion, err := binaryVersion(o.stock)
	if err != nil {
		return err
	}
	if swVersion != stockVersion {
		return fmt.Errorf("Caddy versions differ: %s is %s, %s is %s; set caddy_version in bench/stock-caddy.json to the one in xcaddy.json and run make bench again",
			o.switchyard, swVersion, o.stock, stockVersion)
	}
	fdLimit, err := raiseFileLimit()
	if err != nil {
		return err
	}

	tmp, err := os.MkdirTemp("", "switchyard-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	res := &results{
		Date:         time.Now().UTC().Format(time.RFC3339),
		Machine:      machineInfo(fdLimit),
		CaddyVersion: swVersion,
		StockFlush:   stockFlushInterval,
		Store:        switchyardStore,
		Quick:        quick,
		Plan:         p,
		Errors:       []string{},
	}
	progress("Caddy %s on both proxies; %d cores; file limit %d", swVersion, runtime.NumCPU(), fdLimit)

	cpu0 := machineCPU()
	up, upAddr, upTLSAddr, err := startUpstream(tmp)
	if err != nil {
		return err
	}
	defer up.stop()
	progress("fixed upstream on %s (HTTP/1.1) and %s (TLS, HTTP/2)", upAddr, upTLSAddr)

	if o.want("latency") || o.want("throughput") || o.want("stream") || o.want("paced") || o.want("body") || o.want("agent") {
		if err := runLoadPhases(ctx, o, p, tmp, upAddr, res); err != nil {
			return err
		}
	}
	if o.want("memory") && ctx.Err() == nil {
		res.Memory = runMemory(ctx, o, p, tmp, upAddr, upTLSAddr, fdLimit, res)
	}
	if ctx.Err() != nil {
		res.Errors = append(res.Errors, "stopped early: "+ctx.Err().Error())
	}
	up.stop()
	res.Machine.OtherCPUShare = otherCPUShare(cpu0, machineCPU())
	if res.Machine.OtherCPUShare > 0.05 {
		progress("warning: other processes used %.0f%% of the machine's CPU during the run; figures are noisier than usual",
			100*res.Machine.OtherCPUShare)
	}
	res.Elapsed = round(time.Since(benchStart).Seconds(), 1)
	res.evaluate()

	fmt.Println()
	fmt.Print(res.markdown())
	if o.out != "" {
		if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
			return err
		}
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.out, append(b, '\n'), 0o644); err != nil {
			return err
		}
		progress("raw figures written to %s", o.out)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

// runLoadPhases starts both proxies once and runs every request-driven phase on them.
func runLoadPhases(ctx context.Context, o options, p plan, tmp, upAddr string, res *results) error {
	stock, err := startProxy(ctx, "stock", o.stock, filepath.Join(tmp, "stock"), "http://"+upAddr, "")
	if err != nil {
		return err
	}
	defer stock.proc.stop()
	sw, err := startProxy(ctx, "switchyard", o.switchyard, filepath.Join(tmp, "switchyard"), "http://"+upAddr, "")
	if err != nil {
		return err
	}
	defer sw.proc.stop()
	direct := &target{name: "direct", label: "upstream directly", addr: upAddr}
	progress("stock Caddy on %s (admin %s), Switchyard on %s (admin %s)", stock.addr, stock.admin, sw.addr, sw.admin)
	// Switchyard with limits on, and with tracing on, take part in the request-driven phases that measure a
	// request's cost (latency, throughput, unpaced streams); the paced, body and memory
	// phases compare Switchyard with stock Caddy only.
	var limited []*target
	var sink *otlpSink
	if o.want("latency") || o.want("throughput") || o.want("stream") {
		var rs *redisServer
		limited, rs, err = startLimitVariants(ctx, o, tmp, upAddr, res)
		defer rs.stop()
		for _, t := range limited {
			defer t.proc.stop()
			progress("%s on %s (admin %s)", t.label, t.addr, t.admin)
		}
		if err != nil {
			return err
		}
		if rs != nil {
			progress("redis-server on %s (nothing persisted)", rs.addr)
		}
		if benchTracing {
			tr, s, err := startTracingVariant(ctx, o, tmp, upAddr)
			if err != nil {
				return err
			}
			defer s.stop()
			defer tr.proc.stop()
			progress("%s on %s (admin %s), spans to %s", tr.label, tr.addr, tr.admin, s.addr)
			limited, sink = append(limited, tr), s
		}
	}
	// Interleaved: A B C, A B C, …
	targets := append(append([]*target{stock, sw}, limited...), direct)
	basic := []*target{stock, sw, direct}

	progress("warm-up: %d requests and %d streams each", p.Warmup, p.Warmup/20)
	for _, t := range targets {
		if _, err := serial(ctx, t, p.Warmup, chatRequest(t.addr, "json", "", smallBody)); err != nil {
			return fmt.Errorf("warm-up of %s: %w", t.name, err)
		}
		if _, err := serial(ctx, t, p.Warmup/20, chatRequest(t.addr, "stream", "", streamBody)); err != nil {
			return fmt.Errorf("warm-up of %s: %w", t.name, err)
		}
	}
	if o.want("latency") {
		res.Latency = latencyPhase(ctx, p, targets, res)
	}
	if o.want("throughput") {
		res.Throughput = throughputPhase(ctx, o, p, targets, res)
	}
	if o.want("stream") {
		res.Stream = streamPhase(ctx, o, p, targets, res, shapeChat)
		// The other shapes against stock Caddy only: what each shape's events cost.
		res.StreamShapes = map[string]*streamResult{}
		for _, shape := range []string{shapeResponses, shapeMessages} {
			if ctx.Err() == nil {
				res.StreamShapes[shape] = streamPhase(ctx, o, p, basic, res, shape)
			}
		}
	}
	if res.Limits != nil {
		res.Limits.summarize(res)
	}
	if sink != nil {
		res.Tracing = summarizeTracing(res, sink)
	}
	if o.want("paced") {
		res.Paced = pacedPhase(ctx, p, basic, upAddr, res)
	}
	if o.want("body") {
		res.Body = bodyPhase(ctx, o, p, []*target{stock, sw}, res)
	}
	if o.want("agent") {
		res.Agent = agentPhase(ctx, p, basic, res)
	}
	for _, t := range append([]*target{stock, sw}, limited...) {
		if t.proc.exited() {
			return fmt.Errorf("%s exited during the run (%v)", t.name, t.proc.err)
		}
	}
	return nil
}

// binaryVersion is the Caddy version a binary reports (`caddy version`).
func binaryVersion(bin string) (string, error) {
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		return "", fmt.Errorf("%s version: %w", bin, err)
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return "", fmt.Errorf("%s version: no output", bin)
	}
	return f[0], nil
}

// raiseFileLimit lifts the soft limit on open files to the hard one; the proxies and the
// upstream inherit it. Holding n streams takes 2n descriptors in a proxy.
func raiseFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	want := max(lim.Max, 1<<17)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: want}); err == nil {
		return want, nil
	}
	// Raising the hard limit needs CAP_SYS_RESOURCE; take what there is.
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("setrlimit: %w", err)
	}
	return lim.Cur, nil
}

func machineInfo(fdLimit uint64) machine {
	m := machine{Cores: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, Go: runtime.Version(), FileLimit: fdLimit}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			m.MemoryGiB = round(float64(kb)/(1<<20), 1)
		}
	}
	return m
}

var errStopped = errors.New("stopped")

// cpuSample is the machine's CPU time (/proc/stat, in ticks) and this process tree's
// (itself and its waited-for children, in seconds).
type cpuSample struct {
	busy, total float64
	ours        float64
}

func machineCPU() cpuSample {
	var s cpuSample
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		for i, v := range f[1:] {
			var n float64
			fmt.Sscan(v, &n)
			s.total += n
			if i != 3 && i != 4 { // idle, iowait
				s.busy += n
			}
		}
		s.busy /= clockTick
		s.total /= clockTick
	}
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if syscall.Getrusage(who, &ru) == nil {
			s.ours += time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
		}
	}
	return s
}

// otherCPUShare is the share of the machine's CPU that processes other than the
// benchmark's used between two samples: other work on a shared machine skews latency
// and throughput (less so CPU per request).
func otherCPUShare(a, b cpuSample) float64 {
	total := b.total - a.total
	if total <= 0 {
		return 0
	}
	return round(max(0, (b.busy-a.busy)-(b.ours-a.ours))/total, 3)
}
