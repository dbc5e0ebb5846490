package integration

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"
)

// The ledger loses nothing: kill the gateway with SIGKILL in the middle of a load,
// restart it, and every request a client saw answered is in the ledger.
func TestLedgerSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a gateway process")
	}
	caddy := buildCaddyCLI(t)
	dir := t.TempDir()
	cfg := writeProcessConfig(t, dir, func(simPort int) string {
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
	})
	config, gwPort := cfg.path, cfg.gwPort

	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(dir, "gateway.log")); err == nil {
				t.Logf("gateway log (end):\n%s", b[max(0, len(b)-4000):])
			}
		}
	})
	start := func() *exec.Cmd {
		cmd := caddy("run", "--config", config, "--adapter", "caddyfile")
		cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+filepath.Join(dir, "xdg"), "XDG_CONFIG_HOME="+filepath.Join(dir, "xdg"))
		log, err := os.OpenFile(filepath.Join(dir, "gateway.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		require.NoError(t, err)
		cmd.Stdout, cmd.Stderr = log, log
		require.NoError(t, cmd.Start())
		base := "http://127.0.0.1:" + strconv.Itoa(gwPort)
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if resp, err := http.Get(base + "/v1/models"); err == nil {
				resp.Body.Close()
				return cmd
			}
		}
		t.Fatal("the gateway did not start")
		return nil
	}
	base := "http://127.0.0.1:" + strconv.Itoa(gwPort)

	gw := start()
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
				if id, ok := oneMeteredCall(client, base, (w+i)%4); ok {
					answered.Store(id, true)
					nAnswered.Add(1)
				}
			}
		}(w)
	}
	time.Sleep(1500 * time.Millisecond)
	require.NoError(t, gw.Process.Signal(syscall.SIGKILL)) // in the middle of the load
	_ = gw.Wait()
	stopLoad()
	wg.Wait()
	require.Positive(t, nAnswered.Load())

	// Restart on the same journal and database: the journal replays.
	gw = start()
	defer func() { _ = gw.Process.Signal(syscall.SIGTERM); _ = gw.Wait() }()

	db, err := sql.Open("sqlite", filepath.Join(dir, "keys.db"))
	require.NoError(t, err)
	defer db.Close()
	rows := map[string]bool{}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		rows = ledgerRequestIDs(t, db)
		if len(rows) >= int(nAnswered.Load()) {
			break
		}
	}
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

func ledgerRequestIDs(t *testing.T, db *sql.DB) map[string]bool {
	out := map[string]bool{}
	rows, err := db.Query(`SELECT request_id FROM usage_records`)
	if err != nil {
		return out // the table appears with the first migration run
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		out[id] = true
	}
	return out
}
