package integration

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/internal/pgtest"
)

// propagationChat is a chat request for the model the gateways of this test declare.
const propagationChat = `{"model":"shared-chat","messages":[{"role":"user","content":"hi"}]}`

// Two gateway processes share one PostgreSQL database. A key created on one must come
// to work on the other, and a key revoked on one must stop at once there and within a
// second on the other: the promise made for revocation. Each round measures how long
// the other gateway takes to notice, from the admin call returning to its first answer
// that reflects the change.
//
// Gateways follow the store by polling it (auth.DefaultRefreshInterval). B's first 200
// for a new key comes just after one of its polls, and the revocation follows at once,
// so each revocation waits nearly a whole interval: the figures sit near the worst
// case, which is what the one-second promise is about.
func TestRevocationPropagatesBetweenGatewayProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway and runs two processes on a PostgreSQL cluster")
	}
	// The cluster stops last: the gateways are killed and the schema dropped first.
	t.Cleanup(pgtest.Stop)
	dsn := pgtest.SchemaDSN(t)
	caddy := buildCaddyCLI(t)

	a := startGatewayProcess(t, caddy, "a", dsn)
	b := startGatewayProcess(t, caddy, "b", dsn)
	a.waitUp(t)
	b.waitUp(t)

	const rounds = 5
	const poll = 10 * time.Millisecond
	var created, revoked []time.Duration
	for i := range rounds {
		id, secret := a.createKey(t, fmt.Sprintf(`{"name":"propagation-%d"}`, i))
		createdAt := time.Now()
		bearer := "Bearer " + secret
		r := a.call(t, "POST", "/v1/chat/completions", propagationChat, "Authorization", bearer)
		require.Equal(t, 200, r.Status, "a key works at once on the gateway that created it: %s", r.Body)

		// Creation: B picks the key up from the store.
		seen := waitForStatus(t, b.gateway, bearer, 200, 401, createdAt, 5*time.Second, poll)
		created = append(created, seen)

		// Revocation: refused at once by A, and by B when its cache next reads the store.
		status, answer := a.adminCall(t, "POST", "/switchyard/keys/"+id+"/revoke", "")
		require.Equal(t, 200, status, "%s", answer.Raw)
		revokedAt := time.Now()
		require.Equal(t, "revoked", answer.Get("key.status").Str)
		familyA(t, a.call(t, "POST", "/v1/chat/completions", propagationChat, "Authorization", bearer), 401, "authentication_error")
		gone := waitForStatus(t, b.gateway, bearer, 401, 200, revokedAt, 5*time.Second, poll)
		revoked = append(revoked, gone)
		// The refusal on B is the real one, and it stays.
		familyA(t, b.call(t, "POST", "/v1/chat/completions", propagationChat, "Authorization", bearer), 401, "authentication_error")
		assert.Less(t, gone, time.Second, "round %d: revocation reached the other gateway in %v", i+1, gone)
	}

	t.Logf("key creation, gateway A to gateway B over PostgreSQL (%d rounds, polled every %v): %s", rounds, poll, spread(created))
	t.Logf("key revocation, gateway A to gateway B over PostgreSQL (%d rounds, polled every %v): %s", rounds, poll, spread(revoked))
}

// waitForStatus calls g with the key every interval until it answers want, and
// returns the time from since to that answer. Meanwhile only was may be answered;
// anything else, or no change within limit, fails the test.
func waitForStatus(t *testing.T, g *gateway, bearer string, want, was int, since time.Time, limit, interval time.Duration) time.Duration {
	t.Helper()
	for {
		r := g.call(t, "POST", "/v1/chat/completions", propagationChat, "Authorization", bearer)
		if r.Status == want {
			return time.Since(since)
		}
		require.Equal(t, was, r.Status, "waiting for %d from %s: %s", want, g.base, r.Body)
		if time.Since(since) > limit {
			t.Fatalf("%s still answers %d %v after the change", g.base, was, limit)
		}
		time.Sleep(interval)
	}
}

// spread gives the minimum, median and maximum of some durations.
func spread(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	ms := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
	}
	return fmt.Sprintf("min %s, median %s, max %s", ms(s[0]), ms(s[len(s)/2]), ms(s[len(s)-1]))
}

// processGateway is a gateway running as a process of its own, with its own admin
// port, gateway port, simulated upstream, journal and Caddy storage.
type processGateway struct {
	*gateway
	name   string
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has ended
	log    string
}

// startGatewayProcess starts a gateway process keeping its keys and ledger in the
// PostgreSQL database dsn names. It is killed when the test ends; if the test failed,
// the end of its log is shown.
func startGatewayProcess(t *testing.T, caddy func(args ...string) *exec.Cmd, name, dsn string) *processGateway {
	t.Helper()
	dir := t.TempDir()
	cfg := writeProcessConfig(t, dir, func(simPort int) string {
		return fmt.Sprintf(`		store postgres %q
		journal %s
		model shared-chat {
			candidate sim {
				protocol family_a
				url http://127.0.0.1:%d/v1
				upstream_model sim-basic
			}
		}`, dsn, filepath.Join(dir, "journal"), simPort)
	})
	config, gwPort, adminPort := cfg.path, cfg.gwPort, cfg.adminPort

	p := &processGateway{
		gateway: &gateway{
			base:  "http://127.0.0.1:" + strconv.Itoa(gwPort),
			admin: "http://127.0.0.1:" + strconv.Itoa(adminPort),
		},
		name:   name,
		exited: make(chan struct{}),
		log:    filepath.Join(dir, "gateway.log"),
	}
	p.cmd = caddy("run", "--config", config, "--adapter", "caddyfile")
	p.cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+filepath.Join(dir, "xdg"), "XDG_CONFIG_HOME="+filepath.Join(dir, "xdg"))
	log, err := os.Create(p.log)
	require.NoError(t, err)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	require.NoError(t, p.cmd.Start())
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
		_ = log.Close()
		if t.Failed() {
			p.showLog(t)
		}
	})
	return p
}

// waitUp waits until the gateway answers on its port.
func (p *processGateway) waitUp(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-p.exited:
			t.Fatalf("gateway %s exited: %v", p.name, p.cmd.ProcessState)
		default:
		}
		if resp, err := http.Get(p.base + "/v1/models"); err == nil {
			resp.Body.Close()
			return
		}
	}
	t.Fatalf("gateway %s did not start", p.name)
}

// showLog logs the last lines the gateway wrote.
func (p *processGateway) showLog(t *testing.T) {
	b, err := os.ReadFile(p.log)
	if err != nil {
		t.Logf("gateway %s: %v", p.name, err)
		return
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	t.Logf("gateway %s, end of its log:\n%s", p.name, strings.Join(lines, "\n"))
}
