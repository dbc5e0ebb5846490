package integration

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Among healthy candidates of one priority, the faster by recent time to first byte takes
// the traffic, the slower only a small exploring share (one order in twenty ignores
// latency, so at equal weights it is first in about 2.5% of requests).
func TestTheFasterOfHealthyEqualsTakesTheTraffic(t *testing.T) {
	up := newUpstream(t)
	a := "http://" + up.hostport() + "/v1"
	fast, slow := upstreamPrefix+"-fast", upstreamPrefix+"-slow+slow-headers-300ms"
	models := "\t\tmodel equals {\n" + candidate("fast", "family_a", a, fast) + candidate("slow", "family_a", a, slow) + "\t\t}\n"
	g := startGatewayWith(t, up, models, "")
	body := `{"model":"equals","messages":[{"role":"user","content":"hi"}]}`

	// Until both have served once, neither is known to be slow and the draw is by weight.
	require.Eventually(t, func() bool {
		r, err := g.send("POST", "/v1/chat/completions", body)
		return err == nil && r.Status == 200 && len(up.seenFor(fast)) > 0 && len(up.seenFor(slow)) > 0
	}, waitLong, pollEvery, "both candidates served once")

	fastBefore, slowBefore := len(up.seenFor(fast)), len(up.seenFor(slow))
	const n = 60
	for range n {
		require.Equal(t, 200, g.call(t, "POST", "/v1/chat/completions", body).Status)
	}
	toFast, toSlow := len(up.seenFor(fast))-fastBefore, len(up.seenFor(slow))-slowBefore
	t.Logf("of %d requests: %d to the fast candidate, %d to the slow one", n, toFast, toSlow)
	assert.Equal(t, n, toFast+toSlow, "no failover among healthy candidates")
	// Expected 1.5 of 60 to the slow one; by weight alone it would be 30.
	assert.LessOrEqual(t, toSlow, 9)
}
