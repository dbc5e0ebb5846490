package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// serial sends n requests one after another on one connection and returns each one's
// latency (write of the request to the last byte of the answer).
func serial(ctx context.Context, t *target, n int, req []byte) ([]int64, error) {
	c := newH1(t.addr)
	defer c.close()
	lat := make([]int64, 0, n)
	for i := 0; i < n; i++ {
		if ctx.Err() != nil {
			return lat, errStopped
		}
		start := time.Now()
		status, body, err := c.do(req, false)
		if err != nil {
			return lat, err
		}
		if status != http.StatusOK {
			return lat, fmt.Errorf("status %d: %.200s", status, body)
		}
		lat = append(lat, int64(time.Since(start)))
	}
	return lat, nil
}

// concurrent sends n requests from conc workers, each on its own keep-alive connection,
// and returns the wall time, every latency and the count of failed requests.
func concurrent(ctx context.Context, t *target, n, conc int, req []byte) (time.Duration, []int64, int) {
	var next atomic.Int64
	var failed atomic.Int64
	var firstErr atomic.Value
	lats := make([][]int64, conc)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c := newH1(t.addr)
			defer c.close()
			mine := make([]int64, 0, min(n/conc+1, 1<<16))
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				s := time.Now()
				status, body, err := c.do(req, false)
				if err != nil || status != http.StatusOK {
					if failed.Add(1) == 1 {
						firstErr.Store(fmt.Sprintf("status %d, %v, %.200s", status, err, body))
					}
					continue
				}
				mine = append(mine, int64(time.Since(s)))
			}
			lats[w] = mine
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	if e := firstErr.Load(); e != nil && ctx.Err() == nil {
		progress("%s: %d of %d requests failed; first: %s", t.name, failed.Load(), n, e)
	}
	var all []int64
	for _, l := range lats {
		all = append(all, l...)
	}
	return elapsed, all, int(failed.Load())
}

// meter reads a proxy's CPU time and allocation counter around a piece of work, and the
// CPU time and command count of the redis-server holding its limit counters, if any.
type meter struct {
	t          *target
	cpu0       int64
	alloc0     float64
	allocValid bool
	redis0     redisCounters
	redisValid bool
	sys0       syscalls
	sysValid   bool

	// Set by stop: the redis-server's CPU seconds, commands and scripts run.
	redisCPU     float64
	redisCmds    int64
	redisScripts int64
	// The proxy's read and write system calls, when /proc/<pid>/io could be read both times.
	sys        syscalls
	sysCounted bool
}

func startMeter(t *target) *meter {
	m := &meter{t: t}
	if t.isProxy() {
		if a, err := allocBytes(t); err == nil {
			m.alloc0, m.allocValid = a, true
		}
		if t.redis != nil {
			if rc, err := t.redis.counters(); err == nil {
				m.redis0, m.redisValid = rc, true
			}
		}
		m.sys0, m.sysValid = syscallCounts(t.proc.pid)
		m.cpu0, _ = cpuTicks(t.proc.pid)
	}
	return m
}

// stop returns CPU seconds and bytes allocated since startMeter (zero for direct).
func (m *meter) stop() (cpu float64, alloc float64) {
	if !m.t.isProxy() {
		return 0, 0
	}
	c1, _ := cpuTicks(m.t.proc.pid)
	cpu = float64(c1-m.cpu0) / clockTick
	if s1, ok := syscallCounts(m.t.proc.pid); ok && m.sysValid {
		m.sys, m.sysCounted = syscalls{s1.reads - m.sys0.reads, s1.writes - m.sys0.writes}, true
	}
	if m.allocValid {
		if a, err := allocBytes(m.t); err == nil {
			alloc = a - m.alloc0
		}
	}
	if m.redisValid {
		if rc, err := m.t.redis.counters(); err == nil {
			m.redisCPU = rc.cpu - m.redis0.cpu
			m.redisCmds = rc.commands - m.redis0.commands
			m.redisScripts = rc.scripts - m.redis0.scripts
		}
	}
	return cpu, alloc
}

// scrapeCost is what one /metrics scrape allocates in the proxy, measured so it can be
// taken out of the allocation figures.
func scrapeCost(t *target) float64 {
	var costs []float64
	prev, err := allocBytes(t)
	if err != nil {
		return 0
	}
	for i := 0; i < 5; i++ {
		a, err := allocBytes(t)
		if err != nil {
			return 0
		}
		costs = append(costs, a-prev)
		prev = a
	}
	return median(costs)
}

func latencyPhase(ctx context.Context, p plan, targets []*target, res *results) *latencyResult {
	out := &latencyResult{Concurrency: 1, Rounds: p.LatRounds, RequestsPerRound: p.LatN, Targets: map[string]*latTarget{}}
	lats := map[string][]int64{}
	cpu := map[string]float64{}
	alloc := map[string]float64{}
	scrape := map[string]float64{}
	redisCPU := map[string]float64{}
	redisCmds := map[string]int64{}
	redisScripts := map[string]int64{}
	for _, t := range targets {
		out.Targets[t.name] = &latTarget{}
		if t.isProxy() {
			scrape[t.name] = scrapeCost(t)
		}
	}
	for r := 0; r < p.LatRounds && ctx.Err() == nil; r++ {
		progress("latency, concurrency 1: round %d/%d", r+1, p.LatRounds)
		for _, t := range targets {
			m := startMeter(t)
			l, err := serial(ctx, t, p.LatN, chatRequest(t.addr, "json", "", smallBody))
			c, a := m.stop()
			lt := out.Targets[t.name]
			if err != nil {
				lt.Errors++
				res.errorf("latency %s: %v", t.name, err)
			}
			lats[t.name] = append(lats[t.name], l...)
			lt.RoundP50 = append(lt.RoundP50, round(summarize(l).P50, 1))
			cpu[t.name] += c
			alloc[t.name] += a - scrape[t.name]
			redisCPU[t.name] += m.redisCPU
			redisCmds[t.name] += m.redisCmds
			redisScripts[t.name] += m.redisScripts
		}
	}
	for _, t := range targets {
		lt := out.Targets[t.name]
		lt.Latency = summarize(lats[t.name])
		if t.isProxy() && lt.Latency.N > 0 {
			lt.CPUPerRequestUs = round(cpu[t.name]/float64(lt.Latency.N)*1e6, 1)
			lt.AllocPerRequest = round(alloc[t.name]/float64(lt.Latency.N), 0)
			if t.redis != nil {
				lt.RedisCPUPerRequestUs = round(redisCPU[t.name]/float64(lt.Latency.N)*1e6, 1)
				lt.RedisCommandsPerRequest = round(float64(redisCmds[t.name])/float64(lt.Latency.N), 2)
				lt.RedisScriptsPerRequest = round(float64(redisScripts[t.name])/float64(lt.Latency.N), 2)
			}
		}
	}
	d := out.Targets["direct"].Latency
	for _, t := range targets {
		if !t.isProxy() {
			continue
		}
		lt := out.Targets[t.name]
		lt.AddedP50 = round(lt.Latency.P50-d.P50, 1)
		lt.AddedP99 = round(lt.Latency.P99-d.P99, 1)
	}
	out.AddedP50Ratio = round(ratio(out.Targets["switchyard"].AddedP50, out.Targets["stock"].AddedP50), 3)
	out.AddedP99Ratio = round(ratio(out.Targets["switchyard"].AddedP99, out.Targets["stock"].AddedP99), 3)
	out.CPURatio = round(ratio(out.Targets["switchyard"].CPUPerRequestUs, out.Targets["stock"].CPUPerRequestUs), 3)
	return out
}

func throughputPhase(ctx context.Context, o options, p plan, targets []*target, res *results) *throughputResult {
	out := &throughputResult{Concurrency: p.TpConc, Rounds: p.TpRounds, RequestsPerRound: p.TpN, Targets: map[string]*tpTarget{}}
	lats := map[string][]int64{}
	wall := map[string]time.Duration{}
	cpu := map[string]float64{}
	redisCPU := map[string]float64{}
	redisCmds := map[string]int64{}
	redisScripts := map[string]int64{}
	for _, t := range targets {
		out.Targets[t.name] = &tpTarget{}
	}
	for r := 0; r < p.TpRounds && ctx.Err() == nil; r++ {
		progress("throughput, concurrency %d: round %d/%d", p.TpConc, r+1, p.TpRounds)
		for _, t := range targets {
			m := startMeter(t)
			elapsed, l, failed := concurrent(ctx, t, p.TpN, p.TpConc, chatRequest(t.addr, "json", "", smallBody))
			c, _ := m.stop()
			tt := out.Targets[t.name]
			tt.Errors += failed
			if failed > 0 {
				res.errorf("throughput %s: %d requests failed", t.name, failed)
			}
			lats[t.name] = append(lats[t.name], l...)
			wall[t.name] += elapsed
			cpu[t.name] += c
			redisCPU[t.name] += m.redisCPU
			redisCmds[t.name] += m.redisCmds
			redisScripts[t.name] += m.redisScripts
			tt.RoundRPS = append(tt.RoundRPS, round(float64(len(l))/elapsed.Seconds(), 0))
			if len(l) > 0 {
				tt.RoundCPUPerRequestUs = append(tt.RoundCPUPerRequestUs, round(c/float64(len(l))*1e6, 1))
			}
		}
	}
	for _, t := range targets {
		tt := out.Targets[t.name]
		tt.Latency = summarize(lats[t.name])
		if wall[t.name] > 0 {
			tt.RPS = round(float64(tt.Latency.N)/wall[t.name].Seconds(), 0)
		}
		if t.isProxy() && tt.Latency.N > 0 {
			tt.CPUPerRequestUs = round(cpu[t.name]/float64(tt.Latency.N)*1e6, 1)
			tt.CPUCores = round(cpu[t.name]/wall[t.name].Seconds(), 2)
			if t.redis != nil {
				tt.RedisCPUPerRequestUs = round(redisCPU[t.name]/float64(tt.Latency.N)*1e6, 1)
				tt.RedisCPUCores = round(redisCPU[t.name]/wall[t.name].Seconds(), 2)
				tt.RedisCommandsPerRequest = round(float64(redisCmds[t.name])/float64(tt.Latency.N), 2)
				tt.RedisScriptsPerRequest = round(float64(redisScripts[t.name])/float64(tt.Latency.N), 2)
			}
		}
	}
	out.RPSRatio = round(ratio(out.Targets["switchyard"].RPS, out.Targets["stock"].RPS), 3)
	out.CPURatio = round(ratio(out.Targets["switchyard"].CPUPerRequestUs, out.Targets["stock"].CPUPerRequestUs), 3)
	if sw, st := out.Targets["switchyard"], out.Targets["stock"]; sw != nil && st != nil {
		out.RoundRPSRatios = pairedRatios(sw.RoundRPS, st.RoundRPS)
		out.RoundCPURatios = pairedRatios(sw.RoundCPUPerRequestUs, st.RoundCPUPerRequestUs)
	}

	if o.pprofDir != "" && ctx.Err() == nil {
		// A separate run, so profiling costs nothing in the figures above.
		for _, t := range targets {
			if t.name != "stock" && t.name != "switchyard" {
				continue
			}
			progress("profiling %s under concurrency %d for 8s", t.name, p.TpConc)
			done := make(chan struct{})
			go func() {
				defer close(done)
				stop := time.Now().Add(9 * time.Second)
				for time.Now().Before(stop) && ctx.Err() == nil {
					concurrent(ctx, t, 2000, p.TpConc, chatRequest(t.addr, "json", "", smallBody))
				}
			}()
			time.Sleep(500 * time.Millisecond)
			if err := saveProfile(t, o.pprofDir, "profile", "?seconds=8", t.name+"-cpu.pb.gz"); err != nil {
				res.errorf("profile %s: %v", t.name, err)
			}
			_ = saveProfile(t, o.pprofDir, "allocs", "", t.name+"-allocs.pb.gz")
			<-done
		}
	}
	return out
}

// streamPhase relays the recorded stream unpaced: what a streamed answer costs.
func streamPhase(ctx context.Context, o options, p plan, targets []*target, res *results, shape string) *streamResult {
	out := &streamResult{Shape: shape, Concurrency: p.StrConc, Rounds: p.StrRounds, RequestsPerRound: p.StrN,
		EventsPerStream: len(splitEvents(recordedStream(shape))), Targets: map[string]*strTarget{}}
	lats := map[string][]int64{}
	wall := map[string]time.Duration{}
	cpu := map[string]float64{}
	redisCPU := map[string]float64{}
	sys := map[string]syscalls{}
	sysMissed := map[string]bool{} // a round whose system calls could not be counted
	for _, t := range targets {
		out.Targets[t.name] = &strTarget{}
	}
	for r := 0; r < p.StrRounds && ctx.Err() == nil; r++ {
		progress("%s streams (recorded, unpaced), concurrency %d: round %d/%d", shape, p.StrConc, r+1, p.StrRounds)
		for _, t := range targets {
			m := startMeter(t)
			elapsed, l, failed := concurrent(ctx, t, p.StrN, p.StrConc, streamRequest(t.addr, shape))
			c, _ := m.stop()
			wall[t.name] += elapsed
			out.Targets[t.name].RoundRate = append(out.Targets[t.name].RoundRate, round(float64(len(l))/elapsed.Seconds(), 0))
			st := out.Targets[t.name]
			if len(l) > 0 {
				st.RoundCPUPerStreamUs = append(st.RoundCPUPerStreamUs, round(c/float64(len(l))*1e6, 1))
			}
			st.Errors += failed
			if failed > 0 {
				res.errorf("%s stream %s: %d requests failed", shape, t.name, failed)
			}
			lats[t.name] = append(lats[t.name], l...)
			cpu[t.name] += c
			redisCPU[t.name] += m.redisCPU
			total := sys[t.name]
			sys[t.name] = syscalls{total.reads + m.sys.reads, total.writes + m.sys.writes}
			sysMissed[t.name] = sysMissed[t.name] || !m.sysCounted
		}
	}
	for _, t := range targets {
		st := out.Targets[t.name]
		st.Duration = summarize(lats[t.name])
		if wall[t.name] > 0 {
			st.StreamsPerSecond = round(float64(st.Duration.N)/wall[t.name].Seconds(), 0)
		}
		if t.isProxy() && st.Duration.N > 0 {
			st.CPUPerStreamUs = round(cpu[t.name]/float64(st.Duration.N)*1e6, 1)
			st.CPUPerEventUs = round(st.CPUPerStreamUs/float64(out.EventsPerStream), 2)
			if !sysMissed[t.name] {
				st.ReadsPerStream = round(float64(sys[t.name].reads)/float64(st.Duration.N), 1)
				st.WritesPerStream = round(float64(sys[t.name].writes)/float64(st.Duration.N), 1)
			}
			if t.redis != nil {
				st.RedisCPUPerStreamUs = round(redisCPU[t.name]/float64(st.Duration.N)*1e6, 1)
			}
		}
	}
	out.CPURatio = round(ratio(out.Targets["switchyard"].CPUPerStreamUs, out.Targets["stock"].CPUPerStreamUs), 3)
	out.RateRatio = round(ratio(out.Targets["switchyard"].StreamsPerSecond, out.Targets["stock"].StreamsPerSecond), 3)
	if sw, st := out.Targets["switchyard"], out.Targets["stock"]; sw != nil && st != nil {
		out.RoundRateRatios = pairedRatios(sw.RoundRate, st.RoundRate)
		out.RoundCPURatios = pairedRatios(sw.RoundCPUPerStreamUs, st.RoundCPUPerStreamUs)
	}
	if o.pprofDir != "" && ctx.Err() == nil {
		for _, t := range targets {
			if t.name != "stock" && t.name != "switchyard" {
				continue
			}
			progress("profiling %s relaying %s streams for 8s", t.name, shape)
			done := make(chan struct{})
			go func() {
				defer close(done)
				stop := time.Now().Add(9 * time.Second)
				for time.Now().Before(stop) && ctx.Err() == nil {
					concurrent(ctx, t, 100, p.StrConc, streamRequest(t.addr, shape))
				}
			}()
			time.Sleep(500 * time.Millisecond)
			if err := saveProfile(t, o.pprofDir, "profile", "?seconds=8", t.name+"-cpu-stream-"+shape+".pb.gz"); err != nil {
				res.errorf("profile %s: %v", t.name, err)
			}
			<-done
		}
	}
	return out
}

// pacedPhase measures each event's delay through a proxy: the upstream notes when it
// wrote each event, the client when it read it (one clock, one machine).
func pacedPhase(ctx context.Context, p plan, targets []*target, upAddr string, res *results) *pacedResult {
	out := &pacedResult{Concurrency: p.PacedConc, Rounds: p.PacedRounds, StreamsPerRound: p.PacedN,
		IntervalMs: float64(p.PacedEvery) / 1e6, Targets: map[string]*pacedTarget{}}
	events := map[string][]int64{}
	firsts := map[string][]int64{}
	ttfe := map[string][]int64{}
	control := &http.Client{Timeout: 10 * time.Second}
	var seq atomic.Int64
	for _, t := range targets {
		out.Targets[t.name] = &pacedTarget{}
	}
	for r := 0; r < p.PacedRounds && ctx.Err() == nil; r++ {
		progress("streams paced every %v, concurrency %d: round %d/%d", p.PacedEvery, p.PacedConc, r+1, p.PacedRounds)
		for _, t := range targets {
			var mu sync.Mutex
			var next atomic.Int64
			var wg sync.WaitGroup
			pt := out.Targets[t.name]
			for w := 0; w < p.PacedConc; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := newH1(t.addr)
					defer c.close()
					for next.Add(1) <= int64(p.PacedN) && ctx.Err() == nil {
						id := fmt.Sprintf("paced-%d", seq.Add(1))
						q := fmt.Sprintf("&id=%s&every=%s", id, p.PacedEvery)
						sr := c.stream(chatRequest(t.addr, "paced", q, streamBody), nil)
						sent, err := fetchSent(control, upAddr, id)
						mu.Lock()
						switch {
						case sr.err != nil || sr.status != http.StatusOK || !sr.done:
							pt.Errors++
							res.errorf("paced %s: status %d, done %v, %v", t.name, sr.status, sr.done, sr.err)
						case err != nil:
							pt.Errors++
							res.errorf("paced %s: send times: %v", t.name, err)
						case len(sent) != len(sr.recv):
							pt.Errors++
							res.errorf("paced %s: %d events sent, %d received", t.name, len(sent), len(sr.recv))
						default:
							pt.Streams++
							ttfe[t.name] = append(ttfe[t.name], sr.recv[0]-sr.start)
							firsts[t.name] = append(firsts[t.name], sr.recv[0]-sent[0])
							for i := 1; i < len(sent); i++ {
								events[t.name] = append(events[t.name], sr.recv[i]-sent[i])
							}
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
		}
	}
	for _, t := range targets {
		pt := out.Targets[t.name]
		pt.EventDelay = summarize(events[t.name])
		pt.FirstEventDelay = summarize(firsts[t.name])
		pt.TimeToFirstEvent = summarize(ttfe[t.name])
	}
	d := out.Targets["direct"]
	for _, name := range []string{"stock", "switchyard"} {
		pt := out.Targets[name]
		pt.AddedPerEventP50 = round(pt.EventDelay.P50-d.EventDelay.P50, 1)
		pt.AddedPerEventMean = round(pt.EventDelay.Mean-d.EventDelay.Mean, 1)
	}
	sw, st := out.Targets["switchyard"], out.Targets["stock"]
	out.ExtraPerEventP50 = round(sw.EventDelay.P50-st.EventDelay.P50, 1)
	out.ExtraPerEventMean = round(sw.EventDelay.Mean-st.EventDelay.Mean, 1)
	out.TTFERatio = round(ratio(sw.TimeToFirstEvent.P50, st.TimeToFirstEvent.P50), 3)
	// Held back would mean the first event waited for a later one: a whole interval.
	out.FirstEventHeldBack = sw.FirstEventDelay.N == 0 || sw.FirstEventDelay.Max > float64(p.PacedEvery)/2e3
	return out
}

func fetchSent(c *http.Client, upAddr, id string) ([]int64, error) {
	resp, err := c.Get("http://" + upAddr + "/_bench/sent?id=" + id)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	var times []int64
	err = json.NewDecoder(resp.Body).Decode(&times)
	return times, err
}

// bodyPhase sends 1 MB chat requests and reads the proxy's own count of bytes allocated.
func bodyPhase(ctx context.Context, o options, p plan, proxies []*target, res *results) *bodyResult {
	body := largeBody(p.BigSize)
	out := &bodyResult{BodyBytes: len(body), Rounds: p.BigRounds, RequestsPerRound: p.BigN, Targets: map[string]*bodyTarget{}}
	lats := map[string][]int64{}
	alloc := map[string]float64{}
	scrape := map[string]float64{}
	for _, t := range proxies {
		out.Targets[t.name] = &bodyTarget{}
		scrape[t.name] = scrapeCost(t)
		// One request first, so buffers the first large body grows are not counted.
		_, _ = serial(ctx, t, 2, chatRequest(t.addr, "json", "", body))
		if o.pprofDir != "" {
			_ = saveProfile(t, o.pprofDir, "allocs", "", t.name+"-body-allocs-before.pb.gz")
		}
	}
	for r := 0; r < p.BigRounds && ctx.Err() == nil; r++ {
		progress("1 MB request bodies: round %d/%d", r+1, p.BigRounds)
		for _, t := range proxies {
			m := startMeter(t)
			l, err := serial(ctx, t, p.BigN, chatRequest(t.addr, "json", "", body))
			_, a := m.stop()
			bt := out.Targets[t.name]
			if err != nil {
				bt.Errors++
				res.errorf("1 MB body %s: %v", t.name, err)
			}
			lats[t.name] = append(lats[t.name], l...)
			alloc[t.name] += a - scrape[t.name]
		}
	}
	for _, t := range proxies {
		bt := out.Targets[t.name]
		bt.Latency = summarize(lats[t.name])
		if bt.Latency.N > 0 {
			bt.AllocPerRequest = round(alloc[t.name]/float64(bt.Latency.N), 0)
			bt.AllocPerBody = round(bt.AllocPerRequest/float64(len(body)), 3)
		}
		if o.pprofDir != "" && ctx.Err() == nil {
			_ = saveProfile(t, o.pprofDir, "allocs", "", t.name+"-body-allocs-after.pb.gz")
			// A separate run, so profiling costs nothing in the figures above.
			progress("profiling %s with 1 MB bodies for 5s", t.name)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for stop := time.Now().Add(6 * time.Second); time.Now().Before(stop) && ctx.Err() == nil; {
					_, _ = serial(ctx, t, 20, chatRequest(t.addr, "json", "", body))
				}
			}()
			time.Sleep(500 * time.Millisecond)
			if err := saveProfile(t, o.pprofDir, "profile", "?seconds=5", t.name+"-cpu-body.pb.gz"); err != nil {
				res.errorf("profile %s: %v", t.name, err)
			}
			<-done
		}
	}
	return out
}
