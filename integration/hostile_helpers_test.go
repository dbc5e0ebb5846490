package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/simulator"
)

// callTimeout bounds every call of the hostile-client, broken-upstream and soak tests: a
// gateway that hangs fails the test instead of hanging it.
const callTimeout = 30 * time.Second

var boundedClient = &http.Client{Timeout: callTimeout}

// bounded is gateway.call with a client timeout; headers are name/value pairs, and the test
// key is sent as a Bearer token unless Authorization or x-api-key is among them.
func (g *gateway) bounded(t *testing.T, method, path, body string, headers ...string) *result {
	t.Helper()
	req, err := http.NewRequest(method, g.base+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	auth := true
	for i := 0; i+1 < len(headers); i += 2 {
		if strings.EqualFold(headers[i], "Authorization") || strings.EqualFold(headers[i], "x-api-key") {
			auth = false
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	if auth {
		req.Header.Set("Authorization", "Bearer "+testKey)
	}
	start := time.Now()
	resp, err := boundedClient.Do(req)
	require.NoError(t, err, "%s %s", method, path)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "%s %s: the body", method, path)
	return &result{Status: resp.StatusCode, Header: resp.Header, Body: b, Elapsed: time.Since(start)}
}

// raw sends one HTTP/1.1 request whose request target and headers go on the wire exactly
// as given (Go's client would normalise some of them). The test key is sent as a Bearer
// token unless an Authorization or x-api-key line is among the headers; the connection is
// closed after the answer unless a Connection line is given.
func (g *gateway) raw(t *testing.T, method, target, body string, headers ...string) *result {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(g.base, "http://"), 5*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(callTimeout)))
	var req bytes.Buffer
	fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n",
		method, target, strings.TrimPrefix(g.base, "http://"), len(body))
	auth, connection := true, false
	for i := 0; i+1 < len(headers); i += 2 {
		switch strings.ToLower(headers[i]) {
		case "authorization", "x-api-key":
			auth = false
		case "connection":
			connection = true
		}
		fmt.Fprintf(&req, "%s: %s\r\n", headers[i], headers[i+1])
	}
	if auth {
		req.WriteString("Authorization: Bearer " + testKey + "\r\n")
	}
	if !connection {
		req.WriteString("Connection: close\r\n")
	}
	req.WriteString("\r\n")
	req.WriteString(body)
	start := time.Now()
	_, err = conn.Write(req.Bytes())
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "%s %s", method, target)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return &result{Status: resp.StatusCode, Header: resp.Header, Body: b, Elapsed: time.Since(start)}
}

// envelope asserts the status and the family's error envelope (without insisting on the
// error type) and returns the error object.
func envelope(t *testing.T, r *result, fam string, status int) gjson.Result {
	t.Helper()
	require.Equal(t, status, r.Status, "body: %.400s", r.Body)
	require.True(t, gjson.ValidBytes(r.Body), "a JSON error, got %.400s", r.Body)
	e := gjson.GetBytes(r.Body, "error")
	require.True(t, e.IsObject(), "an error object, got %.400s", r.Body)
	assert.NotEmpty(t, e.Get("message").Str)
	assert.NotEmpty(t, e.Get("type").Str)
	switch fam {
	case "a":
		assert.False(t, gjson.GetBytes(r.Body, "type").Exists(), "Family A envelope expected, got %.400s", r.Body)
		assert.True(t, e.Get("param").Exists() && e.Get("code").Exists(), "param and code are always present: %.400s", r.Body)
	case "b":
		assert.Equal(t, "error", gjson.GetBytes(r.Body, "type").Str, "Family B envelope expected, got %.400s", r.Body)
	default: // either family's, whichever the gateway chose
		if gjson.GetBytes(r.Body, "type").Exists() {
			assert.Equal(t, "error", gjson.GetBytes(r.Body, "type").Str)
		} else {
			assert.True(t, e.Get("param").Exists() && e.Get("code").Exists(), "%.400s", r.Body)
		}
	}
	return e
}

// familyOf is the family whose envelope a path's errors use: B for /v1/messages*.
func familyOf(path string) string {
	if strings.HasPrefix(path, "/v1/messages") {
		return "b"
	}
	return "a"
}

// healthRows is every row of GET /switchyard/health.
func (g *gateway) healthRows(t *testing.T) []gjson.Result {
	t.Helper()
	resp, err := boundedClient.Get(g.admin + "/switchyard/health")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	return gjson.GetBytes(b, "candidates").Array()
}

// assertNoCircuitOpen fails when any circuit of the model (every model when "") is open or
// half open; with strict, also when any of them counted a failure.
func (g *gateway) assertNoCircuitOpen(t *testing.T, model string, strict bool) {
	t.Helper()
	for _, row := range g.healthRows(t) {
		if model != "" && row.Get("model").Str != model {
			continue
		}
		assert.Equal(t, "closed", row.Get("state").Str, "circuit of %s/%s: %s", row.Get("model").Str, row.Get("candidate").Str, row.Raw)
		if strict {
			assert.Zero(t, row.Get("recent_failures").Int(), "failures counted for %s/%s: %s",
				row.Get("model").Str, row.Get("candidate").Str, row.Raw)
		}
	}
}

// procStatusKB reads one "<field>: N kB" line of /proc/self/status (the gateway runs in this
// process). It skips the test where /proc is not available.
func procStatusKB(t testing.TB, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("needs /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			require.NoError(t, err, line)
			return n
		}
	}
	t.Skipf("no %s in /proc/self/status", field)
	return 0
}

// settledRSS is VmRSS in kB after a garbage collection that returns free memory to the
// system, so that what remains is what the process holds.
func settledRSS(t testing.TB) int64 {
	runtime.GC()
	debug.FreeOSMemory()
	return procStatusKB(t, "VmRSS")
}

// raceDetector reports whether this test binary was built with -race.
var raceDetector = func() bool {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" {
				return s.Value == "true"
			}
		}
	}
	return false
}()

// rssBoundMB is how far the RSS may grow for work that must leave nothing behind: 64 MB,
// or 256 MB under the race detector, whose shadow memory counts in the RSS and is not
// returned to the system when the heap shrinks (the Go heap is checked to 64 MB as well).
func rssBoundMB() int64 {
	if raceDetector {
		return 256
	}
	return 64
}

// settledHeapKB is the Go heap and stacks in use after a collection, in kB.
func settledHeapKB() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse+m.StackInuse) / 1024
}

// resetPeakRSS restarts VmHWM (the peak resident size) from the current RSS, so that the
// peak of one step can be read. It reports whether the kernel allowed it.
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// newQuietUpstream is a simulated upstream that keeps nothing of what it receives (the
// harness's upstream keeps every request, which in a soak is the largest memory there is).
func newQuietUpstream(t testing.TB) *upstream {
	u := &upstream{Server: httptest.NewServer(simulator.New(simulator.Config{APIKey: upstreamCred}))}
	t.Cleanup(u.Close)
	return u
}

// recorder is a simulated upstream that keeps every answer's bytes as sent on the wire
// (after the headers), so a test can compare what the client got with what the upstream sent.
type recorder struct {
	*upstream
	mu      sync.Mutex
	answers map[string][]byte // by the simulator's request id
	order   []string
	total   int // answers finished
}

func newRecorder(t testing.TB) *recorder {
	rec := &recorder{upstream: &upstream{}, answers: map[string][]byte{}}
	sim := simulator.New(simulator.Config{
		APIKey:  upstreamCred,
		Observe: rec.upstream.record(nil),
	})
	rec.upstream.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tw := &teeWriter{ResponseWriter: w}
		defer func() {
			id := w.Header().Get("x-request-id") + w.Header().Get("request-id")
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.order) >= 64 { // only recent answers are compared
				delete(rec.answers, rec.order[0])
				rec.order = rec.order[1:]
			}
			rec.answers[id] = tw.buf.Bytes()
			rec.order = append(rec.order, id)
			rec.total++
		}()
		sim.ServeHTTP(tw, r)
	}))
	t.Cleanup(rec.upstream.Close)
	return rec
}

// lastAnswer is the body of the upstream's most recent answer, once every request it
// received has been answered (a client can have the whole answer before the upstream's
// handler has returned).
func (rec *recorder) lastAnswer(t *testing.T) []byte {
	t.Helper()
	require.Eventually(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.total > 0 && rec.total == rec.count()
	}, 5*time.Second, 5*time.Millisecond, "the upstream did not finish its answers")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.answers[rec.order[len(rec.order)-1]]
}

type teeWriter struct {
	http.ResponseWriter
	buf bytes.Buffer
}

// maxRecorded bounds what the recorder keeps of one answer, so oversized answers do not
// weigh on the memory figures of the tests.
const maxRecorded = 1 << 20

func (w *teeWriter) Write(p []byte) (int, error) {
	if w.buf.Len()+len(p) <= maxRecorded {
		w.buf.Write(p)
	}
	return w.ResponseWriter.Write(p)
}

func (w *teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// readUntil reads a stream until stop reports true for what has arrived, then leaves
// (closing the connection); it returns the gateway's request id and what was read.
func (g *gateway) readUntil(t *testing.T, path, body string, stop func(seen string) bool, headers ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", g.base+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	// Its own connection, so that closing it is what the gateway sees.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	id := resp.Header.Get("X-Switchyard-Request-Id")
	var seen strings.Builder
	buf := make([]byte, 4096)
	for !stop(seen.String()) {
		n, err := resp.Body.Read(buf)
		seen.Write(buf[:n])
		if err != nil {
			break
		}
	}
	cancel()
	resp.Body.Close()
	return id, seen.String()
}
