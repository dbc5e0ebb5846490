package integration

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"
)

// killAfter is how many answers the load must have had when the gateway is killed: by
// then records are in every state (journaled, being written, in the database).
const killAfter = 2000

// The ledger loses nothing: kill the gateway with SIGKILL in the middle of a load,
// restart it, and every request a client saw answered is in the ledger.
func TestLedgerSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a gateway process")
	}
	caddy := buildCaddyCLI(t)
	dir := t.TempDir()
	config := func(simPort int) string {
		return fmt.Sprintf(`		store sqlite %s
		journal %s
		key load %s
		model metered {
			price input 1 output 2
			candidate a {
				protocol family_a
				url http://127.0.0.1:%d/v1
				upstream_model sim-basic
			}
			candidate b {
				protocol family_b
				url http://127.0.0.1:%d
				upstream_model sim-basic
			}
		}`, filepath.Join(dir, "keys.db"), filepath.Join(dir, "journal"), testKey, simPort, simPort)
	}

	gw := startGatewayProcess(t, caddy, "before-the-kill", dir, config)
	var answered sync.Map // request id → true, for every answer seen complete
	var nAnswered, started atomic.Int64
	ctx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second}
			for i := 0; ctx.Err() == nil; i++ {
				started.Add(1)
				if id, ok := oneMeteredCall(client, gw.base, (w+i)%4); ok {
					answered.Store(id, true)
					nAnswered.Add(1)
				}
			}
		}(w)
	}
	// In the middle of the load.
	require.Eventually(t, func() bool { return nAnswered.Load() >= killAfter }, waitLong, pollEvery,
		"the load did not get going")
	gw.kill(t)
	stopLoad()
	wg.Wait()

	// Restart on the same journal and database: the journal replays.
	startGatewayProcess(t, caddy, "after-the-kill", dir, config)

	db, err := sql.Open("sqlite", filepath.Join(dir, "keys.db"))
	require.NoError(t, err)
	defer db.Close()
	var rows map[string]bool
	assert.Eventually(t, func() bool {
		rows = ledgerRequestIDs(db)
		return len(rows) >= int(nAnswered.Load())
	}, waitLong, 100*time.Millisecond, "fewer ledger rows than answered requests")
	missing := 0
	answered.Range(func(id, _ any) bool {
		if !rows[id.(string)] {
			missing++
		}
		return true
	})
	extra := len(rows) - (int(nAnswered.Load()) - missing)
	t.Logf("%d requests started, %d answered before SIGKILL, %d ledger rows after restart: %d answered requests missing, %d rows for answers cut by the kill",
		started.Load(), nAnswered.Load(), len(rows), missing, extra)
	assert.Zero(t, missing, "every request a client saw answered is in the ledger")
	// A record may exist for an answer whose last bytes the kill stopped: the upstream
	// produced it, so it is billed; there can be no more of those than requests in flight.
	assert.LessOrEqual(t, extra, 8)
}

// oneMeteredCall makes a chat or messages call, plain or streamed, and returns the
// gateway's request id when the whole answer arrived.
func oneMeteredCall(client *http.Client, base string, kind int) (string, bool) {
	path, body := "/v1/chat/completions", `{"model":"metered","messages":[{"role":"user","content":"hi"}]`
	if kind >= 2 {
		path, body = "/v1/messages", `{"model":"metered","max_tokens":64,"messages":[{"role":"user","content":"hi"}]`
	}
	stream := kind%2 == 1
	if stream {
		body += `,"stream":true}`
	} else {
		body += `}`
	}
	req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("anthropic-version", v1)
	resp, err := client.Do(req)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	id := resp.Header.Get("X-Switchyard-Request-Id")
	if resp.StatusCode != 200 {
		return "", false
	}
	if !stream {
		b, err := io.ReadAll(resp.Body)
		return id, err == nil && strings.Contains(string(b), `"model":"metered"`) && strings.HasSuffix(strings.TrimSpace(string(b)), "}")
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "data: [DONE]" || line == "event: message_stop" {
			return id, true
		}
	}
	return "", false
}

// ledgerRequestIDs is the set of request ids in the ledger; empty while the table or the
// database cannot be read.
func ledgerRequestIDs(db *sql.DB) map[string]bool {
	out := map[string]bool{}
	rows, err := db.Query(`SELECT request_id FROM usage_records WHERE outcome = 'served'`)
	if err != nil {
		return out // the table appears with the first migration run
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if rows.Scan(&id) != nil {
			return map[string]bool{}
		}
		out[id] = true
	}
	return out
}
