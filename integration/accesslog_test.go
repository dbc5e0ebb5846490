package integration

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// The access log names the service model, the serving candidate, the attempts and the
// failover reasons, and nothing that identifies an upstream or a key. Caddy's access log
// redacts Authorization by itself; x-api-key it does not know, so the log configuration
// the README and Caddyfile.example give deletes it, and this test uses that configuration.
func TestAccessLogFields(t *testing.T) {
	up := newUpstream(t)
	port := freePort(t)
	logPath := filepath.Join(t.TempDir(), "access.log")
	g := &gateway{base: "http://127.0.0.1:" + strconv.Itoa(port), up: up}
	startCaddy(t, "{\n\tadmin off\n\tdefault_bind 127.0.0.1\n\tswitchyard {\n"+
		"\t\tkey test "+testKey+"\n"+storeOption(t, "")+standardModels(up)+"\t}\n}\n"+
		"http://127.0.0.1:"+strconv.Itoa(port)+" {\n\tlog {\n\t\toutput file "+logPath+"\n\t\tformat filter {\n\t\t\twrap json\n\t\t\trequest>headers>X-Api-Key delete\n\t\t}\n\t}\n"+
		"\tswitchyard_auth\n\tswitchyard_model\n\tswitchyard_proxy\n\thandle_errors {\n\t\tswitchyard_errors\n\t}\n}\n")
	g.waitReady(t)

	r := g.call(t, "POST", "/v1/chat/completions", `{"model":"failover-a","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, 200, r.Status)
	id := r.Header.Get("X-Switchyard-Request-Id")

	var entry gjson.Result
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(logPath)
		for _, line := range strings.Split(string(b), "\n") {
			if e := gjson.Parse(line); e.Get("switchyard_request_id").Str == id {
				entry = e
			}
		}
		if entry.Exists() {
			break
		}
	}
	require.True(t, entry.Exists(), "no access log entry for the request")
	assert.Equal(t, "failover-a", entry.Get("switchyard_model").Str)
	assert.Equal(t, "good", entry.Get("switchyard_candidate").Str)
	assert.Equal(t, int64(5), entry.Get("switchyard_attempts").Int())
	assert.Equal(t, `["refused:connect","broken:status","limited:rate_limit","inband:status"]`, entry.Get("switchyard_failovers").Raw)
	assert.Equal(t, "static:test", entry.Get("switchyard_key_id").Str)

	// A Family B client sends its key in x-api-key, a header Caddy's log does not redact.
	r = g.call(t, "POST", "/v1/messages", messagesBody, "anthropic-version", v1, "x-api-key", testKey)
	require.Equal(t, 200, r.Status)
	time.Sleep(200 * time.Millisecond)
	b, err := os.ReadFile(logPath)
	require.NoError(t, err)
	for _, secret := range []string{upstreamPrefix, upstreamCred, up.hostport(), testKey} {
		assert.NotContains(t, string(b), secret, "the access log must not name %q", secret)
	}
}
