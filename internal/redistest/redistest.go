// Package redistest gives tests a Redis server of their own.
//
// Start runs a throwaway redis-server (from PATH, else /usr/bin/redis-server) on a free
// 127.0.0.1 port, with persistence off (--save "" --appendonly no) and its files in a
// temporary directory, and stops it when the test ends. The test may Stop and Start it
// again on the same port to see what its clients do through an outage. When there is no
// redis-server the test is skipped, except under CI=true, where it fails: CI installs
// Redis so that these tests run for real.
//
// It is only for tests: nothing outside _test.go files should import it.
package redistest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-gw/switchyard/internal/loopback"
)

// Server is a redis-server started for one test.
type Server struct {
	bin  string
	dir  string
	port int
	// extra are arguments after the usual ones (cluster mode); sentinel, when set, makes
	// the server a Sentinel run from the configuration it returns for a port.
	extra    []string
	sentinel func(port int) string

	mu     sync.Mutex
	cmd    *exec.Cmd
	out    *os.File      // the server's log
	exited chan struct{} // closed when cmd has exited
	admin  *redis.Client // nodeClient's
	// user and password are what nodeClient logs in with; "" for none.
	user, password string
	// tls, when set, makes the server listen with TLS only (on port), started with
	// tlsArgs (its certificate files); it is the configuration clients reach it with.
	tls     *tls.Config
	tlsArgs []string
}

// Start starts a redis-server for the test, stopped and removed when the test ends. It
// skips the test when redis-server is missing (fails it under CI=true) and fails it
// when the server does not start.
func Start(t testing.TB) *Server {
	t.Helper()
	return launch(t, nil, nil)
}

// TB is what these helpers need of a test: testing.TB has it.
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Skip(args ...any)
	Cleanup(func())
}

// launch starts a redis-server with extra arguments (or a Sentinel, see Server).
func launch(t TB, extra []string, sentinel func(port int) string) *Server {
	t.Helper()
	return launchAs(t, extra, sentinel, nil, "", "")
}

// launchWith starts a redis-server with extra arguments, TLS only when ca is set, and
// remembers the user and password for nodeClient.
func launchWith(t TB, extra []string, ca *testCA, user, password string) *Server {
	t.Helper()
	return launchAs(t, extra, nil, ca, user, password)
}

func launchAs(t TB, extra []string, sentinel func(port int) string, ca *testCA, user, password string) *Server {
	t.Helper()
	bin := find()
	if bin == "" {
		msg := "no redis-server on PATH or in /usr/bin; install Redis (Debian: apt-get install redis-server) to have the tests start one"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (failing, not skipping: CI=true, and CI must run these tests)")
		}
		t.Skip("skipped, " + msg)
	}
	dir, err := os.MkdirTemp("", "sy-redis-")
	if err != nil {
		t.Fatalf("redis: %v", err)
	}
	s := &Server{bin: bin, dir: dir, extra: extra, sentinel: sentinel, user: user, password: password}
	if ca != nil {
		s.tls, s.tlsArgs = ca.clientConfig(), ca.serverArgs()
	}
	t.Cleanup(func() {
		s.stop()
		_ = os.RemoveAll(dir)
	})
	// A port found free can be taken before the server binds it: try a few.
	for attempt := 0; ; attempt++ {
		port, err := loopback.FreePort()
		if err != nil {
			t.Fatalf("redis: %v", err)
		}
		s.port = port
		err = s.start()
		if err == nil {
			return s
		}
		if attempt == 2 {
			t.Fatalf("redis: %v", err)
		}
	}
}

func find() string {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/redis-server"); err == nil {
		return "/usr/bin/redis-server"
	}
	return ""
}

// Addr is the server's host:port (the same after a restart).
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// URL is the server's address as a redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Stop shuts the server down and waits until it has exited; its data is gone (nothing
// is persisted), as after a restart of a server without persistence.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.stop()
}

// Start starts the server again on its port and waits until it answers.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if err := s.start(); err != nil {
		t.Fatalf("redis: %v", err)
	}
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("already running")
	}
	logf, err := os.OpenFile(s.dir+"/log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning"}, s.extra...)
	if s.tls != nil {
		args[1] = "0" // no plaintext port
		args = append(append(args, "--tls-port", strconv.Itoa(s.port)), s.tlsArgs...)
	}
	if s.sentinel != nil {
		// A Sentinel rewrites its configuration file: it must be one of its own.
		conf := s.dir + "/sentinel.conf"
		if err := os.WriteFile(conf, []byte(s.sentinel(s.port)), 0o600); err != nil {
			logf.Close()
			return err
		}
		args = []string{conf, "--sentinel"}
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	// Ready when it answers PING; bounded.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ping(s.Addr(), s.tls) == nil {
			break
		}
		select {
		case <-exited:
			logf.Close()
			logs, _ := os.ReadFile(s.dir + "/log")
			return fmt.Errorf("redis-server exited at start:\n%s", logs)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			logf.Close()
			logs, _ := os.ReadFile(s.dir + "/log")
			return fmt.Errorf("redis-server did not answer within 10s:\n%s", logs)
		}
	}
	s.cmd, s.out = cmd, logf
	s.exited = exited
	return nil
}

func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.out.Close()
	if s.admin != nil {
		_ = s.admin.Close()
	}
	s.cmd, s.out, s.exited, s.admin = nil, nil, nil, nil
}

// ping sends one inline PING and reads the answer (over TLS with tc).
func ping(addr string, tc *tls.Config) error {
	var c net.Conn
	var err error
	if tc != nil {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, tc)
	} else {
		c, err = net.DialTimeout("tcp", addr, time.Second)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	// A server that wants a password answers too: with NOAUTH.
	if !strings.HasPrefix(line, "+PONG") && !strings.HasPrefix(line, "-NOAUTH") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}
