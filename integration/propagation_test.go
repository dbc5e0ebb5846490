package integration

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/internal/pgtest"
)

// propagationChat is a chat request for the model the gateways of this test declare.
const propagationChat = `{"model":"shared-chat","messages":[{"role":"user","content":"hi"}]}`

// revocationBound is what docs/store-and-scale-out.md promises for a revocation to reach another gateway
// sharing the store: one poll interval, plus what one poll and the request that notices it
// take (a few milliseconds on a quiet machine; the rest is margin for a busy one).
const revocationBound = auth.DefaultRefreshInterval + 150*time.Millisecond

// Two gateway processes share one PostgreSQL database. A key created on one must come
// to work on the other, and a key revoked on one must stop at once there and within
// revocationBound on the other: the promise made for revocation. Each round measures how long
// the other gateway takes to notice, from the admin call returning to its first answer
// that reflects the change.
//
// Gateways follow the store by polling it (auth.DefaultRefreshInterval). B's first 200
// for a new key comes just after one of its polls, and the revocation follows at once,
// so each revocation waits nearly a whole interval: the figures sit near the worst
// case, which is what the promise is about.
func TestRevocationPropagatesBetweenGatewayProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway and runs two processes on a PostgreSQL cluster")
	}
	// The cluster stops last: the gateways are killed and the schema dropped first.
	t.Cleanup(pgtest.Stop)
	dsn := pgtest.SchemaDSN(t)
	caddy := buildCaddyCLI(t)

	dirA, dirB := t.TempDir(), t.TempDir()
	a := startGatewayProcess(t, caddy, "a", dirA, sharedChatGateway(dsn, dirA))
	b := startGatewayProcess(t, caddy, "b", dirB, sharedChatGateway(dsn, dirB))

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
		assert.Less(t, gone, revocationBound, "round %d: revocation reached the other gateway in %v", i+1, gone)
	}

	t.Logf("key creation, gateway A to gateway B over PostgreSQL (%d rounds, polled every %v): %s", rounds, poll, spread(created))
	t.Logf("key revocation, gateway A to gateway B over PostgreSQL (%d rounds, polled every %v): %s", rounds, poll, spread(revoked))
}

// waitForStatus calls g with the key every interval until it answers want, and
// returns the time from since to that answer. Meanwhile only was may be answered;
// anything else, or no change within limit, fails the test.
func waitForStatus(t *testing.T, g *gateway, bearer string, want, was int, since time.Time, limit, interval time.Duration) time.Duration {
	t.Helper()
	var last *result
	var err error
	var at time.Time
	require.Eventually(t, func() bool {
		last, err = g.send("POST", "/v1/chat/completions", propagationChat, "Authorization", bearer)
		at = time.Now()
		return err != nil || last.Status != was
	}, limit-time.Since(since), interval, "%s still answers %d %v after the change", g.base, was, limit)
	require.NoError(t, err)
	require.Equal(t, want, last.Status, "waiting for %d from %s: %s", want, g.base, last.Body)
	return at.Sub(since)
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
