package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/internal/pgtest"
	"github.com/switchyard-gw/switchyard/internal/redistest"
)

// Leases across gateway processes (docs/store-and-scale-out.md, "Leases"): what a lease
// changes against exact mode is stated there, and each bound is held here by two real
// gateways sharing Redis and PostgreSQL.

// centChat is a request that reserves exactly what it costs: priced-chat's output is
// 1000 micro-units a token, the simulator answers 10 tokens, and max_tokens is 10: 0.01.
const centChat = `{"model":"priced-chat","max_tokens":10,"messages":[{"role":"user","content":"Hello"}]}`

// TestAKilledGatewayLosesAtMostItsLease: a gateway killed (SIGKILL) holding a lease of a
// budget keeps the other gateway from at most what that lease held, until the lease
// lapses (`lease`, 3s here); then the other gateway has the rest, the period's spend
// seeded again from the ledger, which holds what the dead gateway had not added to Redis:
// the budget is spent exactly, never beyond.
func TestAKilledGatewayLosesAtMostItsLease(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two gateway processes with Redis and PostgreSQL")
	}
	a, b, dsn, up := twoLeasingGateways(t, "\t\t\tlease 3s\n", "\t\tkey budgeted "+budgetKey+" {\n\t\t\tbudget 0.5/day\n\t\t}\n", "-k")
	send := func(g *processGateway) int {
		r, err := g.send("POST", "/v1/chat/completions", centChat, "Authorization", "Bearer "+budgetKey)
		require.NoError(t, err)
		require.Contains(t, []int{200, 429}, r.Status, "%s", r.Body)
		return r.Status
	}
	for range 3 {
		require.Equal(t, 200, send(a))
	}
	conn, err := pgx.Connect(context.Background(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	ledger := func() (rows, spent int64) {
		err := conn.QueryRow(context.Background(), `SELECT count(*), coalesce(sum(cost_micros), 0) FROM usage_records WHERE key_id = 'static:budgeted' AND outcome = 'served'`).Scan(&rows, &spent)
		require.NoError(t, err)
		return rows, spent
	}
	// The records reach the database within a second; then a is killed holding its lease
	// and the spend it has not added to Redis.
	require.Eventually(t, func() bool { rows, _ := ledger(); return rows == 3 }, waitLong, pollEvery)
	a.kill(t)

	// 47 of the budget's 50 requests remain; a's lease held at most an eighth of what
	// remained when it was taken, in whole requests: 6.
	before := 0
	for send(b) == 200 {
		before++
	}
	t.Logf("b admitted %d while a's lease was open: %d refused early", before, 47-before)
	assert.LessOrEqual(t, before, 47, "never beyond the budget")
	assert.GreaterOrEqual(t, before, 47-49/8, "refused early by at most a's lease")

	// Once a's lease lapses, b has the rest, and not one more.
	after := before
	deadline := time.Now().Add(waitLong)
	for after < 47 && time.Now().Before(deadline) {
		if send(b) == 200 {
			after++
		} else {
			time.Sleep(100 * time.Millisecond) // the lease lapses on its own clock
		}
	}
	require.Equal(t, 47, after, "a's lease lapsed and its spend came from the ledger")
	assert.Equal(t, 429, send(b))
	require.Eventually(t, func() bool { rows, _ := ledger(); return rows == 50 }, waitLong, pollEvery)
	_, spent := ledger()
	assert.Equal(t, int64(500_000), spent, "the budget spent exactly")
	assert.Equal(t, 50, up.count())
}

// TestALoweredLimitReachesTheOtherGatewaysLeases: a project's rate lowered through one
// gateway's admin API holds at the other within its key refresh: no request is admitted
// there from a lease taken under the old figure once it has the new one.
func TestALoweredLimitReachesTheOtherGatewaysLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two gateway processes with Redis and PostgreSQL")
	}
	a, b, _, _ := twoLeasingGateways(t, "", "", "-l")
	status, answer := a.adminCall(t, "POST", "/switchyard/projects", `{"id":"team","limits":{"rpm":6000}}`)
	require.Equal(t, 201, status, "%s", answer.Raw)
	_, secret := a.createKey(t, `{"name":"svc","project_id":"team"}`)
	send := func(g *processGateway) int {
		r, err := g.send("POST", "/v1/chat/completions", centChat, "Authorization", "Bearer "+secret)
		require.NoError(t, err)
		return r.Status
	}
	require.Eventually(t, func() bool { return send(b) == 200 }, waitLong, pollEvery, "b knows the key")
	for range 20 {
		require.Equal(t, 200, send(b)) // b holds a lease of the project's bucket
	}

	status, answer = a.adminCall(t, "PUT", "/switchyard/projects/team/limits", `{"rpm":3}`)
	require.Equal(t, 200, status, "%s", answer.Raw)
	changed := time.Now()
	// b has the new figure once its projects poll brings it: its first refusal.
	admitted := 0
	for send(b) == 200 {
		admitted++
		require.Less(t, admitted, 10_000)
	}
	seen := time.Since(changed)
	t.Logf("b refused under the new figure %v after the change, having admitted %d meanwhile", seen, admitted)
	assert.Less(t, seen, 2*time.Second, "within the key refresh (250 ms) and a round trip")

	// From then on the new figure holds across both gateways, whatever b leased before.
	var mu sync.Mutex
	ok := 0
	var wg sync.WaitGroup
	for i := range 20 {
		g := a
		if i%2 == 1 {
			g = b
		}
		wg.Go(func() {
			if send(g) == 200 {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, ok, 1, "the bucket of 3 a minute has nothing left but what refilled")
}

// twoLeasingGateways starts two gateway processes sharing PostgreSQL and a Redis of the
// test's own, counting limits through leases (the default): limits adds to their limits
// block, keys to their switchyard option, and the model priced-chat is served by up under
// a name ending in suffix.
func twoLeasingGateways(t *testing.T, limits, keys, suffix string) (a, b *processGateway, dsn string, up *upstream) {
	t.Helper()
	rd := redistest.Start(t)
	dsn = pgtest.SchemaDSN(t)
	caddy := buildCaddyCLI(t)
	up = newUpstream(t)
	option := func(dir string) func(int) string {
		return func(int) string {
			return fmt.Sprintf("\t\tstore postgres %q\n\t\tjournal %s\n\t\tlimits {\n\t\t\tredis %s\n%s\t\t}\n%s",
				dsn, filepath.Join(dir, "journal"), rd.URL(), limits, keys) + pricedChat("http://"+up.hostport(), upstreamPrefix+suffix)
		}
	}
	dirA, dirB := t.TempDir(), t.TempDir()
	return startGatewayProcess(t, caddy, "a", dirA, option(dirA)), startGatewayProcess(t, caddy, "b", dirB, option(dirB)), dsn, up
}
