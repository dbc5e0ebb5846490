package integration

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	_ "modernc.org/sqlite"
)

// drainUpstream is a provider whose streams last as long as the test wants: each sends
// its first events at once and then a word every 20ms; a stream whose prompt says
// "quick" sends its end (usage and terminator) once release is closed, any other goes on
// until the gateway hangs up. It records what it received and how many words each
// stream got out, by the tag in its prompt.
type drainUpstream struct {
	*httptest.Server
	release chan struct{}

	mu    sync.Mutex
	seen  []seenRequest
	words map[string]int // words sent, by prompt tag
	ended map[string]bool
}

func newDrainUpstream(t *testing.T) *drainUpstream {
	u := &drainUpstream{release: make(chan struct{}), words: map[string]int{}, ended: map[string]bool{}}
	u.Server = httptest.NewServer(u)
	t.Cleanup(u.Close)
	return u
}

// drainWordEvery is the pace of a stream's words.
const drainWordEvery = 20 * time.Millisecond

func (u *drainUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet { // the gateway's health probes
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	tag := gjson.GetBytes(body, "messages.0.content").Str
	if tag == "" {
		tag = gjson.GetBytes(body, "input").Str
	}
	u.mu.Lock()
	u.seen = append(u.seen, seenRequest{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, At: time.Now()})
	u.mu.Unlock()
	model := gjson.GetBytes(body, "model").Str
	if !gjson.GetBytes(body, "stream").Bool() {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`, model)
		return
	}
	shape := drainShapeOf(r.URL.Path)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(s string) bool {
		if _, err := io.WriteString(w, s); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	words := 0
	word := func() bool {
		words++
		u.mu.Lock()
		u.words[tag] = words
		u.mu.Unlock()
		return send(drainWord(shape, model, words))
	}
	if !send(drainStart(shape, model)) || !word() {
		return
	}
	release := u.release
	if !strings.Contains(tag, "quick") {
		release = nil // never ends of itself
	}
	tick := time.NewTicker(drainWordEvery)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-release:
			if send(drainEnd(shape, model, words)) {
				u.mu.Lock()
				u.ended[tag] = true
				u.mu.Unlock()
			}
			return
		case <-tick.C:
			if !word() {
				return
			}
		}
	}
}

func drainShapeOf(path string) string {
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		return "chat"
	case strings.HasSuffix(path, "/responses"):
		return "responses"
	}
	return "messages"
}

func drainStart(shape, model string) string {
	switch shape {
	case "chat":
		return fmt.Sprintf("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n", model)
	case "responses":
		return fmt.Sprintf("event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":1,\"status\":\"in_progress\",\"model\":%q,\"output\":[]}}\n\n", model)
	}
	return fmt.Sprintf("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":%q,\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":7,\"output_tokens\":1}}}\n\n"+
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n", model)
}

func drainWord(shape, model string, n int) string {
	switch shape {
	case "chat":
		return fmt.Sprintf("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"content\":\"word \"},\"finish_reason\":null}]}\n\n", model)
	case "responses":
		return fmt.Sprintf("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":%d,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"word \"}\n\n", n)
	}
	return "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"word \"}}\n\n"
}

// drainEnd is a stream's end, with usage: 7 input tokens, one output token a word.
func drainEnd(shape, model string, words int) string {
	switch shape {
	case "chat":
		return fmt.Sprintf("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"+
			"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n"+
			"data: [DONE]\n\n", model, model, words, 7+words)
	case "responses":
		return fmt.Sprintf("event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":%d,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":1,\"status\":\"completed\",\"model\":%q,\"output\":[],\"usage\":{\"input_tokens\":7,\"output_tokens\":%d,\"total_tokens\":%d}}}\n\n", words+1, model, words, 7+words)
	}
	return "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		fmt.Sprintf("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":%d}}\n\n", words) +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
}

func (u *drainUpstream) wordsOf(tag string) (int, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.words[tag], u.ended[tag]
}

// drainGateway is the switchyard option of a gateway with its store and journal in dir
// and one model, drain, whose chat and responses calls go to up's family_a API and
// messages calls to its family_b API.
func drainGateway(dir, upURL string) func(int) string {
	return func(int) string {
		return fmt.Sprintf(`		store sqlite %s
		journal %s
		key static %s
		model drain {
			price input 1 output 2
			candidate a {
				protocol family_a
				url %s/v1
				upstream_model up-a
			}
			candidate b {
				protocol family_b
				url %s
				upstream_model up-b
			}
		}`, filepath.Join(dir, "keys.db"), filepath.Join(dir, "journal"), testKey, upURL, upURL)
	}
}

// drainExtras gives a process a grace period of a couple of seconds, a shutdown delay
// for the load balancer to see readiness fail, and the readiness endpoint at /readyz.
var drainExtras = processExtras{
	global: "\tgrace_period 2s\n\tshutdown_delay 1s",
	site:   "\thandle /readyz {\n\t\tswitchyard_ready\n\t}",
}

// drainStream is one client stream of the drain tests.
type drainStream struct {
	tag, shape, id string
	quick          bool
	status         int
	events         []sseEvent
	err            error
}

// startDrainStreams starts n streams through the gateway at base, every other one quick,
// the shapes in turn, each tagged name-i-quick or name-i-long, and returns once every
// one has its first event (all are in flight); done ends when all have ended.
func startDrainStreams(ctx context.Context, t *testing.T, client *http.Client, base, name string, n int) ([]*drainStream, *sync.WaitGroup) {
	streams := make([]*drainStream, n)
	var committed sync.WaitGroup
	done := new(sync.WaitGroup)
	for i := range streams {
		s := &drainStream{shape: shapes[i%len(shapes)].name, quick: i%2 == 0, tag: fmt.Sprintf("%s-%d-long", name, i)}
		if s.quick {
			s.tag = fmt.Sprintf("%s-%d-quick", name, i)
		}
		streams[i] = s
		committed.Add(1)
		done.Go(func() { runDrainStream(ctx, t, client, base, s, committed.Done) })
	}
	committed.Wait()
	return streams, done
}

// runDrainStream streams one request; it calls committed once the first event came (or
// the request failed), then reads to the end.
func runDrainStream(ctx context.Context, t *testing.T, client *http.Client, base string, s *drainStream, committed func()) {
	defer func() {
		if committed != nil {
			committed()
		}
	}()
	var path, body string
	for _, sh := range shapes {
		if sh.name == s.shape {
			path, body = sh.path, sh.body("drain", true)
		}
	}
	body = strings.Replace(body, `"hi"`, `"`+s.tag+`"`, 1)
	req, _ := http.NewRequestWithContext(ctx, "POST", base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("anthropic-version", v1)
	resp, err := client.Do(req)
	if err != nil {
		s.err = err
		return
	}
	defer resp.Body.Close()
	s.status, s.id = resp.StatusCode, resp.Header.Get("X-Switchyard-Request-Id")
	br := bufio.NewReader(resp.Body)
	var got []byte
	for {
		line, err := br.ReadBytes('\n')
		got = append(got, line...)
		if strings.HasSuffix(string(got), "\n\n") && committed != nil {
			committed()
			committed = nil
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				s.err = err
			}
			break
		}
	}
	s.events = parseSSE(t, got)
}

// terminated reports whether a stream ended with its family's terminator.
func (s *drainStream) terminated() bool {
	if len(s.events) == 0 {
		return false
	}
	last := s.events[len(s.events)-1]
	return last.Data == "[DONE]" || last.Name == "response.completed" || last.Name == "message_stop"
}

// readiness is what a readiness poll saw.
type readiness string

const (
	readyOK      readiness = "200"
	readyFailing readiness = "503"
	readyRefused readiness = "refused"
)

// pollReadiness asks url every 10ms on a new connection each time, and reports each
// change of answer on changes, in order, until it sees the listener refuse.
func pollReadiness(ctx context.Context, url string, changes chan<- readiness) {
	defer close(changes)
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var last readiness
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		var now readiness
		resp, err := client.Get(url)
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			now = readyRefused
		case err != nil:
			now = readiness("error: " + err.Error())
		default:
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			now = readiness(fmt.Sprint(resp.StatusCode))
		}
		if now != last {
			changes <- now
			last = now
		}
		if now == readyRefused {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

// balancedCall is a load balancer at its simplest: it sends a chat call to each address
// in turn until one takes the connection, and returns which one answered and how.
func balancedCall(bases ...string) (string, int, error) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var lastErr error
	for _, base := range bases {
		req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(`{"model":"drain","messages":[{"role":"user","content":"after"}]}`))
		req.Header.Set("Authorization", "Bearer "+testKey)
		resp, err := client.Do(req)
		if errors.Is(err, syscall.ECONNREFUSED) {
			lastErr = err
			continue // this gateway is gone: the next one
		}
		if err != nil {
			return base, 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return base, resp.StatusCode, nil
	}
	return "", 0, lastErr
}

// ledgerEntry is what the ledger holds of one request id: how many rows, and the output
// tokens of the last and whether they were estimated.
type ledgerEntry struct {
	rows      int
	output    int64
	estimated bool
}

// readLedger reads every usage record of the SQLite store at path, by request id.
func readLedger(t *testing.T, path string) map[string]ledgerEntry {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer db.Close()
	rows, err := db.Query(`SELECT request_id, output, estimated FROM usage_records`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]ledgerEntry{}
	for rows.Next() {
		var id string
		var r ledgerEntry
		require.NoError(t, rows.Scan(&id, &r.output, &r.estimated))
		prev := out[id]
		r.rows = prev.rows + 1
		out[id] = r
	}
	require.NoError(t, rows.Err())
	return out
}

// drainStreams is how many streams the drain tests start: half can finish within the
// grace period, half cannot.
const drainStreams = 40

// A rolling restart loses nothing: SIGTERM to a gateway with 40 streams in flight turns
// its readiness to 503 before its listener closes, new connections are refused there and
// answered by the next gateway, the streams that can finish within the grace period end
// with their terminator, the others with their family's error event, and after the
// process has exited every request is in its ledger exactly once, billed for what it
// delivered.
func TestSIGTERMDrainsTheGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and stops gateway processes")
	}
	caddy := buildCaddyCLI(t)
	up := newDrainUpstream(t)
	dir, dir2 := t.TempDir(), t.TempDir()
	gw := startGatewayProcessWith(t, caddy, "draining", dir, drainExtras, drainGateway(dir, up.URL))
	next := startGatewayProcessWith(t, caddy, "next", dir2, drainExtras, drainGateway(dir2, up.URL))
	require.Eventually(t, func() bool {
		resp, err := http.Get(gw.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, waitLong, pollEvery, "readiness never said ready")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0}}
	streams, done := startDrainStreams(ctx, t, client, gw.base, "drain", drainStreams)

	changes := make(chan readiness, 16)
	go pollReadiness(ctx, gw.base+"/readyz", changes)
	require.Equal(t, readyOK, <-changes, "ready before the stop")
	require.NoError(t, gw.cmd.Process.Signal(syscall.SIGTERM))
	signalled := time.Now()
	var seen, answers []readiness
	var failingAt, refusedAt time.Duration
	for c := range changes {
		seen = append(seen, c)
		switch c {
		case readyFailing:
			failingAt = time.Since(signalled)
			close(up.release) // the stop has begun: the quick streams end now, within the grace
		case readyRefused:
			refusedAt = time.Since(signalled)
		case readyOK:
		default:
			continue // a poll the closing listener took and dropped: neither answer nor refusal
		}
		answers = append(answers, c)
	}
	t.Logf("after SIGTERM: readiness 503 at %v, listener refused at %v (polls saw %q)", failingAt, refusedAt, seen)
	assert.Equal(t, []readiness{readyFailing, readyRefused}, answers,
		"after SIGTERM readiness answers 503 while the listener is still open, then the listener closes")

	// A new connection is refused there; the balancer's next try is answered.
	_, err := http.Get(gw.base + "/v1/models")
	assert.ErrorIs(t, err, syscall.ECONNREFUSED, "the stopping gateway takes no new connection")
	by, status, err := balancedCall(gw.base, next.base)
	require.NoError(t, err)
	assert.Equal(t, next.base, by, "the second gateway answered")
	assert.Equal(t, http.StatusOK, status)

	done.Wait()
	select {
	case <-gw.exited:
	case <-time.After(waitLong):
		t.Fatal("the gateway did not exit after its grace period")
	}
	t.Logf("the gateway exited %v after SIGTERM", time.Since(signalled))
	assert.Zero(t, gw.cmd.ProcessState.ExitCode(), "a graceful stop exits 0")

	ledger := readLedger(t, filepath.Join(dir, "keys.db"))
	assert.Len(t, ledger, drainStreams, "one ledger row per request, none other")
	for _, s := range streams {
		t.Run(s.tag, func(t *testing.T) {
			require.NoError(t, s.err)
			require.Equal(t, http.StatusOK, s.status)
			words, ended := up.wordsOf(s.tag)
			row := ledger[s.id]
			assert.Equal(t, 1, row.rows, "in the ledger exactly once")
			if s.quick {
				require.True(t, ended, "the upstream finished the stream")
				assert.True(t, s.terminated(), "a stream that could finish within the grace ends with its terminator: %+v", s.events[len(s.events)-1])
				assert.Equal(t, int64(words), row.output, "billed the upstream's count")
				assert.False(t, row.estimated)
				return
			}
			require.NotEmpty(t, s.events)
			last := s.events[len(s.events)-1]
			assertNativeStreamError(t, s.shape, last)
			assert.Contains(t, last.Data, "shutting down", "the error event says why")
			assert.False(t, s.terminated())
			assert.Positive(t, row.output, "billed for the words it delivered (%d)", words)
			assert.LessOrEqual(t, row.output, int64(2*words), "and not for more than it delivered (%d words)", words)
			assert.True(t, row.estimated, "estimated from what was delivered, as for any cut stream")
		})
	}
}

// drainReloadStreams is how many streams the reload test starts.
const drainReloadStreams = 12

// A reload that drops the gateway's route is a stop for the old configuration: the streams
// it has in flight finish within its grace period or end with their family's error event
// when the grace is over, and each is in the ledger exactly once.
func TestReloadThatDropsTheRouteDrainsItsStreams(t *testing.T) {
	up := newDrainUpstream(t)
	dbPath := filepath.Join(t.TempDir(), "keys.db") // where drainGateway puts the store
	switchyard := drainGateway(filepath.Dir(dbPath), up.URL)(0)
	config := func(port, adminPort int, site string) string {
		return fmt.Sprintf("{\n\tadmin 127.0.0.1:%d\n\tdefault_bind 127.0.0.1\n\tgrace_period 1s\n\tswitchyard {\n%s\n\t}\n}\nhttp://127.0.0.1:%d {\n%s\n}\n",
			adminPort, switchyard, port, site)
	}
	const route = "\tswitchyard_auth\n\tswitchyard_model\n\tswitchyard_proxy\n\thandle_errors {\n\t\tswitchyard_errors\n\t}"
	ports, _ := startCaddy(t, 2, func(ports []int) string { return config(ports[0], ports[1], route) })
	base, admin := fmt.Sprintf("http://127.0.0.1:%d", ports[0]), fmt.Sprintf("http://127.0.0.1:%d", ports[1])

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{}}
	streams, done := startDrainStreams(ctx, t, client, base, "reload", drainReloadStreams)

	// The new configuration keeps the site, without the gateway's route.
	load, err := http.NewRequest("POST", admin+"/load", strings.NewReader(config(ports[0], ports[1], "\trespond \"moved\" 410")))
	require.NoError(t, err)
	load.Header.Set("Content-Type", "text/caddyfile")
	resp, err := http.DefaultClient.Do(load)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	after := (&gateway{base: base}).call(t, "GET", "/v1/models", "")
	require.Equal(t, http.StatusGone, after.Status, "the new configuration has no gateway route")
	close(up.release) // the quick streams end now, within the old configuration's grace
	done.Wait()

	db, err := sql.Open("sqlite", dbPath)
	require.NoError(t, err)
	defer db.Close()
	for _, s := range streams {
		t.Run(s.tag, func(t *testing.T) {
			require.NoError(t, s.err)
			require.Equal(t, http.StatusOK, s.status)
			require.NotEmpty(t, s.events)
			words, ended := up.wordsOf(s.tag)
			row := record(t, db, s.id) // the ledger writes in batches
			if s.quick {
				require.True(t, ended, "the upstream finished the stream")
				assert.True(t, s.terminated(), "a stream that could finish within the grace ends with its terminator")
				assert.Equal(t, int64(words), row.Output, "billed the upstream's count")
				return
			}
			last := s.events[len(s.events)-1]
			assertNativeStreamError(t, s.shape, last)
			assert.Contains(t, last.Data, "shutting down", "the error event says why")
			assert.Positive(t, row.Output, "billed for the words it delivered (%d)", words)
			assert.True(t, row.Estimated)
		})
	}
	var rows int
	require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM usage_records`).Scan(&rows))
	assert.Equal(t, drainReloadStreams, rows, "one ledger row per request, none other")
}
