package integration

// Helpers for the tests that run real client programs (the JavaScript SDKs, Codex CLI,
// Claude Code) against the gateway. The programs come from npm and live in
// integration/node_modules, pinned by package.json and package-lock.json.
//
// Every run is hermetic: a fresh HOME (and the XDG and temp directories under it), an
// environment built from nothing but what the test names, and every proxy variable
// pointing at a local listener that refuses all traffic. Only 127.0.0.1 is exempt
// (NO_PROXY), so a client that tries to reach anything but the gateway is recorded and
// refused, and nothing leaves the machine. Each run has a time limit.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// clientRunTimeout bounds one run of a client program.
const clientRunTimeout = 90 * time.Second

// installHint is what a developer has to run when the client packages are missing.
const installHint = "run `npm ci --prefix integration` (or `make test`, which installs Node 22 if needed)"

// clientPackages are the npm packages these tests run, pinned in integration/package.json.
var clientPackages = []string{"openai", "@anthropic-ai/sdk", "@openai/codex", "@anthropic-ai/claude-code"}

// clientKit is a usable Node installation with the pinned client packages installed.
type clientKit struct {
	node    string // absolute path of the node binary
	modules string // absolute path of integration/node_modules
	clients string // absolute path of integration/clients (the Node scripts)
}

// needClients returns the client kit. It skips the test when Node is not installed (except
// under CI=true, where .ci/run has installed it), and fails it when Node is there but the
// packages are not, or not the pinned versions.
func needClients(t *testing.T) *clientKit {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil && os.Getenv("CI") == "true" {
		t.Fatal("Node.js (`node`) is not on PATH, but CI (.ci/run) installs it: the real-client tests must run in CI")
	}
	if err != nil {
		t.Skip("skipping the real-client tests: Node.js (`node`) is not on PATH. " +
			"Install Node 22 or newer and npm (PATH=\"$(scripts/node.sh):$PATH\" installs one), then " + installHint + ".")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Logf("npm is not on PATH; using the packages already in node_modules")
	}
	node, err = filepath.Abs(node)
	require.NoError(t, err)
	dir, err := filepath.Abs(".")
	require.NoError(t, err)
	k := &clientKit{node: node, modules: filepath.Join(dir, "node_modules"), clients: filepath.Join(dir, "clients")}

	// The client packages must be installed at exactly the version package.json pins.
	raw, err := os.ReadFile(filepath.Join(dir, "package.json"))
	require.NoError(t, err)
	var manifest struct{ Dependencies map[string]string }
	require.NoError(t, json.Unmarshal(raw, &manifest))
	for _, pkg := range clientPackages {
		want := manifest.Dependencies[pkg]
		require.NotEmpty(t, want, "integration/package.json does not pin %s", pkg)
		raw, err := os.ReadFile(filepath.Join(k.modules, pkg, "package.json"))
		if err != nil {
			t.Fatalf("the client package %s is not installed in integration/node_modules: %s", pkg, installHint)
		}
		var got struct{ Version string }
		require.NoError(t, json.Unmarshal(raw, &got))
		if got.Version != want {
			t.Fatalf("integration/node_modules has %s %s, package.json pins %s: %s", pkg, got.Version, want, installHint)
		}
	}
	// Claude Code's native binary is put in place by its postinstall script; an install
	// with scripts disabled leaves a placeholder that cannot run.
	if info, err := os.Stat(k.bin("claude")); err != nil || info.Size() < 1<<20 {
		t.Fatalf("Claude Code's native binary is missing (%s); its postinstall script must run: %s", k.bin("claude"), installHint)
	}
	return k
}

// bin is the path of an installed package's executable.
func (k *clientKit) bin(name string) string {
	return filepath.Join(k.modules, ".bin", name)
}

// refusingProxy is an HTTP proxy that refuses everything: a CONNECT or a proxied
// request gets 403 and the connection is closed. It records what was attempted.
type refusingProxy struct {
	url      string
	mu       sync.Mutex
	attempts []string
}

func startRefusingProxy(t *testing.T) *refusingProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &refusingProxy{url: "http://" + l.Addr().String()}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.refuse(conn) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
		if a := p.seen(); len(a) > 0 {
			t.Logf("outbound attempts refused by the proxy: %s", strings.Join(a, ", "))
		}
	})
	return p
}

func (p *refusingProxy) refuse(conn net.Conn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	what := "unreadable request"
	if req, err := http.ReadRequest(bufio.NewReader(conn)); err == nil {
		what = req.Method + " " + req.Host
	}
	p.mu.Lock()
	p.attempts = append(p.attempts, what)
	p.mu.Unlock()
	_, _ = conn.Write([]byte("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
}

// seen lists the attempts so far, as "METHOD host".
func (p *refusingProxy) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.attempts...)
}

// sandbox is one client run's private world: a home directory and the environment.
type sandbox struct {
	home string // HOME, with the XDG and temp directories inside it
	work string // the working directory the client starts in (empty, not a git repo)
	env  []string
}

// newSandbox builds an environment from scratch: nothing of the developer's environment
// is inherited (no ANTHROPIC_*, OPENAI_*, proxies, config paths). vars are extra
// NAME=value entries.
func (k *clientKit) newSandbox(t *testing.T, proxy *refusingProxy, vars ...string) *sandbox {
	t.Helper()
	root := t.TempDir()
	s := &sandbox{home: filepath.Join(root, "home"), work: filepath.Join(root, "work")}
	for _, d := range []string{s.home, s.work, filepath.Join(s.home, "tmp"), filepath.Join(s.home, ".config"),
		filepath.Join(s.home, ".cache"), filepath.Join(s.home, ".local", "share"), filepath.Join(s.home, ".local", "state")} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	s.env = []string{
		"PATH=" + filepath.Dir(k.node) + string(os.PathListSeparator) + "/usr/local/bin:/usr/bin:/bin",
		"HOME=" + s.home,
		"USER=switchyard-test",
		"LANG=C.UTF-8",
		"TERM=dumb",
		"NO_COLOR=1",
		"TMPDIR=" + filepath.Join(s.home, "tmp"),
		"XDG_CONFIG_HOME=" + filepath.Join(s.home, ".config"),
		"XDG_CACHE_HOME=" + filepath.Join(s.home, ".cache"),
		"XDG_DATA_HOME=" + filepath.Join(s.home, ".local", "share"),
		"XDG_STATE_HOME=" + filepath.Join(s.home, ".local", "state"),
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost",
	}
	for _, name := range []string{"HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"} {
		s.env = append(s.env, name+"="+proxy.url, strings.ToLower(name)+"="+proxy.url)
	}
	s.env = append(s.env, vars...)
	return s
}

// clientRun is what one run of a client program produced.
type clientRun struct {
	stdout, stderr string
	exit           int
	elapsed        time.Duration
}

// run starts a program in the sandbox with stdin at /dev/null and waits for it, at most
// timeout. On timeout the whole process group is killed and the test fails.
func (s *sandbox) run(t *testing.T, timeout time.Duration, program string, args ...string) clientRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, program, args...)
	cmd.Dir = s.work
	cmd.Env = s.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Own process group, so that a timeout also ends what the client started
	// (codex.js runs a native binary; both may run tool commands).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second

	start := time.Now()
	err := cmd.Run()
	r := clientRun{stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish within %s\nstdout:\n%s\nstderr:\n%s", filepath.Base(program), timeout, r.stdout, r.stderr)
	}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		r.exit = exitErr.ExitCode()
	default:
		t.Fatalf("running %s: %v", program, err)
	}
	t.Logf("%s exited %d after %s", filepath.Base(program), r.exit, r.elapsed.Round(time.Millisecond))
	return r
}

// String shows a run's outcome in failure messages.
func (r clientRun) String() string {
	return "exit " + strconv.Itoa(r.exit) + "\nstdout:\n" + r.stdout + "\nstderr:\n" + r.stderr
}

// wiretap is a pass-through in front of the gateway that records what a client asked and
// what it got back (error bodies in full), to see how a client reacts to an answer.
type wiretap struct {
	url string
	mu  sync.Mutex
	log []tapped
}

type tapped struct {
	method, uri string
	status      int
	header      http.Header // the gateway's response headers
	sent        http.Header // the client's request headers
	body        []byte      // only for error statuses
}

func startWiretap(t *testing.T, target string) *wiretap {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	w := &wiretap{}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(u) },
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			e := tapped{method: resp.Request.Method, uri: resp.Request.URL.RequestURI(), status: resp.StatusCode,
				header: resp.Header.Clone(), sent: resp.Request.Header.Clone()}
			if resp.StatusCode >= 400 {
				b, err := io.ReadAll(resp.Body)
				if err != nil {
					return err
				}
				resp.Body.Close()
				resp.Body = io.NopCloser(bytes.NewReader(b))
				e.body = b
			}
			w.mu.Lock()
			w.log = append(w.log, e)
			w.mu.Unlock()
			return nil
		},
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	w.url = srv.URL
	return w
}

func (w *wiretap) exchanges() []tapped {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]tapped(nil), w.log...)
}
