package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// runMemory holds many streams open through each proxy and reads the proxy's resident
// memory at each level: over cleartext HTTP/2 (many streams on a few connections, as
// behind a TLS front end) up to the plan's top level, and over HTTP/1.1 at its own
// levels; each time with the upstream over TLS (HTTP/2) and in clear (HTTP/1.1). Every
// proxy starts fresh, so its idle figure is its own and nothing is left from the load
// phases.
func runMemory(ctx context.Context, o options, p plan, tmp, upAddr, upTLSAddr string, fdLimit uint64, res *results) *memoryResult {
	out := &memoryResult{DripInterval: p.MemDrip.String(), FileLimit: fdLimit}
	// Over HTTP/1.1 a proxy needs two descriptors per stream (client and upstream side),
	// plus a margin for its listeners, store and logs.
	h1Max := int((fdLimit - 100) / 2)
	for _, proto := range strings.Split(memProtocols, ",") {
		levels := p.MemLevels
		if proto == "h1" {
			levels = nil
			for _, l := range p.MemH1Levels {
				levels = append(levels, min(l, h1Max))
			}
			if top := p.MemLevels[len(p.MemLevels)-1]; top > h1Max {
				out.Notes = append(out.Notes, fmt.Sprintf(
					"%d streams over HTTP/1.1 to an HTTP/1.1 upstream would take %d descriptors in the proxy (a client and an upstream connection each) besides its own, more than this machine's hard limit of %d open files (raising it needs CAP_SYS_RESOURCE); over HTTP/2 they share a few dozen client connections",
					top, 2*top, fdLimit))
			}
		}
		for _, upProto := range strings.Split(memUpstreams, ",") {
			upURL := map[string]string{"h2": "https://" + upTLSAddr, "h1": "http://" + upAddr}[upProto]
			if upURL == "" {
				res.errorf("memory: unknown upstream protocol %q", upProto)
				continue
			}
			for _, name := range strings.Split(memProxies, ",") {
				if ctx.Err() != nil {
					return out
				}
				bin := o.stock
				if name == "switchyard" {
					bin = o.switchyard
				}
				dir := filepath.Join(tmp, "mem-"+name+"-"+proto+"-up"+upProto)
				run := memoryRun(ctx, o, p, name, bin, proto, upProto, upURL, levels, dir, upAddr, res)
				out.Runs = append(out.Runs, run)
			}
		}
	}
	return out
}

func memoryRun(ctx context.Context, o options, p plan, name, bin, proto, upProto, upURL string, levels []int, dir, upAddr string, res *results) *memRun {
	run := &memRun{Proxy: name, Protocol: proto, Upstream: upProto}
	who := fmt.Sprintf("%s over %s, upstream %s", name, proto, upProto)
	t, err := startProxy(ctx, name, bin, dir, upURL, "")
	if err != nil {
		res.errorf("memory, %s: %v", who, err)
		run.Error = err.Error()
		return run
	}
	defer t.proc.stop()

	// The idle figure is taken the way every level is: after the same churn of requests.
	_, _ = serial(ctx, t, 20, chatRequest(t.addr, "stream", "", streamBody))
	run.IdleRSS, _, _ = churn(ctx, t, memChurnMin, memChurn)
	readRuntime(t, &run.Idle)

	group := fmt.Sprintf("mem-%s-%s-%d", name, proto, time.Now().UnixNano())
	h2 := newH2C()
	defer h2.CloseIdleConnections()

	var (
		mu       sync.Mutex
		results  = map[string]*sseResult{}
		opened   atomic.Int64 // streams whose first event arrived
		failed   atomic.Int64
		readers  sync.WaitGroup
		sem      = make(chan struct{}, 128) // streams being opened at once
		launched int
	)
	open := func(i int) {
		id := fmt.Sprintf("%s-%d", group, i)
		extra := fmt.Sprintf("&group=%s&id=%s&every=%s", group, id, p.MemDrip)
		sem <- struct{}{}
		readers.Add(1)
		go func() {
			defer readers.Done()
			released := false
			first := func() {
				opened.Add(1)
				released = true
				<-sem
			}
			var sr sseResult
			if proto == "h2c" {
				sr = h2cStream(h2, t.addr, "mode=hold"+extra, first)
			} else {
				c := newH1(t.addr)
				sr = c.stream(chatRequest(t.addr, "hold", extra, streamBody), first)
				c.close()
			}
			if !released {
				failed.Add(1)
				<-sem
			}
			mu.Lock()
			results[id] = &sr
			mu.Unlock()
		}()
	}

	for _, level := range levels {
		if ctx.Err() != nil {
			break
		}
		progress("memory, %s: opening streams up to %d", who, level)
		start := time.Now()
		for ; launched < level && ctx.Err() == nil; launched++ {
			open(launched)
		}
		deadline := time.Now().Add(120 * time.Second)
		for opened.Load()+failed.Load() < int64(launched) && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
		}
		lv := &memLevel{Streams: level, Open: int(opened.Load()), Failed: int(failed.Load()),
			OpenSeconds: round(time.Since(start).Seconds(), 2)}
		time.Sleep(time.Second)
		lv.RSSAtOpen = rssBytes(t.proc.pid)
		var profiled chan struct{}
		if o.pprofDir != "" && launched == levels[len(levels)-1] {
			profiled = make(chan struct{})
			go func() {
				defer close(profiled)
				secs := max(1, int(memChurnMin/time.Second))
				file := fmt.Sprintf("%s-cpu-holding-%s-up%s-%d.pb.gz", name, proto, upProto, launched)
				if err := saveProfile(t, o.pprofDir, "profile", fmt.Sprintf("?seconds=%d", secs), file); err != nil {
					res.errorf("profile %s: %v", file, err)
				}
			}()
		}
		lv.RSS, lv.ChurnRequests, lv.ChurnCollections = churn(ctx, t, memChurnMin, memChurn)
		if profiled != nil {
			<-profiled
		}
		readRuntime(t, &lv.runtimeFigures)
		run.Levels = append(run.Levels, lv)
		if lv.Open > 0 {
			n := float64(lv.Open)
			lv.PerStreamBytes = round(float64(lv.RSS-run.IdleRSS)/n, 0)
			lv.PerStreamAtOpen = round(float64(lv.RSSAtOpen-run.IdleRSS)/n, 0)
			lv.HeapPerStream = round(float64(lv.HeapInuse-run.Idle.HeapInuse)/n, 0)
			lv.StackPerStream = round(float64(lv.StackInuse-run.Idle.StackInuse)/n, 0)
			lv.GoroutinesPerStream = round(float64(lv.Goroutines-run.Idle.Goroutines)/n, 2)
		}
		progress("memory, %s: %d open, %d failed; RSS %.1f MiB (%.1f MiB when opened, idle %.1f MiB); per stream %.1f KiB RSS (%.1f KiB when opened), %.1f KiB heap in use, %.1f KiB stacks, %.1f goroutines",
			who, lv.Open, lv.Failed, float64(lv.RSS)/(1<<20), float64(lv.RSSAtOpen)/(1<<20), float64(run.IdleRSS)/(1<<20),
			lv.PerStreamBytes/1024, lv.PerStreamAtOpen/1024, lv.HeapPerStream/1024, lv.StackPerStream/1024, lv.GoroutinesPerStream)
		if lv.Failed > 0 {
			res.errorf("memory, %s: %d streams failed to open at level %d", who, lv.Failed, level)
			break
		}
	}
	if o.pprofDir != "" {
		_ = saveProfile(t, o.pprofDir, "heap", "", fmt.Sprintf("%s-heap-%s-up%s-%d.pb.gz", name, proto, upProto, launched))
		// What each held stream's goroutines wait in, grouped, as text: their stacks are
		// the other half of a stream's memory.
		_ = saveProfile(t, o.pprofDir, "goroutine", "?debug=1", fmt.Sprintf("%s-goroutines-%s-up%s-%d.txt", name, proto, upProto, launched))
	}

	// Let every stream finish, then check that each one got every event the upstream sent.
	if err := releaseGroup(upAddr, group); err != nil {
		res.errorf("memory, %s: release: %v", who, err)
	}
	waited := make(chan struct{})
	go func() { readers.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(90 * time.Second):
		res.errorf("memory, %s: streams still open 90s after release", who)
	case <-ctx.Done():
	}
	counts, err := fetchCounts(upAddr, group)
	if err != nil {
		res.errorf("memory, %s: counts: %v", who, err)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, sr := range results {
		sent := counts[id]
		run.EventsSent += sent
		run.EventsReceived += int64(len(sr.recv))
		if sr.err != nil || sr.status != http.StatusOK || !sr.done {
			run.Incomplete++
		}
		if lost := sent - int64(len(sr.recv)); lost > 0 {
			run.EventsLost += lost
		}
	}
	run.Streams = len(results)
	if run.EventsLost > 0 || run.Incomplete > 0 {
		res.errorf("memory, %s: %d events lost, %d streams incomplete", who, run.EventsLost, run.Incomplete)
	}
	progress("memory, %s: %d streams, %d events sent, %d received, %d lost, %d incomplete",
		who, run.Streams, run.EventsSent, run.EventsReceived, run.EventsLost, run.Incomplete)
	return run
}

// churn keeps a proxy busy with chat completions (concurrency 8) until its collector has
// finished two more cycles (at least min, at most max), and returns the highest resident
// memory seen and the count of requests. A Go heap's resident size follows its
// collection cycles: garbage fills fresh pages up to the heap goal (by default twice
// the heap that survived the last collection) before a collection lets them be reused,
// so a reading taken right after the streams open leaves out much of what the process
// keeps while it holds them. Held streams alone make garbage slowly (one event a second
// each); the requests take the heap through full cycles in seconds, for both proxies
// alike.
func churn(ctx context.Context, t *target, minD, maxD time.Duration) (int64, int, int) {
	cctx, cancel := context.WithTimeout(ctx, maxD)
	defer cancel()
	gcs := func() int {
		m, err := goMetrics(t, "go_gc_duration_seconds_count")
		if err != nil {
			return -1
		}
		return int(m["go_gc_duration_seconds_count"])
	}
	gc0 := gcs()
	start := time.Now()
	var peak atomic.Int64
	var cycles atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		defer cancel()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for {
			rss := rssBytes(t.proc.pid)
			if rss > peak.Load() {
				peak.Store(rss)
			}
			n := gcs() - gc0
			cycles.Store(int64(n))
			if memTrace && time.Since(last) >= time.Second {
				progress("  rss %.1f MiB, %d collections", float64(rss)/(1<<20), n)
				last = time.Now()
			}
			if gc0 >= 0 && n >= 2 && time.Since(start) >= minD {
				return
			}
			select {
			case <-cctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	_, lat, _ := concurrent(cctx, t, 1<<30, 8, chatRequest(t.addr, "json", "", smallBody))
	<-sampled
	if rss := rssBytes(t.proc.pid); rss > peak.Load() {
		peak.Store(rss)
	}
	return peak.Load(), len(lat), int(cycles.Load())
}

// runtimeFigures are the Go runtime's own view of a proxy (admin /metrics).
type runtimeFigures struct {
	HeapInuse  int64 `json:"heap_inuse_bytes"`
	StackInuse int64 `json:"stack_inuse_bytes"`
	NextGC     int64 `json:"next_gc_bytes"`
	Goroutines int   `json:"goroutines"`
}

func readRuntime(t *target, f *runtimeFigures) {
	m, err := goMetrics(t, "go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes", "go_memstats_next_gc_bytes", "go_goroutines")
	if err != nil {
		return
	}
	f.HeapInuse = int64(m["go_memstats_heap_inuse_bytes"])
	f.StackInuse = int64(m["go_memstats_stack_inuse_bytes"])
	f.NextGC = int64(m["go_memstats_next_gc_bytes"])
	f.Goroutines = int(m["go_goroutines"])
}

var (
	memChurnMin = 5 * time.Second
	memChurn    = 60 * time.Second
	memTrace    = false
	// The memory phase's protocols and proxies (flags, for experiments).
	memProtocols = "h2c,h1"
	memUpstreams = "h2,h1"
	memProxies   = "stock,switchyard"
)

var controlClient = &http.Client{Timeout: 30 * time.Second}

func releaseGroup(upAddr, group string) error {
	resp, err := controlClient.Post("http://"+upAddr+"/_bench/release?group="+group, "", nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// fetchCounts is how many events the upstream wrote to each stream of a group. It is
// asked once every client has seen its stream end, so the counts are final.
func fetchCounts(upAddr, group string) (map[string]int64, error) {
	resp, err := controlClient.Get("http://" + upAddr + "/_bench/counts?group=" + group)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var v struct {
		Counts map[string]int64 `json:"counts"`
	}
	err = json.NewDecoder(resp.Body).Decode(&v)
	return v.Counts, err
}
