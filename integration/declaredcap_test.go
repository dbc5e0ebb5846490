package integration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// A request without an output cap, to a model that declares one, reaches the upstream
// with the declared cap in its shape's own field: the cap admission reserved is the one
// the upstream enforces. A body forwarded while it still arrives gets it too.
func TestTheDeclaredCapReachesTheUpstream(t *testing.T) {
	up := newWatchedUpstream(t)
	capped := "\t\t\tmax_output_tokens 2048\n"
	models := "\t\tmodel capped-a {\n" + capped + candidate("main", "family_a", up.URL+"/v1", upstreamPrefix+"-a") + "\t\t}\n" +
		"\t\tmodel capped-b {\n" + capped + candidate("main", "family_b", up.URL, upstreamPrefix+"-b") + "\t\t}\n"
	g := startGatewayWith(t, up.upstream, models, "")

	received := func() []byte {
		select {
		case b := <-up.bodies:
			return b
		case <-time.After(10 * time.Second):
			t.Fatal("the upstream received no body")
			return nil
		}
	}
	for _, c := range []struct {
		name, path, body string
		field            string // where the upstream must find the cap
		want             int64
	}{
		{"chat", "/v1/chat/completions", `{"model":"capped-a","messages":[{"role":"user","content":"Hi"}]}`, "max_completion_tokens", 2048},
		{"chat stream", "/v1/chat/completions", `{"model":"capped-a","stream":true,"messages":[{"role":"user","content":"Hi"}]}`, "max_completion_tokens", 2048},
		{"responses", "/v1/responses", `{"model":"capped-a","input":"Hi"}`, "max_output_tokens", 2048},
		{"chat with its own cap", "/v1/chat/completions", `{"model":"capped-a","max_tokens":16,"messages":[{"role":"user","content":"Hi"}]}`, "max_completion_tokens", 0},
		{"messages", "/v1/messages", `{"model":"capped-b","max_tokens":16,"messages":[{"role":"user","content":"Hi"}]}`, "max_tokens", 16},
	} {
		headers := []string{}
		if c.path == "/v1/messages" {
			headers = []string{"anthropic-version", "2023-06-01"}
		}
		r := g.call(t, "POST", c.path, c.body, headers...)
		require.Equal(t, 200, r.Status, "%s: %s", c.name, r.Body)
		got := received()
		assert.Equal(t, c.want, gjson.GetBytes(got, c.field).Int(), "%s: %s", c.name, got)
	}

	// A large body, forwarded before the client has sent all of it.
	body := largeChat("capped-a", 600<<10, "")
	client := startSlowRequest(t, g, "/v1/chat/completions", body, len(body)/2)
	require.Eventually(t, func() bool { return up.received.Load() > int64(len(body))/3 }, 5*time.Second, 5*time.Millisecond,
		"the body is forwarded while it arrives")
	status, answer := client.finish(t)
	require.Equal(t, 200, status, answer)
	got := received()
	assert.Equal(t, int64(2048), gjson.GetBytes(got, "max_completion_tokens").Int())
	assert.Len(t, got, len(body)-len("capped-a")+len(upstreamPrefix+"-a")+len(`,"max_completion_tokens":2048`))
}
