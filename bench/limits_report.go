package main

import (
	"fmt"
	"strings"
)

// limitsResult is what the limits cost: Switchyard with the bench key's limits on
// (counters in memory, in Redis) against Switchyard with none, from the same interleaved
// rounds as every other figure.
type limitsResult struct {
	Key          limitPolicy `json:"key_limits"`
	RedisVersion string      `json:"redis_version,omitempty"`
	// Variants holds "limits_off" (Switchyard as in the main table) and each variant run.
	Variants map[string]*limitsVariant `json:"variants,omitempty"`
	Notes    []string                  `json:"notes,omitempty"`
}

type limitPolicy struct {
	RPM         int64  `json:"rpm"`
	TPM         int64  `json:"tpm"`
	Concurrency int64  `json:"concurrency"`
	Budget      string `json:"budget"`
}

// limitsVariant is one Switchyard configuration's figures; the µs figures are per request.
type limitsVariant struct {
	Counters string `json:"counters"` // "none", "memory", "redis"

	// Concurrency 1.
	AddedP50Us      float64 `json:"added_latency_p50_us"` // over the upstream directly
	AddedP99Us      float64 `json:"added_latency_p99_us"`
	CheckP50Us      float64 `json:"added_latency_p50_over_limits_off_us,omitempty"`
	CheckP99Us      float64 `json:"added_latency_p99_over_limits_off_us,omitempty"`
	CPUc1Us         float64 `json:"cpu_per_request_concurrency_1_us"`
	AllocPerRequest float64 `json:"alloc_bytes_per_request"`

	// Concurrency 32 (the plan's throughput concurrency).
	CPUUs        float64 `json:"cpu_per_request_us"`
	CheckCPUUs   float64 `json:"cpu_per_request_over_limits_off_us,omitempty"`
	RedisCPUUs   float64 `json:"redis_cpu_per_request_us,omitempty"`
	RedisCmds    float64 `json:"redis_commands_per_request,omitempty"`
	RedisScripts float64 `json:"redis_round_trips_per_request,omitempty"` // script calls
	RedisCPUc1Us float64 `json:"redis_cpu_per_request_concurrency_1_us,omitempty"`
	RPS          float64 `json:"requests_per_second"`
	LatencyP99Us float64 `json:"latency_p99_us"`

	// Unpaced streams.
	CPUPerStreamUs      float64 `json:"cpu_per_stream_us,omitempty"`
	RedisCPUPerStreamUs float64 `json:"redis_cpu_per_stream_us,omitempty"`

	VsOff   *limitRatios `json:"vs_limits_off,omitempty"`
	VsStock *limitRatios `json:"vs_stock,omitempty"`
}

// limitRatios are a variant's figures divided by another's.
type limitRatios struct {
	AddedP50     float64 `json:"added_latency_p50"`
	AddedP99     float64 `json:"added_latency_p99"`
	CPUc1        float64 `json:"cpu_per_request_concurrency_1"`
	CPU          float64 `json:"cpu_per_request"`
	CPUWithRedis float64 `json:"cpu_per_request_with_redis,omitempty"`
	Throughput   float64 `json:"throughput"`
	CPUPerStream float64 `json:"cpu_per_stream,omitempty"`
}

// limitColumns are the Switchyard targets of the limits table, limits off first.
var limitColumns = []string{"switchyard", limitsMemory, limitsRedis, limitsRedisExact}

// summarize fills Variants from the latency, throughput and stream phases.
func (l *limitsResult) summarize(r *results) {
	l.Variants = map[string]*limitsVariant{}
	name := func(t string) string {
		if t == "switchyard" {
			return "limits_off"
		}
		return t
	}
	for _, t := range limitColumns {
		if v, seen := variantOf(r, t); seen {
			v.Counters = map[string]string{"switchyard": "none", limitsMemory: "memory", limitsRedis: "redis", limitsRedisExact: "redis"}[t]
			l.Variants[name(t)] = v
		}
	}
	off := l.Variants["limits_off"]
	stock := &limitsVariant{}
	if lat := r.Latency; lat != nil && lat.Targets["stock"] != nil {
		stock.AddedP50Us, stock.AddedP99Us, stock.CPUc1Us = lat.Targets["stock"].AddedP50, lat.Targets["stock"].AddedP99, lat.Targets["stock"].CPUPerRequestUs
	}
	if tp := r.Throughput; tp != nil && tp.Targets["stock"] != nil {
		stock.CPUUs, stock.RPS = tp.Targets["stock"].CPUPerRequestUs, tp.Targets["stock"].RPS
	}
	if st := r.Stream; st != nil && st.Targets["stock"] != nil {
		stock.CPUPerStreamUs = st.Targets["stock"].CPUPerStreamUs
	}
	for key, v := range l.Variants {
		v.VsStock = v.ratios(stock)
		if key == "limits_off" || off == nil {
			continue
		}
		v.VsOff = v.ratios(off)
		v.CheckP50Us = round(v.AddedP50Us-off.AddedP50Us, 1)
		v.CheckP99Us = round(v.AddedP99Us-off.AddedP99Us, 1)
		v.CheckCPUUs = round(v.CPUUs-off.CPUUs, 1)
	}
}

// variantOf is a Switchyard target's figures from the latency, throughput and (chat)
// stream phases; seen is false when no phase measured it.
func variantOf(r *results, t string) (v *limitsVariant, seen bool) {
	v = &limitsVariant{}
	if lat := r.Latency; lat != nil && lat.Targets[t] != nil {
		lt := lat.Targets[t]
		v.AddedP50Us, v.AddedP99Us = lt.AddedP50, lt.AddedP99
		v.CPUc1Us, v.AllocPerRequest, v.RedisCPUc1Us = lt.CPUPerRequestUs, lt.AllocPerRequest, lt.RedisCPUPerRequestUs
		seen = true
	}
	if tp := r.Throughput; tp != nil && tp.Targets[t] != nil {
		tt := tp.Targets[t]
		v.CPUUs, v.RedisCPUUs = tt.CPUPerRequestUs, tt.RedisCPUPerRequestUs
		v.RedisCmds, v.RedisScripts = tt.RedisCommandsPerRequest, tt.RedisScriptsPerRequest
		v.RPS, v.LatencyP99Us = tt.RPS, tt.Latency.P99
		seen = true
	}
	if st := r.Stream; st != nil && st.Targets[t] != nil {
		v.CPUPerStreamUs, v.RedisCPUPerStreamUs = st.Targets[t].CPUPerStreamUs, st.Targets[t].RedisCPUPerStreamUs
		seen = true
	}
	return v, seen
}

func (v *limitsVariant) ratios(base *limitsVariant) *limitRatios {
	q := func(a, b float64) float64 { return round(ratio(a, b), 3) }
	lr := &limitRatios{
		AddedP50:     q(v.AddedP50Us, base.AddedP50Us),
		AddedP99:     q(v.AddedP99Us, base.AddedP99Us),
		CPUc1:        q(v.CPUc1Us, base.CPUc1Us),
		CPU:          q(v.CPUUs, base.CPUUs),
		Throughput:   q(v.RPS, base.RPS),
		CPUPerStream: q(v.CPUPerStreamUs, base.CPUPerStreamUs),
	}
	if v.RedisCPUUs > 0 {
		lr.CPUWithRedis = q(v.CPUUs+v.RedisCPUUs, base.CPUUs)
	}
	return lr
}

// markdown is the second table: Switchyard with limits off, with limits in memory and in
// Redis, and each limits variant ÷ limits off and ÷ stock Caddy.
func (l *limitsResult) markdown(r *results) string {
	var b strings.Builder
	var cols []*limitsVariant
	var heads []string
	for _, key := range []string{"limits_off", limitsMemory, limitsRedis, limitsRedisExact} {
		if v := l.Variants[key]; v != nil {
			cols = append(cols, v)
			heads = append(heads, map[string]string{"limits_off": "Limits off", limitsMemory: "Limits on, memory", limitsRedis: "Limits on, Redis leases", limitsRedisExact: "Limits on, Redis exact"}[key])
		}
	}
	if len(cols) < 2 {
		for _, n := range l.Notes {
			fmt.Fprintf(&b, "\nNote: %s.\n", n)
		}
		return b.String()
	}
	on, onHeads := cols[1:], heads[1:]
	fmt.Fprintf(&b, "\nLimits overhead: the key carries rpm %d, tpm %d, concurrency %d and a budget of %s (every check runs, none refuses)",
		l.Key.RPM, l.Key.TPM, l.Key.Concurrency, l.Key.Budget)
	if l.RedisVersion != "" {
		fmt.Fprintf(&b, "; Redis %s on the same machine", redisVersionNumber(l.RedisVersion))
	}
	b.WriteString("\n\n| Measure | " + strings.Join(heads, " | "))
	for _, h := range onHeads {
		b.WriteString(" | " + strings.TrimPrefix(h, "Limits on, ") + " ÷ off")
	}
	for _, h := range onHeads {
		b.WriteString(" | " + strings.TrimPrefix(h, "Limits on, ") + " ÷ stock")
	}
	b.WriteString(" |\n|---" + strings.Repeat("|---", len(heads)+2*len(onHeads)) + "|\n")
	// row prints one measure: f formats a variant's figure, ratio picks a ratio (nil: none).
	row := func(measure string, f func(*limitsVariant) string, pick func(*limitRatios) float64) {
		cells := []string{measure}
		for _, v := range cols {
			cells = append(cells, f(v))
		}
		for _, rs := range []func(*limitsVariant) *limitRatios{
			func(v *limitsVariant) *limitRatios { return v.VsOff },
			func(v *limitsVariant) *limitRatios { return v.VsStock },
		} {
			for _, v := range on {
				cell := ""
				if pick != nil && rs(v) != nil && pick(rs(v)) != 0 {
					cell = times(pick(rs(v)))
				}
				cells = append(cells, cell)
			}
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	blankOff := func(f func(*limitsVariant) string) func(*limitsVariant) string {
		return func(v *limitsVariant) string {
			if v.Counters == "none" {
				return ""
			}
			return f(v)
		}
	}
	redisOnly := func(f func(*limitsVariant) string) func(*limitsVariant) string {
		return func(v *limitsVariant) string {
			if v.Counters != "redis" {
				return ""
			}
			return f(v)
		}
	}
	if r.Latency != nil {
		row("**Added latency p50**, concurrency 1 (over direct)", func(v *limitsVariant) string { return signedUs(v.AddedP50Us) }, func(x *limitRatios) float64 { return x.AddedP50 })
		row("Added latency p99, concurrency 1 (over direct)", func(v *limitsVariant) string { return signedUs(v.AddedP99Us) }, func(x *limitRatios) float64 { return x.AddedP99 })
		row("The check's latency p50 (over limits off)", blankOff(func(v *limitsVariant) string { return signedUs(v.CheckP50Us) }), nil)
		row("CPU per request, concurrency 1", func(v *limitsVariant) string { return us(v.CPUc1Us) }, func(x *limitRatios) float64 { return x.CPUc1 })
		if l.Variants[limitsRedis] != nil || l.Variants[limitsRedisExact] != nil {
			row("redis-server CPU per request, concurrency 1", redisOnly(func(v *limitsVariant) string { return us(v.RedisCPUc1Us) }), nil)
		}
		row("Bytes allocated per request", func(v *limitsVariant) string { return fmt.Sprintf("%.0f", v.AllocPerRequest) }, nil)
	}
	if tp := r.Throughput; tp != nil {
		row(fmt.Sprintf("**CPU per request**, concurrency %d (gateway)", tp.Concurrency), func(v *limitsVariant) string { return us(v.CPUUs) }, func(x *limitRatios) float64 { return x.CPU })
		row("The check's CPU per request (over limits off)", blankOff(func(v *limitsVariant) string { return signedUs(v.CheckCPUUs) }), nil)
		if l.Variants[limitsRedis] != nil || l.Variants[limitsRedisExact] != nil {
			row("redis-server CPU per request", redisOnly(func(v *limitsVariant) string { return us(v.RedisCPUUs) }), nil)
			row("Gateway + redis-server CPU per request", redisOnly(func(v *limitsVariant) string { return us(v.CPUUs + v.RedisCPUUs) }), func(x *limitRatios) float64 { return x.CPUWithRedis })
			row("Script calls to Redis per request (settlements pipelined: round trips are fewer)", redisOnly(func(v *limitsVariant) string { return fmt.Sprintf("%.2f", v.RedisScripts) }), nil)
			row("Redis commands per request (run by those scripts)", redisOnly(func(v *limitsVariant) string { return fmt.Sprintf("%.1f", v.RedisCmds) }), nil)
		}
		row(fmt.Sprintf("**Throughput**, concurrency %d", tp.Concurrency), func(v *limitsVariant) string { return fmt.Sprintf("%.0f/s", v.RPS) }, func(x *limitRatios) float64 { return x.Throughput })
		row(fmt.Sprintf("Latency p99, concurrency %d", tp.Concurrency), func(v *limitsVariant) string { return us(v.LatencyP99Us) }, nil)
	}
	if s := r.Stream; s != nil {
		row(fmt.Sprintf("CPU per stream (%d events, concurrency %d)", s.EventsPerStream, s.Concurrency), func(v *limitsVariant) string { return us(v.CPUPerStreamUs) }, func(x *limitRatios) float64 { return x.CPUPerStream })
	}
	if lease, mem := l.Variants[limitsRedis], l.Variants[limitsMemory]; lease != nil && mem != nil {
		// Issue 40's goals for leases, against counting in memory.
		fmt.Fprintf(&b, "\nLeases against memory: throughput %s (goal ≥ 0.95×), added p50 %s (goal ≤ +20 µs), Redis commands per request %.2f and script calls %.3f (goal ≤ 0.1).\n",
			times(round(ratio(lease.RPS, mem.RPS), 3)), signedUs(round(lease.AddedP50Us-mem.AddedP50Us, 1)), lease.RedisCmds, lease.RedisScripts)
	}
	for _, n := range l.Notes {
		fmt.Fprintf(&b, "\nNote: %s.\n", n)
	}
	return b.String()
}

// redisVersionNumber picks v=x.y.z out of `redis-server --version`.
func redisVersionNumber(s string) string {
	for _, f := range strings.Fields(s) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return ""
}
