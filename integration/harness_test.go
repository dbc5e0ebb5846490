// Package integration runs Switchyard end to end: Caddy in this process with the
// switchyard modules, the simulated upstream behind it, and real clients in front.
// Caddy's configuration is process-wide, so the tests of this package run one at a time.
package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	_ "github.com/switchyard-gw/switchyard/caddymodule"
	"github.com/switchyard-gw/switchyard/simulator"
)

// Distinctive values that must never reach a client.
const (
	testKey        = "sk-test-key-0123456789abcdef"
	limitedKey     = "sk-limited-key-0123456789ab"
	upstreamCred   = "zz-upstream-credential-9c2e"
	upstreamPrefix = "zz-hidden-upstream"
)

// upstream is a simulated provider that records what it received.
type upstream struct {
	*httptest.Server
	mu       sync.Mutex
	requests []seenRequest
}

type seenRequest struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   []byte
	At                     time.Time // when it arrived
}

func newUpstream(t testing.TB) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(simulator.New(simulator.Config{APIKey: upstreamCred, Observe: u.record(notAProbe)}))
	t.Cleanup(u.Close)
	return u
}

// record is a simulator's Observe hook that keeps the requests keep accepts (nil: all).
func (u *upstream) record(keep func(r *http.Request) bool) func(r *http.Request, body []byte) {
	return func(r *http.Request, body []byte) {
		if keep != nil && !keep(r) {
			return
		}
		u.mu.Lock()
		defer u.mu.Unlock()
		u.requests = append(u.requests, seenRequest{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), append([]byte(nil), body...), time.Now()})
	}
}

// notAProbe leaves out the gateway's background health probes, which are no client's.
func notAProbe(r *http.Request) bool {
	return r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/models")
}

// last returns the most recent request the upstream received.
func (u *upstream) last(t *testing.T) seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	require.NotEmpty(t, u.requests, "the upstream received no request")
	return u.requests[len(u.requests)-1]
}

// seenFor lists the requests that asked for one upstream model, in the order they came.
func (u *upstream) seenFor(upstreamModel string) []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []seenRequest
	for _, r := range u.requests {
		if gjson.GetBytes(r.Body, "model").Str == upstreamModel {
			out = append(out, r)
		}
	}
	return out
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.requests)
}

// hostport is the upstream's address as "localhost:port", so that the host name in
// candidate URLs is distinctive and can be searched for in what clients receive.
func (u *upstream) hostport() string {
	return "localhost:" + strconv.Itoa(u.Listener.Addr().(*net.TCPAddr).Port)
}

// freePorts returns n distinct loopback ports that were free a moment ago. Another
// process can take one before it is bound again: whatever binds them must be started
// through onFreePorts, which tries again with new ports when that happened.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close() // held until all are chosen, so that the n ports differ
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// portAttempts is how many sets of ports onFreePorts tries before it gives up.
const portAttempts = 5

// onFreePorts starts something that binds n loopback ports: start is given the ports
// and returns an error that mentions "address already in use" when one of them had been
// taken meanwhile, in which case it is called again with new ports (internal/pgtest does
// the same for its PostgreSQL server). It returns the ports that worked.
func onFreePorts(t testing.TB, n int, start func(ports []int) error) []int {
	t.Helper()
	var err error
	for range portAttempts {
		ports := freePorts(t, n)
		if err = start(ports); err == nil {
			return ports
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
		t.Logf("a port was taken before it was bound, trying others: %v", err)
	}
	require.NoError(t, err)
	return nil
}

// startCaddy runs a Caddyfile in this process until the test ends. caddyfile writes it
// for n free loopback ports; it returns the ports and the Caddyfile that was loaded.
func startCaddy(t testing.TB, n int, caddyfile func(ports []int) string) ([]int, string) {
	t.Helper()
	var loaded string
	ports := onFreePorts(t, n, func(ports []int) error {
		loaded = caddyfile(ports)
		cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(loaded), nil)
		require.NoError(t, err, "adapting the Caddyfile")
		if err := caddy.Load(cfg, true); err != nil {
			return fmt.Errorf("loading the config: %w", err)
		}
		return nil
	})
	t.Cleanup(func() { _ = caddy.Stop() })
	return ports, loaded
}

// gateway is a running Switchyard in front of one simulated upstream.
type gateway struct {
	base      string // http://127.0.0.1:port
	admin     string // http://127.0.0.1:port of Caddy's admin endpoint
	up        *upstream
	caddyfile string
}

// standardModels declares the models most tests use. Upstream model names start with
// upstreamPrefix so that any leak is easy to find; suffixes select simulator behaviours.
func standardModels(up *upstream) string {
	a := "http://" + up.hostport() + "/v1"
	b := "http://" + up.hostport()
	// Candidates of a model are given rising priorities so that the failover chains are
	// tried in the order written, whatever their health.
	prio := 0
	cand := func(name, proto, url, model string) string {
		prio++
		return candidate(name, proto, url, model, "priority "+strconv.Itoa(prio))
	}
	return "" +
		"\t\tmodel chat-a {\n\t\t\tprotocols family_a\n\t\t\treasoning true\n" + cand("main", "family_a", a, upstreamPrefix+"-a") + "\t\t}\n" +
		"\t\tmodel msg-b {\n\t\t\tprotocols family_b\n\t\t\treasoning true\n" + cand("main", "family_b", b, upstreamPrefix+"-b") + "\t\t}\n" +
		"\t\tmodel Both-AB {\n" + cand("a", "family_a", a, upstreamPrefix+"-ab") + cand("b", "family_b", b, upstreamPrefix+"-ab") + "\t\t}\n" +
		"\t\tmodel failover-a {\n" +
		cand("refused", "family_a", "http://127.0.0.1:1/v1", upstreamPrefix+"-dead") +
		cand("broken", "family_a", a, upstreamPrefix+"-x+fail-503") +
		cand("limited", "family_a", a, upstreamPrefix+"-x+rate-limit") +
		cand("inband", "family_a", a, upstreamPrefix+"-x+inband-error") +
		cand("good", "family_a", a, upstreamPrefix+"-good") + "\t\t}\n" +
		"\t\tmodel failover-b {\n" +
		cand("broken", "family_b", b, upstreamPrefix+"-x+fail-529") +
		cand("inband", "family_b", b, upstreamPrefix+"-x+inband-error") +
		cand("good", "family_b", b, upstreamPrefix+"-good") + "\t\t}\n" +
		"\t\tmodel all-down {\n" +
		cand("limited", "family_a", a, upstreamPrefix+"-x+rate-limit") +
		cand("broken", "family_a", a, upstreamPrefix+"-x+fail-500") +
		cand("limited-b", "family_b", b, upstreamPrefix+"-x+rate-limit") + "\t\t}\n" +
		"\t\tmodel client-error {\n" + cand("a", "family_a", a, upstreamPrefix+"-x+fail-400") + cand("b", "family_b", b, upstreamPrefix+"-x+fail-400") + "\t\t}\n" +
		"\t\tmodel drip-a {\n" + cand("a", "family_a", a, upstreamPrefix+"-x+drip-500ms") + cand("b", "family_b", b, upstreamPrefix+"-x+drip-500ms") + "\t\t}\n" +
		"\t\tmodel cut-stream {\n" + cand("a", "family_a", a, upstreamPrefix+"-x+cut") + cand("b", "family_b", b, upstreamPrefix+"-x+cut") + "\t\t}\n"
}

// startGateway runs the gateway with the standard models.
func startGateway(t testing.TB) *gateway {
	t.Helper()
	up := newUpstream(t)
	limited := "\t\tkey limited " + limitedKey + " {\n\t\t\tmodels chat-a\n\t\t}\n"
	return startGatewayWith(t, up, standardModels(up), limited)
}

// startGatewayWith runs the gateway with the given model declarations and further
// lines for the switchyard option, with Caddy's admin endpoint on a free port.
func startGatewayWith(t testing.TB, up *upstream, models, options string) *gateway {
	t.Helper()
	store := storeOption(t, options)
	ports, caddyfile := startCaddy(t, 2, func(ports []int) string {
		port, adminPort := strconv.Itoa(ports[0]), strconv.Itoa(ports[1])
		return "{\n\tadmin 127.0.0.1:" + adminPort + "\n\tdefault_bind 127.0.0.1\n\tswitchyard {\n" +
			"\t\tkey test " + testKey + "\n" +
			store + options + models + "\t}\n}\n" +
			"http://127.0.0.1:" + port + " {\n\tswitchyard_auth\n\tswitchyard_model\n\tswitchyard_proxy\n" +
			"\thandle_errors {\n\t\tswitchyard_errors\n\t}\n}\n"
	})
	g := &gateway{
		base:      "http://127.0.0.1:" + strconv.Itoa(ports[0]),
		admin:     "http://127.0.0.1:" + strconv.Itoa(ports[1]),
		up:        up,
		caddyfile: caddyfile,
	}
	g.waitReady(t)
	return g
}

// storeOption puts the key store in the test's temporary directory, unless the test
// chose its own store.
func storeOption(t testing.TB, options string) string {
	if strings.Contains(options, "store ") {
		return ""
	}
	return "\t\tstore sqlite " + t.TempDir() + "/switchyard.db\n"
}

// reload loads a new configuration into the running Caddy, as `caddy reload` does.
func (g *gateway) reload(t *testing.T, caddyfile string) {
	t.Helper()
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
	require.NoError(t, err)
	require.NoError(t, caddy.Load(cfg, false))
	g.caddyfile = caddyfile
	// A reload closes the old server's idle keep-alive connections; a POST on one that
	// is closing fails with EOF and Go's client does not retry it (the SDKs do). In-flight
	// requests are unaffected, which TestReloadDropsNoInFlightStream checks.
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
}

// Polling: every wait for a condition in this package goes through testify's Eventually
// (or EventuallyWithT) with pollEvery, and a limit of waitShort for what happens in this
// process or waitLong for what involves another process or a database.
const (
	pollEvery = 20 * time.Millisecond
	waitShort = 5 * time.Second
	waitLong  = 20 * time.Second
)

// waitReady waits until the gateway answers on its port.
func (g *gateway) waitReady(t testing.TB) {
	t.Helper()
	require.Eventually(t, func() bool { return g.answers() }, waitShort, pollEvery, "the gateway did not start listening")
}

// answers reports whether the gateway answers a request at all.
func (g *gateway) answers() bool {
	resp, err := http.Get(g.base + "/v1/models")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

// candidate writes one candidate block for a model declaration.
func candidate(name, proto, url, model string, extra ...string) string {
	s := "\t\t\tcandidate " + name + " {\n\t\t\t\tprotocol " + proto + "\n\t\t\t\turl " + url +
		"\n\t\t\t\tupstream_model " + model + "\n\t\t\t\tcredential " + upstreamCred + "\n"
	for _, line := range extra {
		s += "\t\t\t\t" + line + "\n"
	}
	return s + "\t\t\t}\n"
}

// call makes one request with the test key in Authorization (or the given headers).
func (g *gateway) call(t *testing.T, method, path string, body string, headers ...string) *result {
	t.Helper()
	r, err := g.send(method, path, body, headers...)
	require.NoError(t, err)
	return r
}

// send is call for use where the test cannot be stopped (inside Eventually's condition):
// it returns the failure instead.
func (g *gateway) send(method, path string, body string, headers ...string) (*result, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, g.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	auth := true
	for i := 0; i+1 < len(headers); i += 2 {
		if strings.EqualFold(headers[i], "Authorization") || strings.EqualFold(headers[i], "x-api-key") {
			auth = false
		}
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	if auth {
		req.Header.Set("Authorization", "Bearer "+testKey)
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &result{Status: resp.StatusCode, Header: resp.Header, Body: b, Elapsed: time.Since(start)}, nil
}

type result struct {
	Status  int
	Header  http.Header
	Body    []byte
	Elapsed time.Duration
}

func (r *result) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.Body, &m), "body: %s", r.Body)
	return m
}

// sseEvent is one parsed server-sent event.
type sseEvent struct {
	Name string
	Data string
}

func parseSSE(t *testing.T, b []byte) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Name != "" || cur.Data != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "event:"):
			cur.Name = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			cur.Data = strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
		}
	}
	if cur.Name != "" || cur.Data != "" {
		out = append(out, cur)
	}
	return out
}

// leakMarkers is the one list of what must never reach a client, a log line, a metric or
// the admin API's answers: anything that identifies an upstream (its model names, its
// credential, its host and port, the account ids and account headers the simulator
// sends) and the gateway's own keys. Every leak check of this package uses it; a check
// may add values of its own (keys it sent, for instance).
func (u *upstream) leakMarkers() []string {
	return []string{
		upstreamPrefix, upstreamCred, u.hostport(), "localhost",
		":" + strconv.Itoa(u.Listener.Addr().(*net.TCPAddr).Port),
		// The simulator's account ids: the plain ones and the UUID-shaped ones.
		"simsecret42", "5im-0rg-5ecret", simulator.AccountOrganization, simulator.AccountProject,
		"Openai-Organization", "Openai-Project", "X-Ratelimit", "Anthropic-Ratelimit",
		"Anthropic-Organization-Id", "Set-Cookie",
		testKey, limitedKey,
	}
}

// assertNoLeakIn fails for each leak marker (and each further value) that text holds;
// where says what text is.
func (u *upstream) assertNoLeakIn(t testing.TB, where, text string, more ...string) {
	t.Helper()
	for _, secret := range append(u.leakMarkers(), more...) {
		assert.NotContains(t, text, secret, "%s holds %q", where, secret)
	}
}

// assertNoLeak fails when anything that identifies the upstream, or a key, reaches the
// client in the body or headers of r.
func (g *gateway) assertNoLeak(t *testing.T, r *result) {
	t.Helper()
	var all bytes.Buffer
	all.Write(r.Body)
	for name, values := range r.Header {
		all.WriteString("\n" + name + ": " + strings.Join(values, ","))
	}
	g.up.assertNoLeakIn(t, "what the client received", all.String())
}
