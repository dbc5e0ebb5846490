package integration

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	_ "modernc.org/sqlite"
)

// soakDuration is 20 s unless SWITCHYARD_SOAK sets another Go duration (e.g. 3m).
func soakDuration(t *testing.T) time.Duration {
	if s := os.Getenv("SWITCHYARD_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err, "SWITCHYARD_SOAK must be a Go duration such as 3m")
		return d
	}
	return 20 * time.Second
}

// soakStats counts what the soak's clients saw.
type soakStats struct {
	mu       sync.Mutex
	answered map[string]int // request id of every 200 answer → times seen
	statuses map[string]int // "kind status" → count
	problems []string       // unexpected outcomes, first few kept
}

func (s *soakStats) note(kind string, status int, id string, problem string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.statuses[fmt.Sprintf("%s %d", kind, status)]++
	if status == 200 && id != "" {
		s.answered[id]++
	}
	if problem != "" && len(s.problems) < 20 {
		s.problems = append(s.problems, kind+": "+problem)
	}
}

// A bounded soak on loopback: good traffic on the three shapes (streamed and not), hostile
// requests, a model whose first candidates fail, and clients that leave mid-stream, all at
// once. Afterwards the goroutines and the memory are back near where they started, and every
// request that got a 200 is in the ledger exactly once.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("a soak of 20 s or more")
	}
	duration := soakDuration(t)
	up := newQuietUpstream(t)
	a, b := "http://"+up.hostport()+"/v1", "http://"+up.hostport()
	models := "\t\tmodel soak {\n" +
		candidate("a", "family_a", a, upstreamPrefix+"-s") + candidate("b", "family_b", b, upstreamPrefix+"-s") + "\t\t}\n" +
		"\t\tmodel soak-fo {\n" +
		candidate("reset-a", "family_a", a, upstreamPrefix+"-x+reset", "priority 1") +
		candidate("down-a", "family_a", a, upstreamPrefix+"-x+fail-503", "priority 2") +
		candidate("down-b", "family_b", b, upstreamPrefix+"-x+fail-529", "priority 3") +
		candidate("good-a", "family_a", a, upstreamPrefix+"-good", "priority 4") +
		candidate("good-b", "family_b", b, upstreamPrefix+"-good", "priority 5") + "\t\t}\n" +
		"\t\tmodel soak-drip {\n" +
		candidate("a", "family_a", a, upstreamPrefix+"-s+drip-20ms") + candidate("b", "family_b", b, upstreamPrefix+"-s+drip-20ms") + "\t\t}\n"
	dbPath := filepath.Join(t.TempDir(), "usage.db")
	g := startGatewayWith(t, up, models, "\t\tstore sqlite "+dbPath+"\n")
	db, err := sql.Open("sqlite", dbPath)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })

	transport := &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 5 * time.Second}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: callTimeout}
	stats := &soakStats{answered: map[string]int{}, statuses: map[string]int{}}

	run := func(ctx context.Context, workers []func(ctx context.Context, i int)) {
		var wg sync.WaitGroup
		for _, w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ctx.Err() == nil && i < 1_000_000; i++ {
					w(ctx, i)
				}
			}()
		}
		wg.Wait()
	}
	good := func(model string) func(ctx context.Context, i int) {
		return func(ctx context.Context, i int) { soakGood(ctx, client, g.base, model, i, stats) }
	}
	workers := []func(ctx context.Context, i int){
		good("soak"), good("soak"), good("soak"), good("soak-fo"),
		func(ctx context.Context, i int) { soakHostile(client, g.base, i, stats) },
		func(ctx context.Context, i int) { soakLeaver(ctx, g.base, i, stats) },
		func(ctx context.Context, i int) { soakUploader(g.base, i, stats) },
	}

	// A short warm-up fills the connection pools, so the baseline counts them.
	warm, stopWarm := context.WithTimeout(context.Background(), 2*time.Second)
	run(warm, workers)
	stopWarm()
	transport.CloseIdleConnections()
	goroutinesBefore, rssBefore, heapBefore := runtime.NumGoroutine(), settledRSS(t), settledHeapKB()

	ctx, stop := context.WithTimeout(context.Background(), duration)
	defer stop()
	began := time.Now()
	run(ctx, workers)
	elapsed := time.Since(began)

	// Goroutines back within a small margin of the start (idle connections closed).
	goroutinesAfter := 0
	if !assert.Eventually(t, func() bool {
		transport.CloseIdleConnections()
		goroutinesAfter = runtime.NumGoroutine()
		return goroutinesAfter <= goroutinesBefore+25
	}, 15*time.Second, 100*time.Millisecond, "goroutines: %d before the soak", goroutinesBefore) {
		logGoroutines(t, 6)
	}

	rssAfter, heapAfter := settledRSS(t), settledHeapKB()

	// Every 200 in the ledger exactly once (the ledger writes in batches: wait for it).
	stats.mu.Lock()
	defer stats.mu.Unlock()
	counts := map[string]int{}
	missing := 0
	require.Eventually(t, func() bool {
		counts = soakLedgerCounts(t, db)
		missing = 0
		for id := range stats.answered {
			if counts[id] == 0 {
				missing++
			}
		}
		return missing == 0
	}, 20*time.Second, 100*time.Millisecond, "answered requests missing from the ledger")
	twice := 0
	for id, seen := range stats.answered {
		assert.Equal(t, 1, seen, "request id %s answered more than once", id)
		if counts[id] != 1 {
			twice++
		}
	}
	total := 0
	for _, n := range stats.statuses {
		total += n
	}
	t.Logf("soak of %v: %d requests (%.0f/s), %d answered 200; by kind and status: %v",
		elapsed.Round(time.Millisecond), total, float64(total)/elapsed.Seconds(), len(stats.answered), stats.statuses)
	t.Logf("goroutines %d -> %d; RSS %d MB -> %d MB; Go heap %d MB -> %d MB (race detector: %v); ledger rows for the answered requests: %d missing, %d not exactly once",
		goroutinesBefore, goroutinesAfter, rssBefore/1024, rssAfter/1024, heapBefore/1024, heapAfter/1024, raceDetector, missing, twice)
	assert.Zero(t, twice, "every answered request is in the ledger exactly once")
	assert.Less(t, (rssAfter-rssBefore)/1024, rssBoundMB(), "RSS back near its start")
	assert.Less(t, (heapAfter-heapBefore)/1024, int64(64), "the Go heap back near its start")
	assert.Empty(t, stats.problems, "unexpected outcomes")
	for kind, n := range stats.statuses {
		if strings.HasPrefix(kind, "good") && !strings.HasSuffix(kind, " 200") {
			t.Errorf("%d good requests answered %s", n, kind)
		}
		if strings.HasPrefix(kind, "upload stalled") && !strings.HasSuffix(kind, " 408") {
			t.Errorf("%d stalled uploads answered %s, not 408", n, kind)
		}
		if strings.HasPrefix(kind, "hostile") && (strings.HasSuffix(kind, " 200") || strings.Contains(kind, " 5")) {
			t.Errorf("%d hostile requests answered %s", n, kind)
		}
	}
	assert.Positive(t, len(stats.answered))
	g.assertNoCircuitOpen(t, "soak", true)
}

// soakGood makes one complete call, cycling through shapes and stream modes.
func soakGood(ctx context.Context, client *http.Client, base, model string, i int, stats *soakStats) {
	sh := shapes[i%3]
	stream := (i/3)%2 == 1
	kind := "good " + model + " " + sh.name
	req, _ := http.NewRequestWithContext(ctx, "POST", base+sh.path, strings.NewReader(sh.body(model, stream)))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("anthropic-version", v1)
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			stats.note(kind, 0, "", err.Error())
		}
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	id := resp.Header.Get("X-Switchyard-Request-Id")
	if err != nil {
		if ctx.Err() == nil {
			stats.note(kind, resp.StatusCode, "", "reading: "+err.Error())
		} else {
			// The soak ended mid-answer: the request was answered but not wholly read.
			stats.note(kind, resp.StatusCode, id, "")
		}
		return
	}
	problem := ""
	switch {
	case resp.StatusCode != 200:
		problem = fmt.Sprintf("status %d: %.200s", resp.StatusCode, b)
	case stream && !(strings.Contains(string(b), "data: [DONE]") || strings.Contains(string(b), "event: message_stop") ||
		strings.Contains(string(b), "event: response.completed")):
		problem = fmt.Sprintf("incomplete stream: %.200s", b[max(0, len(b)-200):])
	case !stream && gjson.GetBytes(b, "model").Str != model:
		problem = fmt.Sprintf("answer: %.200s", b)
	case strings.Contains(string(b), upstreamPrefix):
		problem = "the upstream model reached the client"
	}
	stats.note(kind, resp.StatusCode, id, problem)
}

// soakHostile sends one request from the hostile-client list.
func soakHostile(client *http.Client, base string, i int, stats *soakStats) {
	type hostile struct{ name, path, body, header, value string }
	list := []hostile{
		{"trailing slash", "/v1/chat/completions/", `{"model":"soak","messages":[]}`, "", ""},
		{"encoded slash", "/v1/messages%2Fcount_tokens", `{"model":"soak","messages":[]}`, "", ""},
		{"nesting", "/v1/chat/completions", `{"model":"soak","messages":[],"x":` + strings.Repeat("[", 3000) + strings.Repeat("]", 3000) + `}`, "", ""},
		{"duplicate key", "/v1/messages", `{"model":"soak","max_tokens":8,"messages":[],"max_tokens":99999999}`, "", ""},
		{"invalid utf-8", "/v1/responses", "{\"model\":\"soak\",\"input\":\"\xff\"}", "", ""},
		{"gzip", "/v1/chat/completions", `{"model":"soak","messages":[]}`, "Content-Encoding", "gzip"},
		{"key in query", "/v1/responses?api_key=" + testKey, `{"model":"soak","input":"hi"}`, "", ""},
		{"unknown model", "/v1/chat/completions", `{"model":"nope","messages":[]}`, "", ""},
	}
	h := list[i%len(list)]
	req, err := http.NewRequest("POST", base+h.path, strings.NewReader(h.body))
	if err != nil {
		stats.note("hostile "+h.name, 0, "", err.Error())
		return
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("anthropic-version", v1)
	if h.header != "" {
		req.Header.Set(h.header, h.value)
	}
	resp, err := client.Do(req)
	if err != nil {
		stats.note("hostile "+h.name, 0, "", err.Error())
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	stats.note("hostile "+h.name, resp.StatusCode, resp.Header.Get("X-Switchyard-Request-Id"), "")
}

// soakLeaver starts a dripping stream and leaves after its first bytes.
func soakLeaver(ctx context.Context, base string, i int, stats *soakStats) {
	sh := shapes[i%3]
	reqCtx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(reqCtx, "POST", base+sh.path, strings.NewReader(sh.body("soak-drip", true)))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("anthropic-version", v1)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			stats.note("leaver", 0, "", err.Error())
		}
		return
	}
	buf := make([]byte, 512)
	_, _ = resp.Body.Read(buf)
	cancel()
	resp.Body.Close()
	stats.note("leaver "+sh.name, resp.StatusCode, resp.Header.Get("X-Switchyard-Request-Id"), "")
}

// soakUploader sends large bodies that never arrive whole: most are aborted after their
// first 100 KiB; every tenth stalls there, and the gateway must end it at the body's
// deadline with 408.
func soakUploader(base string, i int, stats *soakStats) {
	const declared, sent = 300 << 10, 100 << 10
	if i%10 != 9 {
		conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			stats.note("upload aborted", 0, "", err.Error())
			return
		}
		head := rawRequestHead(strings.TrimPrefix(base, "http://"), testKey, "/v1/chat/completions", declared)
		_, _ = conn.Write([]byte(head + `{"model":"soak","messages":[{"role":"user","content":"` + strings.Repeat("x", sent)))
		conn.Close()
		stats.note("upload aborted", 0, "", "")
		return
	}
	status, _, err := partialUpload(base, testKey, "soak", declared, sent, 0, make(chan struct{}))
	if err != nil {
		stats.note("upload stalled", 0, "", err.Error())
		return
	}
	stats.note("upload stalled", status, "", "")
}

// soakLedgerCounts is the number of ledger rows of each request id.
func soakLedgerCounts(t *testing.T, db *sql.DB) map[string]int {
	out := map[string]int{}
	rows, err := db.Query(`SELECT request_id, COUNT(*) FROM usage_records WHERE outcome = 'served' GROUP BY request_id`)
	if err != nil {
		return out // the table appears with the first migration
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var n int
		require.NoError(t, rows.Scan(&id, &n))
		out[id] = n
	}
	return out
}

// logGoroutines logs the n most common goroutine stacks, to show what stayed behind.
func logGoroutines(t *testing.T, n int) {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	groups := strings.Split(buf.String(), "\n\n")
	if len(groups) > n+1 {
		groups = groups[:n+1] // the header line and the n largest groups (sorted by count)
	}
	t.Logf("most common goroutines:\n%s", strings.Join(groups, "\n\n"))
}
