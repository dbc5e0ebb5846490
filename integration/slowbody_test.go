package integration

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Slow bodies under attack: clients with valid keys declare large bodies, send a part and
// then trickle a byte at a time, from one key limited to 3 concurrent requests and from
// six keys without limits. Every such connection must end at the body's deadline (the
// server's `read_body_idle` with its minimum rate), the process must hold no more than
// the body-memory ceiling meanwhile, and other clients must be served while it lasts.

const (
	slowKey        = "sk-slowpoke-key-0123456789ab"
	slowDeclared   = 8 << 20 // what each slow client promises
	slowSentAtOnce = 1 << 20 // what it sends before it trickles
	slowCeiling    = 64 << 20
)

func manyKey(i int) string { return fmt.Sprintf("sk-many-%d-key-0123456789abcdef", i) }

// slowGateway runs the gateway with a short body deadline and a body-memory ceiling.
func slowGateway(t *testing.T) *gateway {
	t.Helper()
	up := newUpstream(t)
	keys := "\t\tkey slowpoke " + slowKey + " {\n\t\t\tconcurrency 3\n\t\t}\n"
	for i := range 6 {
		keys += fmt.Sprintf("\t\tkey many%d %s\n", i, manyKey(i))
	}
	store := "\t\tstore sqlite " + t.TempDir() + "/switchyard.db\n"
	ports, caddyfile := startCaddy(t, 2, func(ports []int) string {
		return "{\n\tadmin 127.0.0.1:" + strconv.Itoa(ports[1]) + "\n\tdefault_bind 127.0.0.1\n" +
			// A body may idle 1 s, and must average 1 MB/s after that.
			"\tservers {\n\t\ttimeouts {\n\t\t\tread_body_idle 1s 1000000\n\t\t}\n\t}\n" +
			"\tswitchyard {\n\t\tkey test " + testKey + "\n" + store +
			"\t\tmax_body_memory " + strconv.Itoa(slowCeiling) + "\n" + keys + standardModels(up) + "\t}\n}\n" +
			"http://127.0.0.1:" + strconv.Itoa(ports[0]) + " {\n\tswitchyard_auth\n\tswitchyard_model\n\tswitchyard_proxy\n" +
			"\thandle_errors {\n\t\tswitchyard_errors\n\t}\n}\n"
	})
	g := &gateway{base: "http://127.0.0.1:" + strconv.Itoa(ports[0]), admin: "http://127.0.0.1:" + strconv.Itoa(ports[1]), up: up, caddyfile: caddyfile}
	g.waitReady(t)
	return g
}

// slowUpload is one client that sends part of a body and then a byte at a time.
type slowUpload struct {
	status  int           // the answer's status; 0 when the connection ended without one
	elapsed time.Duration // from the first byte of the body to the end of the connection
}

// uploadSlowly declares slowDeclared bytes of body, sends slowSentAtOnce of them, tells
// sent, and then sends one byte every 50 ms until the gateway answers or hangs up.
func uploadSlowly(t *testing.T, g *gateway, key string, sent chan<- struct{}) slowUpload {
	status, elapsed, err := partialUpload(g.base, key, "chat-a", slowDeclared, slowSentAtOnce, 50*time.Millisecond, sent)
	assert.NoError(t, err)
	return slowUpload{status: status, elapsed: elapsed}
}

// partialUpload declares declared bytes of a chat body for model, sends about sendNow of them and tells
// sent; then, with trickle > 0, one byte every trickle, else nothing more, until the
// gateway answers or hangs up. It returns the answer's status (0 for none) and the time
// from the body's first byte.
func partialUpload(base, key, model string, declared, sendNow int, trickle time.Duration, sent chan<- struct{}) (int, time.Duration, error) {
	host := strings.TrimPrefix(base, "http://")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		close(sent)
		return 0, 0, err
	}
	defer conn.Close()
	head := rawRequestHead(host, key, "/v1/chat/completions", declared)
	body := `{"model":"` + model + `","messages":[{"role":"user","content":"` + strings.Repeat("x", sendNow)
	answered := make(chan int, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	start := time.Now()
	_, err = conn.Write([]byte(head + body))
	close(sent)
	if err != nil || trickle <= 0 {
		return <-answered, time.Since(start), nil
	}
	tick := time.NewTicker(trickle)
	defer tick.Stop()
	for {
		select {
		case status := <-answered:
			return status, time.Since(start), nil
		case <-tick.C:
			if _, err := conn.Write([]byte("x")); err != nil {
				return <-answered, time.Since(start), nil
			}
		}
	}
}

func TestSlowBodiesEndAtTheirDeadlineWithinTheMemoryCeiling(t *testing.T) {
	g := slowGateway(t)
	before := settledRSS(t)
	peakReset := resetPeakRSS()

	var wg sync.WaitGroup
	results := make([]slowUpload, 16)
	keys := make([]string, 16)
	sent := make([]chan struct{}, 16)
	for i := range keys {
		keys[i] = slowKey // ten from the key limited to three at once
		if i >= 10 {
			keys[i] = manyKey(i - 10) // and one from each of six other keys
		}
		sent[i] = make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = uploadSlowly(t, g, keys[i], sent[i])
		}()
	}
	for _, s := range sent {
		<-s
	}
	// While they trickle, other clients are served.
	for range 5 {
		r := g.call(t, "POST", "/v1/chat/completions", `{"model":"chat-a","messages":[{"role":"user","content":"hi"}]}`)
		assert.Equal(t, 200, r.Status, "%s", r.Body)
	}
	wg.Wait()

	limitedRefused, timedOut := 0, 0
	for i, r := range results {
		switch r.status {
		case http.StatusTooManyRequests:
			assert.Equal(t, slowKey, keys[i], "only the limited key is refused")
			limitedRefused++
		case http.StatusRequestTimeout:
			timedOut++
		default:
			t.Errorf("slow upload %d (%s) ended with status %d after %s", i, keys[i][:12], r.status, r.elapsed)
		}
		// 1 s idle plus 1 s of credit for the first MiB at 1 MB/s, and slack for a busy machine.
		assert.Less(t, r.elapsed, 6*time.Second, "slow upload %d ended at its deadline", i)
	}
	assert.Equal(t, 7, limitedRefused, "the limited key's requests beyond its three are refused before their bodies")
	assert.Equal(t, 9, timedOut, "three from the limited key and six from the others read until the deadline")

	if peakReset {
		peak := procStatusKB(t, "VmHWM")
		assert.Less(t, (peak-before)/1024, int64(slowCeiling>>20)+rssBoundMB(),
			"resident memory grew %d MB under the attack", (peak-before)/1024)
	}
	// Every slow body's memory was given back.
	assert.Eventually(t, func() bool { return settledRSS(t)-before < rssBoundMB()*1024 }, waitShort, pollEvery)
}
