package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/internal/pgtest"
)

// A gateway that (re)starts while PostgreSQL is down comes up, serves the keys it last
// knew and the configuration's, refuses others, journals usage, and once PostgreSQL is
// back drains the journal within a second: nothing set aside in
// refused.jsonl, every answered request in the usage table exactly once. The outage is
// logged once each way, not per poll.
func TestGatewayStartsAndCatchesUpThroughAStoreOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway and stops and starts a PostgreSQL server")
	}
	cluster := pgtest.NewCluster(t)
	caddy := buildCaddyCLI(t)
	dir := t.TempDir() // the gateway's data directory and journal, kept across its runs
	chat := func(g *processGateway, bearer string) *result {
		return g.call(t, "POST", "/v1/chat/completions", propagationChat, "Authorization", bearer)
	}
	var answered []string // request ids of every 200 a client saw

	// A first run, with the database up: a key is made and used, so the key
	// snapshot knows it. Then the gateway dies (SIGKILL, like a crash) and the database
	// goes away.
	first := startGatewayProcess(t, caddy, "first", dir, sharedChatGateway(cluster.DSN(), dir))
	_, secret := first.createKey(t, `{"name":"known-before-the-outage"}`)
	r := chat(first, "Bearer "+secret)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	answered = append(answered, r.Header.Get("X-Switchyard-Request-Id"))
	first.kill(t)
	snapshot := filepath.Join(dir, "xdg", "caddy", "switchyard", "key-snapshot.json")
	info, err := os.Stat(snapshot)
	require.NoError(t, err, "the key snapshot")
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	raw, err := os.ReadFile(snapshot)
	require.NoError(t, err)
	assert.NotContains(t, string(raw), secret)
	cluster.Stop(t)

	// The gateway starts again with the database down.
	started := time.Now()
	second := startGatewayProcess(t, caddy, "second", dir, sharedChatGateway(cluster.DSN(), dir))
	upAfter := time.Since(started)
	t.Logf("gateway up %v after it was started with PostgreSQL down", upAfter.Round(time.Millisecond))
	outageStart := lineCount(t, second.log)

	// A 10 s outage with traffic: the known key and the static key are served, an
	// unknown key is refused, and an admin call fails with a bare 500.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		for _, bearer := range []string{"Bearer " + secret, "Bearer " + testKey} {
			r := chat(second, bearer)
			require.Equal(t, 200, r.Status, "%s", r.Body)
			answered = append(answered, r.Header.Get("X-Switchyard-Request-Id"))
		}
	}
	familyA(t, chat(second, "Bearer sk-sy-"+strings.Repeat("x", 52)), 401, "authentication_error")
	status, answer := second.adminCall(t, "GET", "/switchyard/keys", "")
	assert.Equal(t, 500, status)
	assert.NotContains(t, answer.Raw, "127.0.0.1", "the client's 500 stays generic")
	outageLines := readLines(t, second.log)[outageStart:]
	t.Logf("%d log lines during the 10 s outage (%d requests answered):\n%s", len(outageLines), len(answered)-1, strings.Join(outageLines, "\n"))
	assert.LessOrEqual(t, len(outageLines), 8, "an outage is logged when it starts, not per poll")
	assert.Equal(t, 1, countContaining(outageLines, "admin API call failed"), "the failed admin call, once, with its cause")

	// The database returns: the journal drains promptly.
	cluster.Start(t)
	back := time.Now()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, cluster.DSN())
	require.NoError(t, err)
	defer conn.Close(ctx)
	// stored is the number of usage records per request id; empty while the database
	// cannot be read (it runs inside Eventually, where the test cannot be stopped).
	stored := func() map[string]int {
		out := map[string]int{}
		rows, err := conn.Query(ctx, `SELECT request_id, count(*) FROM usage_records WHERE outcome = 'served' GROUP BY request_id`)
		if err != nil {
			return out
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var n int
			if rows.Scan(&id, &n) != nil {
				return map[string]int{}
			}
			out[id] = n
		}
		if rows.Err() != nil {
			return map[string]int{}
		}
		return out
	}
	require.Eventually(t, func() bool { return len(stored()) >= len(answered) }, 10*time.Second, pollEvery)
	drained := time.Since(back)
	t.Logf("%d usage records in PostgreSQL %v after it came back", len(answered), drained.Round(time.Millisecond))
	assert.Less(t, drained, time.Second, "the journal drains within a second (docs/store-and-scale-out.md)")

	rows := stored()
	assert.Len(t, rows, len(answered), "nothing stored that no client was answered")
	for _, id := range answered {
		assert.Equal(t, 1, rows[id], "request %s stored exactly once", id)
	}
	_, err = os.Stat(filepath.Join(dir, "journal", "refused.jsonl"))
	assert.True(t, os.IsNotExist(err), "nothing set aside in refused.jsonl")

	// Keys made while the gateway was down now come from the store; the outage's end
	// is logged once.
	_, fresh := second.createKey(t, `{"name":"after-the-outage"}`)
	r = chat(second, "Bearer "+fresh)
	require.Equal(t, 200, r.Status)
	answered = append(answered, r.Header.Get("X-Switchyard-Request-Id"))
	require.Eventually(t, func() bool {
		return countContaining(readLines(t, second.log), "key store answering again") == 1
	}, waitShort, pollEvery)

	// The same gateway through a 10 s outage while it runs: served from memory,
	// logged once each way, drained as promptly afterwards.
	outageStart = lineCount(t, second.log)
	cluster.Stop(t)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		for _, bearer := range []string{"Bearer " + secret, "Bearer " + fresh, "Bearer " + testKey} {
			r := chat(second, bearer)
			require.Equal(t, 200, r.Status, "%s", r.Body)
			answered = append(answered, r.Header.Get("X-Switchyard-Request-Id"))
		}
	}
	outageLines = readLines(t, second.log)[outageStart:]
	t.Logf("%d log lines during a 10 s outage of a running gateway:\n%s", len(outageLines), strings.Join(outageLines, "\n"))
	assert.LessOrEqual(t, len(outageLines), 3)
	cluster.Start(t)
	back = time.Now()
	conn2, err := pgx.Connect(ctx, cluster.DSN())
	require.NoError(t, err)
	defer conn2.Close(ctx)
	conn = conn2
	require.Eventually(t, func() bool { return len(stored()) >= len(answered) }, 10*time.Second, pollEvery)
	drained = time.Since(back)
	t.Logf("%d usage records in PostgreSQL %v after it came back from the second outage", len(answered), drained.Round(time.Millisecond))
	assert.Less(t, drained, time.Second, "the journal drains within a second (docs/store-and-scale-out.md)")
	rows = stored()
	assert.Len(t, rows, len(answered))
	for _, id := range answered {
		assert.Equal(t, 1, rows[id], "request %s stored exactly once", id)
	}
	_, err = os.Stat(filepath.Join(dir, "journal", "refused.jsonl"))
	assert.True(t, os.IsNotExist(err), "nothing set aside in refused.jsonl")
	require.Eventually(t, func() bool {
		return countContaining(readLines(t, second.log), "key store answering again") == 2
	}, waitShort, pollEvery)
	t.Logf("log lines about the store in the whole run of the second gateway:\n%s",
		strings.Join(filterContaining(readLines(t, second.log), "key store", "usage", "snapshot", "ledger", "admin api call"), "\n"))
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func lineCount(t *testing.T, path string) int { return len(readLines(t, path)) }

func countContaining(lines []string, s string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

func filterContaining(lines []string, any ...string) []string {
	var out []string
	for _, l := range lines {
		for _, s := range any {
			if strings.Contains(strings.ToLower(l), s) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}
