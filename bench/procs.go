package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// benchKey is the static Switchyard key the load generator sends (to stock Caddy too, so
// both proxies get the same bytes).
const (
	benchKey   = "sk-sy-bench-00000000000000000000"
	benchModel = "bench-gpt"
	// The coding agents' models: Claude Code's on Family B (messages), Codex's on
	// Family A (responses), each with one candidate on the fixed upstream.
	benchClaudeModel = "bench-claude"
	benchCodexModel  = "bench-codex"
)

// proc is a child process the harness started. Every child is in its own process group,
// dies with the harness (Pdeathsig), and is stopped by stop().
type proc struct {
	name string
	cmd  *exec.Cmd
	pid  int
	log  *os.File
	done chan struct{}
	err  error
}

var (
	procsMu sync.Mutex
	procs   = map[*proc]bool{}
)

func startProc(name string, cmd *exec.Cmd, logPath string) (*proc, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	if logPath != "" {
		f, err := os.Create(logPath)
		if err != nil {
			return nil, err
		}
		p.log = f
		if cmd.Stdout == nil {
			cmd.Stdout = f
		}
		cmd.Stderr = f
	}
	if err := cmd.Start(); err != nil {
		if p.log != nil {
			p.log.Close()
		}
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p.pid = cmd.Process.Pid
	procsMu.Lock()
	procs[p] = true
	procsMu.Unlock()
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop ends the process: SIGTERM to its group, SIGKILL after five seconds.
func (p *proc) stop() {
	if p == nil {
		return
	}
	if !p.exited() {
		_ = syscall.Kill(-p.pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-p.pid, syscall.SIGKILL)
			<-p.done
		}
	}
	if p.log != nil {
		p.log.Close()
	}
	procsMu.Lock()
	delete(procs, p)
	procsMu.Unlock()
}

// killAll is the last resort on a signal or the overall time limit.
func killAll() {
	procsMu.Lock()
	defer procsMu.Unlock()
	for p := range procs {
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	}
}

// target is one thing the load generator drives: the upstream directly, or a proxy.
type target struct {
	name  string // "direct", "stock", "switchyard", "limits_memory", "limits_redis"
	label string
	addr  string // host:port
	admin string // admin host:port, proxies only
	proc  *proc  // nil for direct (the upstream process is not measured)
	// redis is the redis-server holding this proxy's limit counters, measured with it.
	redis *redisServer
}

func (t *target) isProxy() bool { return t.proc != nil }

// isSwitchyard says whether t is Switchyard, with limits or without.
func (t *target) isSwitchyard() bool {
	return t.name == "switchyard" || t.hasLimits() || t.name == tracingOn
}

// hasLimits says whether t is Switchyard with the bench key's limits on.
func (t *target) hasLimits() bool {
	return t.name == limitsMemory || t.name == limitsRedis || t.name == limitsRedisExact
}

// upstreamCA is the fixed upstream's TLS certificate (PEM), which every proxy trusts
// through SSL_CERT_FILE.
var upstreamCA string

// startUpstream starts the fixed-response upstream (this binary's `upstream` subcommand)
// and returns its cleartext address and its TLS one (host:port each).
func startUpstream(dir string) (p *proc, plain, secure string, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, "", "", err
	}
	upstreamCA = filepath.Join(dir, "upstream-ca.pem")
	cmd := exec.Command(exe, "upstream", "-ca", upstreamCA)
	stdin, err := cmd.StdinPipe() // closed when the harness exits; the upstream follows
	if err != nil {
		return nil, "", "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", "", err
	}
	p, err = startProc("upstream", cmd, filepath.Join(dir, "upstream.log"))
	if err != nil {
		return nil, "", "", err
	}
	_ = stdin
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-line:
		addrs := strings.Fields(l)
		if len(addrs) != 2 {
			p.stop()
			return nil, "", "", fmt.Errorf("upstream printed %q, not its two addresses", l)
		}
		return p, addrs[0], addrs[1], nil
	case <-time.After(10 * time.Second):
		p.stop()
		return nil, "", "", errors.New("upstream did not start within 10s")
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// globalOptions are shared by both proxies: admin on its own loopback port (metrics and
// pprof), nothing persisted, errors only in the log, HTTP/1.1 and cleartext HTTP/2.
func globalOptions(admin string) string {
	return fmt.Sprintf(`	admin %s
	persist_config off
	grace_period 2s
	log {
		level ERROR
	}
	servers {
		protocols h1 h2c
	}
`, admin)
}

// stockFlushInterval is stock Caddy's flush_interval: -1 (flush every write) by default,
// as an SSE gateway would be set up; "" leaves Caddy's default, which flushes event
// streams at once anyway and answers of known length once.
var stockFlushInterval = "-1"

func stockCaddyfile(listen, admin, upstream string) string {
	flush := ""
	if stockFlushInterval != "" {
		flush = "\n\t\tflush_interval " + stockFlushInterval
	}
	return fmt.Sprintf(`{
%s}

http://%s {
	reverse_proxy %s {%s
	}
}
`, globalOptions(admin), listen, upstream, flush)
}

// switchyardStore is Switchyard's store: "sqlite" (a file in the run's temporary folder,
// as in production), or "off" to see what keys, metering and the ledger cost.
var switchyardStore = "sqlite"

// switchyardCaddyfile is the production shape: a key, a chat model with its price and a
// candidate on the fixed upstream, the coding agents' models (Family B and Family A
// responses) on the same upstream, the SQLite store (keys, metering and the usage ledger
// hang off it), and the three handlers with native errors. With limits the key carries
// every kind of limit, counted in memory, or in Redis when redisURL is set.
func switchyardCaddyfile(listen, admin, upstream, dbPath string, limits bool, redisURL, mode string) string {
	store := "sqlite " + dbPath
	if switchyardStore != "sqlite" {
		store = switchyardStore
	}
	key, limitsOpt := "", ""
	if limits {
		key = keyLimitsBlock()
		if redisURL != "" {
			limitsOpt = fmt.Sprintf(`
		limits {
			redis %s
			redis_prefix bench-%s
			mode %s
		}`, redisURL, mode, mode)
		}
	}
	return fmt.Sprintf(`{
%s
	switchyard {
		store %s%s
		key bench %s%s
		model %s {
			display_name "Benchmark model"
			created 2026-11-01
			price input 0.15 cached_input 0.075 output 0.60
			candidate primary {
				protocol family_a
				url %s/v1
				upstream_model %s
				credential sk-upstream-bench-credential-0000
			}
		}
		model %s {
			display_name "Benchmark coding model, messages"
			created 2026-11-01
			protocols family_b
			reasoning true
			context_window 200000
			max_output_tokens 64000
			price input 3 cached_input 0.30 cache_write 3.75 output 15
			candidate primary {
				protocol family_b
				url %s
				upstream_model %s
				credential sk-upstream-bench-credential-0000
			}
		}
		model %s {
			display_name "Benchmark coding model, responses"
			created 2026-11-01
			protocols family_a
			reasoning true
			context_window 400000
			max_output_tokens 128000
			price input 1.25 cached_input 0.125 output 10 reasoning 10
			candidate primary {
				protocol family_a
				url %s/v1
				upstream_model %s
				credential sk-upstream-bench-credential-0000
			}
		}
	}
}

http://%s {
	switchyard_auth
	switchyard_model
	switchyard_proxy
	handle_errors {
		switchyard_errors
	}
}
`, globalOptions(admin), store, limitsOpt, benchKey, key, benchModel, upstream, upstreamModel,
		benchClaudeModel, upstream, upstreamMessagesModel, benchCodexModel, upstream, upstreamResponsesModel, listen)
}

// startProxy writes the Caddyfile for a proxy in front of upstream (a base URL, http or
// https), starts the binary with its data and config folders in dir, and waits until a
// request through it succeeds. redisURL is where limits_redis
// keeps its counters.
func startProxy(ctx context.Context, name, bin, dir, upstream, redisURL string, extraEnv ...string) (*target, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	adminPort, err := freePort()
	if err != nil {
		return nil, err
	}
	t := &target{name: name, addr: fmt.Sprintf("127.0.0.1:%d", port), admin: fmt.Sprintf("127.0.0.1:%d", adminPort)}
	var cfg string
	switch name {
	case "stock":
		t.label = "stock Caddy reverse_proxy"
		cfg = stockCaddyfile(t.addr, t.admin, upstream)
	case "switchyard", limitsMemory, limitsRedis, limitsRedisExact:
		t.label = map[string]string{"switchyard": "Switchyard", limitsMemory: "Switchyard, limits in memory",
			limitsRedis: "Switchyard, limits in Redis through leases", limitsRedisExact: "Switchyard, limits in Redis, exact mode"}[name]
		if (name == limitsRedis || name == limitsRedisExact) && redisURL == "" {
			return nil, errors.New("limits in Redis need a Redis")
		}
		mode := "lease"
		if name == limitsRedisExact {
			mode = "exact"
		}
		cfg = switchyardCaddyfile(t.addr, t.admin, upstream, filepath.Join(dir, "store", "switchyard.db"), name != "switchyard", redisURL, mode)
		if err := os.MkdirAll(filepath.Join(dir, "store"), 0o755); err != nil {
			return nil, err
		}
	case tracingOn:
		t.label = "Switchyard, tracing on"
		cfg = withTracing(switchyardCaddyfile(t.addr, t.admin, upstream, filepath.Join(dir, "store", "switchyard.db"), false, "", ""))
		if err := os.MkdirAll(filepath.Join(dir, "store"), 0o755); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown proxy %q", name)
	}
	cfgPath := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "run", "--config", cfgPath, "--adapter", "caddyfile")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"HOME="+dir, "XDG_DATA_HOME="+filepath.Join(dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"),
		"SSL_CERT_FILE="+upstreamCA)
	cmd.Env = append(cmd.Env, extraEnv...)
	p, err := startProc(name, cmd, filepath.Join(dir, "caddy.log"))
	if err != nil {
		return nil, err
	}
	t.proc = p
	deadline := time.Now().Add(30 * time.Second)
	for {
		if p.exited() {
			return nil, fmt.Errorf("%s exited at start-up (%v); see %s", name, p.err, filepath.Join(dir, "caddy.log"))
		}
		if err := probe(t); err == nil {
			return t, nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			p.stop()
			return nil, fmt.Errorf("%s not ready: %v; see %s", name, err, filepath.Join(dir, "caddy.log"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// probe sends one chat completion through t and checks the answer names the model the
// client should see and, with limits on, carries the gateway's own request allowance.
func probe(t *target) error {
	c := newH1(t.addr)
	defer c.close()
	resp, err := c.send(chatRequest(t.addr, "json", "", smallBody))
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %.200s", resp.StatusCode, body)
	}
	if t.hasLimits() {
		if got, want := resp.Header.Get("X-Ratelimit-Limit-Requests"), strconv.Itoa(benchRPM); got != want {
			return fmt.Errorf("x-ratelimit-limit-requests is %q, not the key's rpm %s: are the limits on?", got, want)
		}
	}
	want := upstreamModel
	if t.isSwitchyard() {
		want = benchModel
	}
	if !bytes.Contains(body, []byte(`"model": "`+want+`"`)) {
		return fmt.Errorf("answer does not name model %s: %.200s", want, body)
	}
	return nil
}

// cpuTicks is utime+stime of a process, in clock ticks (1/100 s on Linux).
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("malformed stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("malformed stat")
	}
	return ut + st, nil
}

// syscalls are a process's read and write system calls (syscr and syscw of
// /proc/<pid>/io): every read, recv, write and send, whatever the file.
type syscalls struct{ reads, writes int64 }

// syscallCounts is a process's system calls so far; false when they cannot be read.
func syscallCounts(pid int) (syscalls, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return syscalls{}, false
	}
	r, w, err := parseSyscallCounts(b)
	return syscalls{r, w}, err == nil
}

func parseSyscallCounts(b []byte) (reads, writes int64, err error) {
	found := 0
	for _, line := range strings.Split(string(b), "\n") {
		name, value, ok := strings.Cut(line, ": ")
		if !ok || name != "syscr" && name != "syscw" {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %v", name, err)
		}
		if name == "syscr" {
			reads = n
		} else {
			writes = n
		}
		found++
	}
	if found != 2 {
		return 0, 0, errors.New("no syscr and syscw in /proc/<pid>/io")
	}
	return reads, writes, nil
}

const clockTick = 100 // USER_HZ: /proc reports CPU time in 1/100 s on Linux

func cpuSeconds(pid int) float64 {
	t, err := cpuTicks(pid)
	if err != nil {
		return 0
	}
	return float64(t) / clockTick
}

// rssBytes is VmRSS of a process.
func rssBytes(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, "VmRSS:") {
			fs := strings.Fields(line[len("VmRSS:"):])
			if len(fs) >= 1 {
				kb, _ := strconv.ParseInt(fs[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// goMetrics reads the named unlabelled Go runtime metrics from a proxy's admin /metrics.
func goMetrics(t *target, names ...string) (map[string]float64, error) {
	resp, err := adminClient.Get("http://" + t.admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := make(map[string]float64, len(names))
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		name, value, ok := strings.Cut(s.Text(), " ")
		if !ok {
			continue
		}
		for _, n := range names {
			if name == n {
				if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
					out[n] = v
				}
			}
		}
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("%s not found on /metrics", n)
		}
	}
	return out, nil
}

// allocBytes reads go_memstats_alloc_bytes_total, the proxy's running count of bytes
// allocated.
func allocBytes(t *target) (float64, error) {
	m, err := goMetrics(t, "go_memstats_alloc_bytes_total")
	if err != nil {
		return 0, err
	}
	return m["go_memstats_alloc_bytes_total"], nil
}

var adminClient = &http.Client{Timeout: 60 * time.Second}

// saveProfile fetches a pprof profile from a proxy's admin endpoint into dir.
func saveProfile(t *target, dir, kind, query, file string) error {
	if dir == "" {
		return nil
	}
	resp, err := adminClient.Get("http://" + t.admin + "/debug/pprof/" + kind + query)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pprof %s: status %d", kind, resp.StatusCode)
	}
	f, err := os.Create(filepath.Join(dir, file))
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}
