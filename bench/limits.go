package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The limits variants: Switchyard with the bench key carrying every kind of limit
// (requests and tokens per minute, concurrent requests, a monthly budget), each far
// above what the benchmark sends, so that every request runs every check and none is
// refused. "limits_memory" keeps the counters in the gateway's memory, "limits_redis" in
// a throwaway redis-server the benchmark starts, through leases (the default), and
// "limits_redis_exact" in the same server in exact mode (a call per request).
const (
	limitsMemory     = "limits_memory"
	limitsRedis      = "limits_redis"
	limitsRedisExact = "limits_redis_exact"

	benchRPM         = 100000000
	benchTPM         = 100000000000
	benchConcurrency = 100000
	benchBudget      = "1000000000/month"
)

// limitVariants are the variants to run (-limits flag); limitsRedis is dropped with a
// note when there is no redis-server.
var limitVariants = limitsMemory + "," + limitsRedis + "," + limitsRedisExact

// keyLimitsBlock is the bench key's limits, as the key's block in the Caddyfile.
func keyLimitsBlock() string {
	return fmt.Sprintf(` {
			rpm %d
			tpm %d
			concurrency %d
			budget %s
		}`, benchRPM, benchTPM, benchConcurrency, benchBudget)
}

// redisServer is a redis-server the benchmark started: loopback only, nothing persisted.
type redisServer struct {
	proc *proc
	addr string
	dir  string
}

func findRedis() string {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/redis-server"); err == nil {
		return "/usr/bin/redis-server"
	}
	return ""
}

// startRedis starts bin on a free 127.0.0.1 port (a few tries: a port found free can be
// taken before the server binds it) and waits until it answers PING.
func startRedis(bin, dir string) (*redisServer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var last error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no",
			"--protected-mode", "yes", "--loglevel", "warning")
		p, err := startProc("redis", cmd, filepath.Join(dir, "redis.log"))
		if err != nil {
			return nil, err
		}
		s := &redisServer{proc: p, addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := redisCommand(s.addr, "PING"); err == nil {
				return s, nil
			} else {
				last = err
			}
			if p.exited() || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		p.stop()
	}
	return nil, fmt.Errorf("redis-server did not start: %v; see %s", last, filepath.Join(dir, "redis.log"))
}

func (s *redisServer) url() string { return "redis://" + s.addr + "/0" }

func (s *redisServer) stop() {
	if s != nil {
		s.proc.stop()
	}
}

// redisCommand sends one inline command and returns the reply: a simple string, an
// integer or a bulk string's contents.
func redisCommand(addr, command string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(command + "\r\n")); err != nil {
		return "", err
	}
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("bad bulk reply %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

// redisCounters are the server's running counts of commands, of the scripts among
// them, and of its own CPU time. INFO's own calls are left out.
type redisCounters struct {
	commands int64 // every command, those scripts run included
	scripts  int64 // EVAL, EVALSHA, FCALL and their read-only forms (settlements are pipelined ahead of an admission: more than the round trips)
	cpu      float64
}

func (s *redisServer) counters() (redisCounters, error) {
	var rc redisCounters
	if s == nil {
		return rc, errors.New("no redis")
	}
	info, err := redisCommand(s.addr, "INFO commandstats")
	if err != nil {
		return rc, err
	}
	// Lines such as cmdstat_evalsha:calls=12,usec=345,...
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil || !strings.HasPrefix(rest, "calls=") {
			return rc, fmt.Errorf("INFO commandstats: cannot read %q", line)
		}
		switch cmd := strings.TrimPrefix(name, "cmdstat_"); cmd {
		case "info":
		case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
			rc.scripts += n
			rc.commands += n
		default:
			rc.commands += n
		}
	}
	rc.cpu = cpuSeconds(s.proc.pid)
	return rc, nil
}

// redisKeys is the number of keys in the server's database 0.
func (s *redisServer) keys() (int64, error) {
	v, err := redisCommand(s.addr, "DBSIZE")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}

// startLimitVariants starts Switchyard with limits on, in memory and in Redis (when
// there is a redis-server), and returns them in that order. A variant that cannot run is
// noted, not fatal, except a Switchyard that does not start.
func startLimitVariants(ctx context.Context, o options, tmp, upAddr string, res *results) ([]*target, *redisServer, error) {
	want := map[string]bool{}
	for _, v := range strings.Split(limitVariants, ",") {
		if v = strings.TrimSpace(v); v != "" {
			want[v] = true
		}
	}
	res.Limits = &limitsResult{
		Key: limitPolicy{RPM: benchRPM, TPM: benchTPM, Concurrency: benchConcurrency, Budget: benchBudget},
	}
	var out []*target
	if want[limitsMemory] {
		t, err := startProxy(ctx, limitsMemory, o.switchyard, filepath.Join(tmp, limitsMemory), "http://"+upAddr, "")
		if err != nil {
			return out, nil, err
		}
		out = append(out, t)
	}
	if !want[limitsRedis] && !want[limitsRedisExact] {
		return out, nil, nil
	}
	bin := findRedis()
	if bin == "" {
		note := "no redis-server on PATH or in /usr/bin: the Redis variant is skipped (Debian: apt-get install redis-server)"
		progress("note: %s", note)
		res.Limits.Notes = append(res.Limits.Notes, note)
		return out, nil, nil
	}
	rs, err := startRedis(bin, filepath.Join(tmp, "redis"))
	if err != nil {
		res.errorf("limits in Redis skipped: %v", err)
		res.Limits.Notes = append(res.Limits.Notes, "the Redis variant is skipped: redis-server did not start")
		return out, nil, nil
	}
	if v, err := exec.Command(bin, "--version").Output(); err == nil {
		res.Limits.RedisVersion = strings.TrimSpace(string(v))
	}
	for _, name := range []string{limitsRedis, limitsRedisExact} {
		if !want[name] {
			continue
		}
		t, err := startProxy(ctx, name, o.switchyard, filepath.Join(tmp, name), "http://"+upAddr, rs.url())
		if err != nil {
			rs.stop()
			return out, nil, err
		}
		t.redis = rs
		// The probe went through: the counters must now be in Redis, not in the gateway.
		if n, err := rs.keys(); err != nil || n == 0 {
			t.proc.stop()
			rs.stop()
			return out, nil, fmt.Errorf("Switchyard with limits in Redis answered, but Redis holds %d keys (%v): the counters are not there", n, err)
		}
		out = append(out, t)
	}
	return out, rs, nil
}
