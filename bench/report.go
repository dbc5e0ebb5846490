package main

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

type machine struct {
	Cores     int     `json:"cores"`
	CPU       string  `json:"cpu"`
	MemoryGiB float64 `json:"memory_gib"`
	Kernel    string  `json:"kernel"`
	GOOS      string  `json:"goos"`
	GOARCH    string  `json:"goarch"`
	Go        string  `json:"go"`
	FileLimit uint64  `json:"file_limit"`
	// OtherCPUShare is the share of all CPU time that other processes took during the run.
	OtherCPUShare float64 `json:"other_processes_cpu_share"`
}

// results is everything a run measured; it is written as JSON as is.
type results struct {
	Date         string            `json:"date"`
	Machine      machine           `json:"machine"`
	CaddyVersion string            `json:"caddy_version"`
	StockFlush   string            `json:"stock_flush_interval"`
	Store        string            `json:"switchyard_store"`
	Quick        bool              `json:"quick"`
	Plan         plan              `json:"plan"`
	Elapsed      float64           `json:"elapsed_seconds"`
	Latency      *latencyResult    `json:"latency,omitempty"`
	Throughput   *throughputResult `json:"throughput,omitempty"`
	Stream       *streamResult     `json:"stream,omitempty"` // chat
	// StreamShapes are the Responses and Messages streams, measured as Stream is.
	StreamShapes map[string]*streamResult `json:"stream_shapes,omitempty"`
	Paced        *pacedResult             `json:"paced_stream,omitempty"`
	Body         *bodyResult              `json:"large_body,omitempty"`
	Agent        *agentResult             `json:"coding_agent,omitempty"`
	Memory       *memoryResult            `json:"memory,omitempty"`
	Limits       *limitsResult            `json:"limits,omitempty"`
	Tracing      *tracingResult           `json:"tracing,omitempty"`
	Targets      []check                  `json:"targets"`
	Errors       []string                 `json:"errors"`

	mu sync.Mutex
}

func (r *results) errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	progress("error: %s", msg)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.Errors) < 200 {
		r.Errors = append(r.Errors, msg)
	}
}

type latencyResult struct {
	Concurrency      int                   `json:"concurrency"`
	Rounds           int                   `json:"rounds"`
	RequestsPerRound int                   `json:"requests_per_round"`
	Targets          map[string]*latTarget `json:"targets"`
	AddedP50Ratio    float64               `json:"added_p50_ratio"`
	AddedP99Ratio    float64               `json:"added_p99_ratio"`
	CPURatio         float64               `json:"cpu_per_request_ratio"`
}

type latTarget struct {
	Latency         dist      `json:"latency"`
	RoundP50        []float64 `json:"round_p50_us"`
	AddedP50        float64   `json:"added_p50_us,omitempty"`
	AddedP99        float64   `json:"added_p99_us,omitempty"`
	CPUPerRequestUs float64   `json:"cpu_per_request_us,omitempty"`
	AllocPerRequest float64   `json:"alloc_bytes_per_request,omitempty"`
	// The redis-server's own CPU, commands (those run by scripts included) and script
	// calls (settlements pipelined ahead of admissions: not round trips) per request (limits in Redis only).
	RedisCPUPerRequestUs    float64 `json:"redis_cpu_per_request_us,omitempty"`
	RedisCommandsPerRequest float64 `json:"redis_commands_per_request,omitempty"`
	RedisScriptsPerRequest  float64 `json:"redis_script_calls_per_request,omitempty"`
	Errors                  int     `json:"errors"`
}

type throughputResult struct {
	Concurrency      int                  `json:"concurrency"`
	Rounds           int                  `json:"rounds"`
	RequestsPerRound int                  `json:"requests_per_round"`
	Targets          map[string]*tpTarget `json:"targets"`
	RPSRatio         float64              `json:"rps_ratio"`
	CPURatio         float64              `json:"cpu_per_request_ratio"`
	// The same ratios within each round, whose two proxies ran minutes apart at most:
	// their spread shows how much the machine's neighbours moved the totals.
	RoundRPSRatios []float64 `json:"round_rps_ratios,omitempty"`
	RoundCPURatios []float64 `json:"round_cpu_per_request_ratios,omitempty"`
}

type tpTarget struct {
	RPS      float64   `json:"requests_per_second"`
	RoundRPS []float64 `json:"round_requests_per_second"`
	// RoundCPUPerRequestUs is the CPU per request of each round.
	RoundCPUPerRequestUs []float64 `json:"round_cpu_per_request_us,omitempty"`
	Latency              dist      `json:"latency"`
	CPUPerRequestUs      float64   `json:"cpu_per_request_us,omitempty"`
	CPUCores             float64   `json:"cpu_cores_used,omitempty"`
	// The redis-server's own CPU, commands (those run by scripts included) and script
	// calls (settlements pipelined ahead of admissions: not round trips) per request (limits in Redis only).
	RedisCPUPerRequestUs    float64 `json:"redis_cpu_per_request_us,omitempty"`
	RedisCPUCores           float64 `json:"redis_cpu_cores_used,omitempty"`
	RedisCommandsPerRequest float64 `json:"redis_commands_per_request,omitempty"`
	RedisScriptsPerRequest  float64 `json:"redis_script_calls_per_request,omitempty"`
	Errors                  int     `json:"errors"`
}

type streamResult struct {
	Shape            string                `json:"shape"` // chat, responses or messages
	Concurrency      int                   `json:"concurrency"`
	Rounds           int                   `json:"rounds"`
	RequestsPerRound int                   `json:"requests_per_round"`
	EventsPerStream  int                   `json:"events_per_stream"`
	Targets          map[string]*strTarget `json:"targets"`
	CPURatio         float64               `json:"cpu_per_stream_ratio"`
	RateRatio        float64               `json:"streams_per_second_ratio"`
	// The same ratios within each round (see throughputResult).
	RoundCPURatios  []float64 `json:"round_cpu_per_stream_ratios,omitempty"`
	RoundRateRatios []float64 `json:"round_streams_per_second_ratios,omitempty"`
}

type strTarget struct {
	Duration dist `json:"duration"`
	// Streams completed per second of wall time, every round's streams over every
	// round's wall time (the workers stream back to back).
	StreamsPerSecond float64   `json:"streams_per_second"`
	RoundRate        []float64 `json:"round_streams_per_second"`
	// RoundCPUPerStreamUs is the CPU per stream of each round.
	RoundCPUPerStreamUs []float64 `json:"round_cpu_per_stream_us,omitempty"`
	CPUPerStreamUs      float64   `json:"cpu_per_stream_us,omitempty"`
	CPUPerEventUs       float64   `json:"cpu_per_event_us,omitempty"`
	// The proxy's read and write system calls per stream, from either side (the
	// client's and the upstream's connections alike).
	ReadsPerStream  float64 `json:"reads_per_stream,omitempty"`
	WritesPerStream float64 `json:"writes_per_stream,omitempty"`
	// The redis-server's own CPU per stream (limits in Redis only).
	RedisCPUPerStreamUs float64 `json:"redis_cpu_per_stream_us,omitempty"`
	Errors              int     `json:"errors"`
}

type pacedResult struct {
	Concurrency        int                     `json:"concurrency"`
	Rounds             int                     `json:"rounds"`
	StreamsPerRound    int                     `json:"streams_per_round"`
	IntervalMs         float64                 `json:"interval_ms"`
	Targets            map[string]*pacedTarget `json:"targets"`
	ExtraPerEventP50   float64                 `json:"switchyard_minus_stock_per_event_p50_us"`
	ExtraPerEventMean  float64                 `json:"switchyard_minus_stock_per_event_mean_us"`
	TTFERatio          float64                 `json:"time_to_first_event_p50_ratio"`
	FirstEventHeldBack bool                    `json:"first_event_held_back"`
}

type pacedTarget struct {
	Streams           int     `json:"streams"`
	EventDelay        dist    `json:"event_delay"`
	FirstEventDelay   dist    `json:"first_event_delay"`
	TimeToFirstEvent  dist    `json:"time_to_first_event"`
	AddedPerEventP50  float64 `json:"added_per_event_p50_us,omitempty"`
	AddedPerEventMean float64 `json:"added_per_event_mean_us,omitempty"`
	Errors            int     `json:"errors"`
}

type bodyResult struct {
	BodyBytes        int                    `json:"body_bytes"`
	Rounds           int                    `json:"rounds"`
	RequestsPerRound int                    `json:"requests_per_round"`
	Targets          map[string]*bodyTarget `json:"targets"`
}

type bodyTarget struct {
	Latency         dist    `json:"latency"`
	AllocPerRequest float64 `json:"alloc_bytes_per_request"`
	AllocPerBody    float64 `json:"alloc_per_body_byte"`
	Errors          int     `json:"errors"`
}

type memoryResult struct {
	DripInterval string    `json:"drip_interval"`
	FileLimit    uint64    `json:"file_limit"`
	Runs         []*memRun `json:"runs"`
	Notes        []string  `json:"notes,omitempty"`
}

type memRun struct {
	Proxy    string `json:"proxy"`
	Protocol string `json:"protocol"`
	// Upstream is how the proxy reaches the upstream: "h2" over TLS (what every hosted
	// provider speaks), "h1" in clear (a model server on the next machine).
	Upstream       string         `json:"upstream"`
	IdleRSS        int64          `json:"idle_rss_bytes"`
	Idle           runtimeFigures `json:"idle"`
	Levels         []*memLevel    `json:"levels"`
	Streams        int            `json:"streams"`
	EventsSent     int64          `json:"events_sent"`
	EventsReceived int64          `json:"events_received"`
	EventsLost     int64          `json:"events_lost"`
	Incomplete     int            `json:"streams_incomplete"`
	Error          string         `json:"error,omitempty"`
}

type memLevel struct {
	Streams     int     `json:"streams"`
	Open        int     `json:"open"`
	Failed      int     `json:"failed"`
	OpenSeconds float64 `json:"seconds_to_open"`
	// RSSAtOpen is read a second after the last stream opened; RSS is the highest
	// reading while the proxy then serves requests through two GC cycles (see churn).
	RSSAtOpen     int64 `json:"rss_at_open_bytes"`
	RSS           int64 `json:"rss_bytes"`
	ChurnRequests int   `json:"churn_requests"`
	// ChurnCollections is how many GC cycles the proxy finished during the churn.
	ChurnCollections int     `json:"churn_collections"`
	PerStreamBytes   float64 `json:"rss_per_stream_bytes"`
	PerStreamAtOpen  float64 `json:"rss_per_stream_at_open_bytes"`
	runtimeFigures
	HeapPerStream       float64 `json:"heap_inuse_per_stream_bytes"`
	StackPerStream      float64 `json:"stack_per_stream_bytes"`
	GoroutinesPerStream float64 `json:"goroutines_per_stream"`
}

func (m *memoryResult) run(proxy, proto, upstream string) *memRun {
	if m == nil {
		return nil
	}
	for _, r := range m.Runs {
		if r.Proxy == proxy && r.Protocol == proto && r.Upstream == upstream {
			return r
		}
	}
	return nil
}

// check is one goal (of issue 14, or of issue 7 where issue 14 leaves it standing) and
// where the run stands against it.
type check struct {
	Name   string  `json:"name"`
	Issue  int     `json:"issue"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Target string  `json:"target"`
	Met    bool    `json:"met"`
}

// clientProtoNames and upstreamNames name the memory phase's two sides in the tables.
var (
	clientProtoNames = map[string]string{"h1": "HTTP/1.1", "h2c": "h2c"}
	upstreamNames    = map[string]string{"h2": "upstream HTTP/2 over TLS", "h1": "upstream HTTP/1.1"}
)

// memGoalKiB is issue 14's bound on Switchyard's resident memory per open stream.
const memGoalKiB = 64

// evaluate fills Targets: every figure of issue 14's table, in its order, then issue 7's
// checks that issue 14 does not replace. A figure the run did not measure is left out.
// streams are the stream phase's results, chat first.
func (r *results) streams() []*streamResult {
	var out []*streamResult
	if r.Stream != nil {
		out = append(out, r.Stream)
	}
	for _, shape := range []string{shapeResponses, shapeMessages} {
		if s := r.StreamShapes[shape]; s != nil {
			out = append(out, s)
		}
	}
	return out
}

func (r *results) evaluate() {
	add := func(issue int, name string, v float64, unit, target string, met bool) {
		r.Targets = append(r.Targets, check{Name: name, Issue: issue, Value: v, Unit: unit, Target: target, Met: met})
	}
	if t := r.Throughput; t != nil {
		add(14, fmt.Sprintf("CPU per request, concurrency %d, Switchyard ÷ stock Caddy", t.Concurrency), t.CPURatio, "×", "≤ 1.00", t.CPURatio > 0 && t.CPURatio <= 1.00)
		add(14, fmt.Sprintf("Throughput, concurrency %d, Switchyard ÷ stock Caddy", t.Concurrency), t.RPSRatio, "×", "≥ 1.00", t.RPSRatio >= 1.00)
	}
	for _, s := range r.streams() {
		add(30, fmt.Sprintf("CPU per %s stream (%d events, unpaced), Switchyard ÷ stock Caddy", s.Shape, s.EventsPerStream), s.CPURatio, "×", "≤ 1.10", s.CPURatio > 0 && s.CPURatio <= 1.10)
		add(30, fmt.Sprintf("%s streams per second, concurrency %d, Switchyard ÷ stock Caddy", s.Shape, s.Concurrency), s.RateRatio, "×", "≥ 0.95", s.RateRatio >= 0.95)
	}
	if l := r.Latency; l != nil {
		add(14, "Added latency p99, concurrency 1, Switchyard ÷ stock Caddy", l.AddedP99Ratio, "×", "≤ 1.10", l.AddedP99Ratio > 0 && l.AddedP99Ratio <= 1.10)
	}
	if m := r.Memory; m != nil {
		// The top level of each protocol: 10,000 streams over h2c, 1,000 over HTTP/1.1,
		// with each way of reaching the upstream.
		for _, proto := range []string{"h2c", "h1"} {
			for _, up := range []string{"h2", "h1"} {
				run := m.run("switchyard", proto, up)
				if run == nil || len(run.Levels) == 0 {
					continue
				}
				lv := run.Levels[len(run.Levels)-1]
				add(14, fmt.Sprintf("Switchyard RSS per open stream, steady, %d streams over %s, %s", lv.Streams, clientProtoNames[proto], upstreamNames[up]),
					round(lv.PerStreamBytes/1024, 1), "KiB", fmt.Sprintf("≤ %d", memGoalKiB),
					lv.Open >= lv.Streams && lv.PerStreamBytes > 0 && lv.PerStreamBytes <= memGoalKiB*1024)
			}
		}
	}
	if b := r.Body; b != nil {
		if st, sw := b.Targets["stock"], b.Targets["switchyard"]; st != nil && sw != nil {
			v := round(ratio(sw.Latency.P50, st.Latency.P50), 3)
			add(14, "1 MB request body, latency p50, Switchyard ÷ stock Caddy", v, "×", "≤ 1.30", v > 0 && v <= 1.30)
		}
	}
	if p := r.Paced; p != nil {
		add(7, "SSE delay per event beyond stock Caddy (p50)", p.ExtraPerEventP50, "µs", "≤ 20", p.ExtraPerEventP50 <= 20)
		held := 0.0
		if p.FirstEventHeldBack {
			held = 1
		}
		add(7, "First SSE event held back", held, "", "never (0)", !p.FirstEventHeldBack)
	}
	if m := r.Memory; m != nil {
		top := r.Plan.MemLevels[len(r.Plan.MemLevels)-1]
		held := false
		var lost int64 = -1
		for _, run := range m.Runs {
			if run.Proxy != "switchyard" || len(run.Levels) == 0 {
				continue
			}
			last := run.Levels[len(run.Levels)-1]
			if last.Open >= top && run.EventsLost == 0 && run.Incomplete == 0 {
				held, lost = true, 0
			} else if last.Open >= top && !held {
				lost = run.EventsLost
			}
		}
		add(7, fmt.Sprintf("%d streams held through Switchyard, events lost", top), float64(lost), "events", "all open, 0 lost", held)
	}
	if b := r.Body; b != nil {
		if t := b.Targets["switchyard"]; t != nil {
			add(7, "1 MB request body: Switchyard bytes allocated per request ÷ body", t.AllocPerBody, "×", "≤ 1.2", t.AllocPerBody <= 1.2)
		}
	}
}

func us(v float64) string {
	switch {
	case v >= 10000:
		return fmt.Sprintf("%.1f ms", v/1000)
	case v >= 100:
		return fmt.Sprintf("%.0f µs", v)
	default:
		return fmt.Sprintf("%.1f µs", v)
	}
}

func signedUs(v float64) string {
	if v >= 0 {
		return "+" + us(v)
	}
	return "−" + us(-v)
}

func kib(b float64) string { return fmt.Sprintf("%.1f KiB", b/1024) }

func times(v float64) string { return fmt.Sprintf("%.2f×", v) }

// markdown is the table docs/benchmarks.md quotes.
func (r *results) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Load benchmark, %s, %d cores (%s), Caddy %s, %s; other processes took %.0f%% of the CPU\n\n",
		r.Date[:10], r.Machine.Cores, r.Machine.CPU, r.CaddyVersion, r.Machine.Go, 100*r.Machine.OtherCPUShare)
	b.WriteString("| Measure | Direct | Stock Caddy | Switchyard | Switchyard ÷ stock |\n")
	b.WriteString("|---|---|---|---|---|\n")
	row := func(cells ...string) { b.WriteString("| " + strings.Join(cells, " | ") + " |\n") }
	if l := r.Latency; l != nil {
		d, st, sw := l.Targets["direct"], l.Targets["stock"], l.Targets["switchyard"]
		row("Latency, concurrency 1, p50", us(d.Latency.P50), us(st.Latency.P50), us(sw.Latency.P50), "")
		row("Latency, concurrency 1, p99", us(d.Latency.P99), us(st.Latency.P99), us(sw.Latency.P99), "")
		row("**Added latency p50** (over direct)", "", signedUs(st.AddedP50), signedUs(sw.AddedP50), times(l.AddedP50Ratio))
		row("Added latency p99 (over direct)", "", signedUs(st.AddedP99), signedUs(sw.AddedP99), times(l.AddedP99Ratio))
		row("CPU per request, concurrency 1", "", us(st.CPUPerRequestUs), us(sw.CPUPerRequestUs), times(l.CPURatio))
		row("Bytes allocated per request (1 KB answer)", "", fmt.Sprintf("%.0f", st.AllocPerRequest), fmt.Sprintf("%.0f", sw.AllocPerRequest), times(ratio(sw.AllocPerRequest, st.AllocPerRequest)))
	}
	if t := r.Throughput; t != nil {
		d, st, sw := t.Targets["direct"], t.Targets["stock"], t.Targets["switchyard"]
		row(fmt.Sprintf("**CPU per request**, concurrency %d", t.Concurrency), "", us(st.CPUPerRequestUs), us(sw.CPUPerRequestUs), times(t.CPURatio)+spread(t.RoundCPURatios))
		row(fmt.Sprintf("**Throughput**, concurrency %d", t.Concurrency), fmt.Sprintf("%.0f/s", d.RPS), fmt.Sprintf("%.0f/s", st.RPS), fmt.Sprintf("%.0f/s", sw.RPS), times(t.RPSRatio)+spread(t.RoundRPSRatios))
		row(fmt.Sprintf("Latency p99, concurrency %d", t.Concurrency), us(d.Latency.P99), us(st.Latency.P99), us(sw.Latency.P99), "")
	}
	for _, s := range r.streams() {
		d, st, sw := s.Targets["direct"], s.Targets["stock"], s.Targets["switchyard"]
		if d == nil || st == nil || sw == nil {
			continue
		}
		row(fmt.Sprintf("%s stream of %d events unpaced, p50 (concurrency %d)", s.Shape, s.EventsPerStream, s.Concurrency), us(d.Duration.P50), us(st.Duration.P50), us(sw.Duration.P50), "")
		row(fmt.Sprintf("**CPU per %s stream**", s.Shape), "", us(st.CPUPerStreamUs), us(sw.CPUPerStreamUs), times(s.CPURatio)+spread(s.RoundCPURatios))
		if st.ReadsPerStream > 0 && sw.ReadsPerStream > 0 {
			row(fmt.Sprintf("%s stream's system calls, reads + writes", s.Shape), "",
				fmt.Sprintf("%.1f + %.1f", st.ReadsPerStream, st.WritesPerStream), fmt.Sprintf("%.1f + %.1f", sw.ReadsPerStream, sw.WritesPerStream),
				times(round(ratio(sw.ReadsPerStream+sw.WritesPerStream, st.ReadsPerStream+st.WritesPerStream), 3)))
		}
		row(fmt.Sprintf("**%s streams per second**, concurrency %d", s.Shape, s.Concurrency), fmt.Sprintf("%.0f/s", d.StreamsPerSecond), fmt.Sprintf("%.0f/s", st.StreamsPerSecond), fmt.Sprintf("%.0f/s", sw.StreamsPerSecond), times(s.RateRatio)+spread(s.RoundRateRatios))
	}
	if p := r.Paced; p != nil {
		d, st, sw := p.Targets["direct"], p.Targets["stock"], p.Targets["switchyard"]
		row(fmt.Sprintf("SSE event delay, paced %gms, p50", p.IntervalMs), us(d.EventDelay.P50), us(st.EventDelay.P50), us(sw.EventDelay.P50), "**"+signedUs(p.ExtraPerEventP50)+"** per event")
		row("SSE event delay, mean", us(d.EventDelay.Mean), us(st.EventDelay.Mean), us(sw.EventDelay.Mean), signedUs(p.ExtraPerEventMean)+" per event")
		row("SSE event delay, p99", us(d.EventDelay.P99), us(st.EventDelay.P99), us(sw.EventDelay.P99), "")
		row("**Time to first event**, p50", us(d.TimeToFirstEvent.P50), us(st.TimeToFirstEvent.P50), us(sw.TimeToFirstEvent.P50), times(p.TTFERatio))
		row("First event's own delay, max", us(d.FirstEventDelay.Max), us(st.FirstEventDelay.Max), us(sw.FirstEventDelay.Max), map[bool]string{true: "held back", false: "not held back"}[p.FirstEventHeldBack])
	}
	if m := r.Memory; m != nil {
		for _, proto := range []string{"h2c", "h1"} {
			for _, up := range []string{"h2", "h1"} {
				st, sw := m.run("stock", proto, up), m.run("switchyard", proto, up)
				if st == nil || sw == nil {
					continue
				}
				name := clientProtoNames[proto] + ", " + upstreamNames[up]
				for i := range sw.Levels {
					if i >= len(st.Levels) {
						break
					}
					a, c := st.Levels[i], sw.Levels[i]
					row(fmt.Sprintf("**RSS per open stream**, %d streams over %s, steady", c.Streams, name), "", kib(a.PerStreamBytes), kib(c.PerStreamBytes), times(ratio(c.PerStreamBytes, a.PerStreamBytes)))
					row(fmt.Sprintf("RSS per open stream, %d streams over %s, just opened", c.Streams, name), "", kib(a.PerStreamAtOpen), kib(c.PerStreamAtOpen), times(ratio(c.PerStreamAtOpen, a.PerStreamAtOpen)))
				}
				row(fmt.Sprintf("Streams held / events lost, %s", name), "",
					fmt.Sprintf("%d / %d", lastOpen(st), st.EventsLost), fmt.Sprintf("%d / %d", lastOpen(sw), sw.EventsLost), "")
			}
		}
	}
	if bd := r.Body; bd != nil {
		st, sw := bd.Targets["stock"], bd.Targets["switchyard"]
		if st != nil && sw != nil {
			row("**1 MB body**: bytes allocated per request ÷ body", "", times(st.AllocPerBody), times(sw.AllocPerBody), "")
			row("1 MB body: latency p50", "", us(st.Latency.P50), us(sw.Latency.P50), times(ratio(sw.Latency.P50, st.Latency.P50)))
		}
	}
	if r.Limits != nil {
		b.WriteString(r.Limits.markdown(r))
	}
	if r.Tracing != nil {
		b.WriteString(r.Tracing.markdown())
	}
	if a := r.Agent; a != nil {
		b.WriteString(a.markdown())
	}
	b.WriteString("\nGoals: every figure of issue 14, and the checks of issue 7 it leaves standing\n")
	b.WriteString("\n| Figure | Issue | Now | Goal | Met |\n|---|---|---|---|---|\n")
	for _, c := range r.Targets {
		v := fmt.Sprintf("%g %s", c.Value, c.Unit)
		if c.Unit == "×" {
			v = times(c.Value)
		}
		met := "no"
		if c.Met {
			met = "yes"
		}
		goal := strings.TrimSpace(c.Target + " " + c.Unit)
		if c.Unit == "×" {
			goal = c.Target + "×"
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s |\n", c.Name, c.Issue, strings.TrimSpace(v), goal, met)
	}
	if r.Memory != nil {
		for _, n := range r.Memory.Notes {
			fmt.Fprintf(&b, "\nNote: %s.\n", n)
		}
	}
	if len(r.Errors) > 0 {
		fmt.Fprintf(&b, "\n%d errors during the run (first: %s)\n", len(r.Errors), r.Errors[0])
	}
	return b.String()
}

// spread is the range of per-round ratios beside a total's ratio, when there are several.
func spread(ratios []float64) string {
	if len(ratios) < 2 {
		return ""
	}
	lo, hi := slices.Min(ratios), slices.Max(ratios)
	return fmt.Sprintf(" (rounds %s–%s)", times(lo), times(hi))
}

func lastOpen(r *memRun) int {
	if len(r.Levels) == 0 {
		return 0
	}
	return r.Levels[len(r.Levels)-1].Open
}
