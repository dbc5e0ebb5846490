package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

const twoAtATimeKey = "sk-two-at-a-time-0123456789"

// A key limited to 2 requests at a time holds two slow large bodies open: a third of
// its requests is refused at once, before any of its body is read (the client still
// holds all of it), in its family's envelope; another key is served meanwhile, and the
// slots free when the slow bodies end.
func TestAKeyAtItsConcurrencyLimitCannotOpenAnotherBody(t *testing.T) {
	up := newWatchedUpstream(t)
	g := startGatewayWith(t, up.upstream, bigModels(up),
		"\t\tdefault_read_body_idle 2s\n\t\tkey two "+twoAtATimeKey+" {\n\t\t\tconcurrency 2\n\t\t}\n")
	body := largeChat("big-a", 400<<10, `,"max_tokens":64`)
	var slow []*slowClient
	for range 2 {
		slow = append(slow, startSlowRequestAs(t, g, twoAtATimeKey, "/v1/chat/completions", body, len(body)/2))
	}
	// Both are in once a whole small request of the key is refused (a request admitted
	// before they were in is answered too, so this never waits on a body). A slow one
	// that such a request beat to a slot was refused: it starts again.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for i, s := range slow {
			if s.answered() {
				slow[i] = startSlowRequestAs(t, g, twoAtATimeKey, "/v1/chat/completions", body, len(body)/2)
			}
		}
		r, err := g.send("POST", "/v1/chat/completions", largeChat("big-a", 1<<10, ""), "Authorization", "Bearer "+twoAtATimeKey)
		if assert.NoError(c, err) {
			assert.Equal(c, 429, r.Status)
		}
	}, waitLong, pollEvery, "the two slow bodies never held the key's slots")

	for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
		third := strings.Replace(body, "big-a", map[bool]string{true: "big-b", false: "big-a"}[path == "/v1/messages"], 1)
		// Nothing of the body is sent: the answer comes without it.
		c := startSlowRequestAs(t, g, twoAtATimeKey, path, third, 0)
		asked := time.Now()
		status, answer := c.answer(t)
		require.Equal(t, 429, status, answer)
		assert.Less(t, time.Since(asked), 2*time.Second, "the refusal waited on the body")
		assert.Contains(t, gjson.Get(answer, "error.message").Str, "limit of 2 concurrent requests")
		assert.Equal(t, path == "/v1/messages", gjson.Get(answer, "type").Str == "error", "the family's envelope: %s", answer)
	}

	// Another key is served meanwhile.
	r := g.call(t, "POST", "/v1/chat/completions", largeChat("big-a", 100<<10, ""))
	assert.Equal(t, 200, r.Status, "%s", r.Body)

	// The slow bodies end, one abandoned by its client, one at the body's time limit:
	// both slots free, which two more slow bodies of the key show (each admitted, so
	// each gets its own 408, not a 429).
	slow[0].conn.Close()
	status, answer := slow[1].answer(t)
	require.Equal(t, 408, status, answer)
	again := []*slowClient{
		startSlowRequestAs(t, g, twoAtATimeKey, "/v1/chat/completions", body, len(body)/2),
		startSlowRequestAs(t, g, twoAtATimeKey, "/v1/messages", strings.Replace(body, "big-a", "big-b", 1), len(body)/2),
	}
	for _, c := range again {
		status, answer := c.answer(t)
		assert.Equal(t, 408, status, "a slot was not freed: %s", answer)
	}
}
