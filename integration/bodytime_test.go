package integration

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// startGatewayWithServer is startGatewayWith with Caddy's `servers` global options.
func startGatewayWithServer(t *testing.T, up *upstream, models, options, servers string) *gateway {
	t.Helper()
	store := storeOption(t, options)
	ports, caddyfile := startCaddy(t, 2, func(ports []int) string {
		port, adminPort := strconv.Itoa(ports[0]), strconv.Itoa(ports[1])
		return "{\n\tadmin 127.0.0.1:" + adminPort + "\n\tdefault_bind 127.0.0.1\n" +
			"\tservers {\n" + servers + "\t}\n" +
			"\tswitchyard {\n\t\tkey test " + testKey + "\n" + store + options + models + "\t}\n}\n" +
			"http://127.0.0.1:" + port + " {\n\tswitchyard_auth\n\tswitchyard_model\n\tswitchyard_proxy\n" +
			"\thandle_errors {\n\t\tswitchyard_errors\n\t}\n}\n"
	})
	g := &gateway{
		base:  "http://127.0.0.1:" + strconv.Itoa(ports[0]),
		admin: "http://127.0.0.1:" + strconv.Itoa(ports[1]),
		up:    up, caddyfile: caddyfile,
	}
	g.waitReady(t)
	return g
}

// bodyTimeoutCases are bodies sent in part, then not finished: small and large (a large
// one is forwarded to its candidate while it arrives), in both families.
func bodyTimeoutCases() []struct{ name, path, body string } {
	return []struct{ name, path, body string }{
		{"small, family A", "/v1/chat/completions", largeChat("big-a", 2<<10, `,"max_tokens":64`)},
		{"small, family B", "/v1/messages", largeChat("big-b", 2<<10, `,"max_tokens":64`)},
		{"large, family A", "/v1/chat/completions", largeChat("big-a", 300<<10, `,"max_tokens":64`)},
		{"large, family B", "/v1/messages", largeChat("big-b", 300<<10, `,"max_tokens":64`)},
	}
}

// assertBodyTimedOut reads the answer to a body left unfinished: 408 in the family's
// envelope, within limit of the stall.
func assertBodyTimedOut(t *testing.T, c *slowClient, path string, stalled time.Time, limit time.Duration) {
	t.Helper()
	status, answer := c.answer(t)
	took := time.Since(stalled)
	require.Equal(t, 408, status, answer)
	assert.Less(t, took, limit, "the 408 came too late")
	assert.Contains(t, gjson.Get(answer, "error.message").Str, "did not arrive in time")
	assert.Equal(t, "invalid_request_error", gjson.Get(answer, "error.type").Str)
	if strings.HasPrefix(path, "/v1/messages") {
		assert.Equal(t, "error", gjson.Get(answer, "type").Str, "family B's envelope")
		assert.True(t, gjson.Get(answer, "request_id").Exists(), "family B's envelope")
	} else {
		assert.False(t, gjson.Get(answer, "type").Exists(), "family A's envelope")
		assert.Equal(t, "request_timeout", gjson.Get(answer, "error.code").Str)
	}
}

func bigModels(up *watchedUpstream) string {
	return "\t\tmodel big-a {\n" + candidate("main", "family_a", up.URL+"/v1", upstreamPrefix+"-big") + "\t\t}\n" +
		"\t\tmodel big-b {\n" + candidate("main", "family_b", up.URL, upstreamPrefix+"-big") + "\t\t}\n"
}

// The operator's own server timeouts end a body that stalls: the client gets 408 in its
// family's envelope, the candidate a large body was being forwarded to is not blamed,
// and the gateway serves on.
func TestABodyThatStallsGets408AtTheServersReadBodyLimit(t *testing.T) {
	up := newWatchedUpstream(t)
	g := startGatewayWithServer(t, up.upstream, bigModels(up), "", "\t\ttimeouts {\n\t\t\tread_body 1500ms\n\t\t}\n")
	for _, c := range bodyTimeoutCases() {
		t.Run(c.name, func(t *testing.T) {
			client := startSlowRequest(t, g, c.path, c.body, len(c.body)/2)
			assertBodyTimedOut(t, client, c.path, time.Now(), 1500*time.Millisecond+2*time.Second)
		})
	}
	assert.Zero(t, up.whole.Load(), "an upstream got a body the client never finished")
	g.assertNoCircuitOpen(t, "", true)
	r := g.call(t, "POST", "/v1/chat/completions", largeChat("big-a", 100<<10, ""))
	assert.Equal(t, 200, r.Status, "%s", r.Body)
}

// Where the operator sets no body limits, the gateway's own do (shortened here): a body
// that pauses too long, and one that never pauses but trickles too slowly on average.
func TestABodyEndsAtTheGatewaysOwnLimitsWhenTheServerSetsNone(t *testing.T) {
	up := newWatchedUpstream(t)
	g := startGatewayWith(t, up.upstream, bigModels(up), "\t\tdefault_read_body_idle 700ms 2000\n")
	for _, c := range bodyTimeoutCases() {
		t.Run("stalled, "+c.name, func(t *testing.T) {
			client := startSlowRequest(t, g, c.path, c.body, len(c.body)/2)
			assertBodyTimedOut(t, client, c.path, time.Now(), 700*time.Millisecond+2*time.Second)
		})
	}
	t.Run("trickling", func(t *testing.T) {
		body := largeChat("big-b", 2<<10, `,"max_tokens":64`)
		client := startSlowRequest(t, g, "/v1/messages", body, 10)
		start := time.Now()
		// A byte every 100ms never pauses 700ms, but is far below 2000 bytes/s: the
		// average rate ends it, a little after the grace.
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for i := 0; i < len(client.rest); i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if _, err := client.conn.Write([]byte{client.rest[i]}); err != nil {
					return
				}
			}
		}()
		assertBodyTimedOut(t, client, "/v1/messages", start, 3*time.Second)
	})
	assert.Zero(t, up.whole.Load(), "an upstream got a body the client never finished")
	g.assertNoCircuitOpen(t, "", true)
	// A body that comes at a normal pace is served.
	r := g.call(t, "POST", "/v1/messages", largeChat("big-b", 200<<10, `,"max_tokens":64`), "anthropic-version", "2023-06-01")
	assert.Equal(t, 200, r.Status, "%s", r.Body)
}
