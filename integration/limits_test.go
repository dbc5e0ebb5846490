package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/internal/pgtest"
	"github.com/switchyard-gw/switchyard/internal/redistest"
)

// Limit tests: a key's limits are enforced before any upstream call, in the family's
// native 429, with the gateway's own allowance on successful answers; and they hold across
// two gateway processes sharing Redis and PostgreSQL.

const budgetKey = "sk-budget-key-0123456789abcd"

// pricedChat is a model whose output costs 1000 micro-units a token and whose input is
// free, so a request with max_tokens 100 reserves exactly 100,000 (0.1) and is metered at
// 10,000 (the simulator's 10 output tokens).
func pricedChat(url, upstreamModel string) string {
	return "\t\tmodel priced-chat {\n\t\t\tprotocols family_a family_b\n\t\t\tprice input 0 output 1000\n" +
		candidate("a", "family_a", url+"/v1", upstreamModel) + candidate("b", "family_b", url, upstreamModel) + "\t\t}\n"
}

const pricedStreamBody = `{"model":"priced-chat","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"Hello"}]}`

// TestBudgetHoldsAcrossTwoGatewaysUnderConcurrentStreams is the proof: 50
// concurrent streamed requests from one key, spread over two gateway processes that share
// Redis and PostgreSQL, against a budget that fits 10 reservations. Exactly 10 are
// admitted, the 40 others get the budget 429 before any upstream call, and the metered
// spend in the ledger stays within the budget.
func TestBudgetHoldsAcrossTwoGatewaysUnderConcurrentStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway and runs two of them with Redis and PostgreSQL")
	}
	for _, mode := range []string{"lease", "exact"} {
		t.Run(mode, func(t *testing.T) {
			budgetHoldsAcrossTwoGateways(t, "redis "+redistest.Start(t).URL()+"\n\t\t\tmode "+mode, "")
		})
	}
}

// The same through a three-master Redis Cluster as managed services offer one (TLS only,
// its certificate from a private CA named by redis_tls_ca, an ACL user with a password),
// named by redis_cluster with two of its nodes (the gateways learn the others), with the
// key's per-model rate as a second scope on every request: in a Cluster each scope is
// reserved by a script of its own, and the refused requests give back what their other
// scope took.
func TestBudgetHoldsAcrossTwoGatewaysSharingARedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway and runs two of them with a Redis Cluster and PostgreSQL")
	}
	for _, mode := range []string{"lease", "exact"} {
		t.Run(mode, func(t *testing.T) { budgetAcrossARedisCluster(t, mode) })
	}
}

// The same through a primary watched by Sentinel, named by redis_sentinel with its
// master name and the three Sentinels' URLs (carrying the primary's password), in the
// default mode: the gateways find the primary through the Sentinels.
func TestBudgetHoldsAcrossTwoGatewaysSharingARedisSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway and runs two of them with Redis Sentinel and PostgreSQL")
	}
	s := redistest.StartSentinel(t)
	budgetHoldsAcrossTwoGateways(t, "redis_sentinel "+redistest.MasterName+" "+strings.Join(s.URLs(), " "), "")
}

func budgetAcrossARedisCluster(t *testing.T, mode string) {
	rc := redistest.StartSecureCluster(t)
	budgetHoldsAcrossTwoGateways(t, "redis_cluster "+strings.Join(rc.URLs()[:2], " ")+"\n\t\t\tredis_tls_ca "+rc.CAFile+"\n\t\t\tmode "+mode,
		"\t\t\tmodel priced-chat {\n\t\t\t\trpm 60\n\t\t\t}\n")
	if mode == "lease" {
		return // leases keep what refused requests took, to spend or give back later
	}
	// The key/model scope counted the admitted requests only (a refused one's take was
	// given back): 60 less the 10 admitted, as last written in the burst (rl is the
	// level when written: a refill of one a second during it); 10 if the 40 refused
	// had kept theirs.
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), Username: rc.User, Password: rc.Password,
		TLSConfig: &tls.Config{RootCAs: rc.RootCAs, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}})
	defer cc.Close()
	level, err := cc.HGet(context.Background(), "switchyard:{key:static:budgeted/model:priced-chat}:rate", "rl").Float64()
	require.NoError(t, err)
	assert.InDelta(t, 50, level, 5, "the per-model rate counts only the admitted requests")
}

// budgetHoldsAcrossTwoGateways runs the burst against two gateways whose limits block
// holds counters (the redis line), the key's limits holding perModel besides its budget.
func budgetHoldsAcrossTwoGateways(t *testing.T, counters, perModel string) {
	dsn := pgtest.SchemaDSN(t)
	caddy := buildCaddyCLI(t)
	up := newUpstream(t)
	// drip keeps every admitted stream open for about a second, so all 50 requests are
	// in flight together and no settlement frees room during the burst.
	option := func(dir string) func(int) string {
		return func(int) string {
			return fmt.Sprintf(`		store postgres %q
		journal %s
		limits {
			%s
		}
		key budgeted %s {
			budget 1/day
%s		}
`, dsn, filepath.Join(dir, "journal"), counters, budgetKey, perModel) + pricedChat("http://"+up.hostport(), upstreamPrefix+"-x+drip-100ms")
		}
	}
	dirA, dirB := t.TempDir(), t.TempDir()
	gws := []*processGateway{
		startGatewayProcess(t, caddy, "a", dirA, option(dirA)),
		startGatewayProcess(t, caddy, "b", dirB, option(dirB)),
	}

	const n = 50
	results := make([]*result, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			r, err := gws[i%2].send("POST", "/v1/chat/completions", pricedStreamBody, "Authorization", "Bearer "+budgetKey)
			if err == nil {
				results[i] = r
			}
		})
	}
	close(start)
	wg.Wait()

	var admitted, refused []int
	for i, r := range results {
		require.NotNil(t, r, "request %d got no answer", i)
		switch r.Status {
		case 200:
			admitted = append(admitted, i)
		case 429:
			// The burst arrives while the admitted streams still hold their
			// reservations and nothing is spent yet: the budget is held, not used up,
			// and the client is told it may retry shortly.
			refused = append(refused, i)
			e := familyA(t, r, 429, "rate_limit_error")
			assert.Equal(t, "rate_limit_exceeded", e.Get("code").String())
			assert.Contains(t, e.Get("message").String(), "1/day has 1 held by requests in flight")
			assert.Equal(t, "true", r.Header.Get("X-Should-Retry"))
			assert.Equal(t, "1", r.Header.Get("Retry-After"))
		default:
			t.Errorf("request %d: status %d: %s", i, r.Status, r.Body)
		}
	}
	t.Logf("%d admitted, %d refused by the budget, across two gateways", len(admitted), len(refused))
	assert.Len(t, admitted, 10, "a budget of 1 fits exactly 10 reservations of 0.1")
	assert.Equal(t, len(admitted), up.count(), "refused requests never reached the upstream")
	gotA := 0
	for _, i := range admitted {
		if i%2 == 0 {
			gotA++
		}
	}
	// Counting alone, each gateway would have admitted 10: 20 in all.
	t.Logf("gateway a admitted %d, gateway b %d", gotA, len(admitted)-gotA)

	// The ledger: every answer once, and the spend within the budget.
	conn, err := pgx.Connect(context.Background(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var rows, spent int64
	require.Eventually(t, func() bool {
		err := conn.QueryRow(context.Background(),
			`SELECT count(*), coalesce(sum(cost_micros), 0) FROM usage_records WHERE key_id = 'static:budgeted' AND outcome = 'served'`).Scan(&rows, &spent)
		return err == nil && rows == int64(len(admitted))
	}, waitLong, pollEvery, "the ledger has a record per admitted request")
	t.Logf("metered spend %d micro-units against a budget of 1,000,000", spent)
	assert.LessOrEqual(t, spent, int64(1_000_000))
	assert.Equal(t, int64(len(admitted))*10_000, spent, "each answer metered at its 10 output tokens")
}

// TestTokensPerMinuteHoldAcrossTwoGateways: the same burst against a tokens-per-minute
// limit that fits 10 requests' worst case.
func TestTokensPerMinuteHoldAcrossTwoGateways(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway and runs two of them with Redis")
	}
	for _, mode := range []string{"lease", "exact"} {
		t.Run(mode, func(t *testing.T) { tokensAcrossTwoGateways(t, mode) })
	}
}

func tokensAcrossTwoGateways(t *testing.T, mode string) {
	rd := redistest.Start(t)
	caddy := buildCaddyCLI(t)
	up := newUpstream(t)
	// Each request reserves its estimated input (the body's 101 bytes of JSON, none of
	// them space, at four a token: 26) and its max_tokens (100): 126 tokens. A limit of
	// 1,260 a minute fits 10, and refills 21 tokens a second: less than one more request
	// during the burst.
	option := func(dir string) func(int) string {
		return func(int) string {
			return fmt.Sprintf(`		store off
		limits {
			redis %s
			mode %s
		}
		key tpm-limited %s {
			tpm 1260
		}
`, rd.URL(), mode, budgetKey) + pricedChat("http://"+up.hostport(), upstreamPrefix+"-x+drip-100ms")
		}
	}
	dirA, dirB := t.TempDir(), t.TempDir()
	gws := []*processGateway{
		startGatewayProcess(t, caddy, "a", dirA, option(dirA)),
		startGatewayProcess(t, caddy, "b", dirB, option(dirB)),
	}
	const n = 50
	results := make([]*result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := gws[i%2].send("POST", "/v1/chat/completions", pricedStreamBody, "Authorization", "Bearer "+budgetKey)
			if err == nil {
				results[i] = r
			}
		})
	}
	wg.Wait()
	admitted := 0
	for i, r := range results {
		require.NotNil(t, r, "request %d got no answer", i)
		switch r.Status {
		case 200:
			admitted++
		case 429:
			e := familyA(t, r, 429, "rate_limit_error")
			assert.Equal(t, "rate_limit_exceeded", e.Get("code").String())
			wait, err := strconv.Atoi(r.Header.Get("Retry-After"))
			require.NoError(t, err, "Retry-After: %q", r.Header.Get("Retry-After"))
			assert.True(t, wait >= 1 && wait <= 7, "Retry-After %d s: the real wait for 126 tokens at 21 a second", wait)
		default:
			t.Errorf("request %d: status %d: %s", i, r.Status, r.Body)
		}
	}
	t.Logf("%d of %d admitted under tpm 1260 across two gateways", admitted, n)
	assert.GreaterOrEqual(t, admitted, 10)
	assert.LessOrEqual(t, admitted, 11, "two gateways enforce one limit, not two")
	assert.Equal(t, admitted, up.count())
}

// TestLimitsInEachFamilysHeadersAndErrors runs one in-memory gateway: allowance headers
// on answers, rate and concurrency refusals with their real wait, the budget refusal in
// Family B's envelope, per-model variants, and that a refusal changes nothing upstream.
func TestLimitsInEachFamilysHeadersAndErrors(t *testing.T) {
	up := newUpstream(t)
	const rpmKey, concKey, modelKey = "sk-rpm-key-0123456789abcdef", "sk-conc-key-0123456789abcde", "sk-model-key-0123456789abcd"
	g := startGatewayWith(t, up, pricedChat("http://"+up.hostport(), upstreamPrefix+"-c")+
		"\t\tmodel slow-chat {\n"+candidate("a", "family_a", "http://"+up.hostport()+"/v1", upstreamPrefix+"-x+drip-300ms")+"\t\t}\n",
		fmt.Sprintf(`		key rpm-limited %s {
			rpm 3
			tpm 100000
		}
		key conc-limited %s {
			concurrency 1
		}
		key model-limited %s {
			model priced-chat {
				budget 0.15/total
			}
		}
`, rpmKey, concKey, modelKey))
	chatBody := `{"model":"priced-chat","max_tokens":100,"messages":[{"role":"user","content":"Hello"}]}`
	msgBody := `{"model":"priced-chat","max_tokens":100,"messages":[{"role":"user","content":"Hello"}]}`

	// Family A headers, then B's, counting down one shared allowance.
	r := g.call(t, "POST", "/v1/chat/completions", chatBody, "Authorization", "Bearer "+rpmKey)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	assert.Equal(t, "3", r.Header.Get("x-ratelimit-limit-requests"))
	assert.Equal(t, "2", r.Header.Get("x-ratelimit-remaining-requests"))
	assert.NotEmpty(t, r.Header.Get("x-ratelimit-reset-requests"))
	assert.Equal(t, "100000", r.Header.Get("x-ratelimit-limit-tokens"))
	r = g.call(t, "POST", "/v1/messages", msgBody, "x-api-key", rpmKey, "anthropic-version", "2023-06-01")
	require.Equal(t, 200, r.Status, "%s", r.Body)
	assert.Equal(t, "3", r.Header.Get("anthropic-ratelimit-requests-limit"))
	assert.Equal(t, "1", r.Header.Get("anthropic-ratelimit-requests-remaining"))
	_, err := time.Parse(time.RFC3339, r.Header.Get("anthropic-ratelimit-requests-reset"))
	assert.NoError(t, err)
	assert.Empty(t, r.Header.Get("x-ratelimit-limit-requests"), "each family gets its own header names")
	require.Equal(t, 200, g.call(t, "POST", "/v1/chat/completions", chatBody, "Authorization", "Bearer "+rpmKey).Status)
	before := up.count()
	r = g.call(t, "POST", "/v1/messages", msgBody, "x-api-key", rpmKey, "anthropic-version", "2023-06-01")
	e := familyB(t, r, 429, "rate_limit_error")
	assert.Contains(t, e.Get("message").String(), "3 requests per minute")
	wait, err := strconv.Atoi(r.Header.Get("Retry-After"))
	require.NoError(t, err)
	assert.True(t, wait >= 1 && wait <= 20, "one request refills in 20 s: Retry-After %d", wait)
	assert.Equal(t, before, up.count(), "a refused request never reaches the upstream")
	// The static key without limits is not touched by another key's limit.
	require.Equal(t, 200, g.call(t, "POST", "/v1/chat/completions", chatBody, "Authorization", "Bearer "+testKey).Status)

	// Concurrency 1: a second request while a slow one is in flight is refused; after it
	// ends, the slot is free again.
	slow := make(chan *result, 1)
	before = up.count()
	go func() {
		r, _ := g.send("POST", "/v1/chat/completions", `{"model":"slow-chat","stream":true,"messages":[{"role":"user","content":"Hi"}]}`, "Authorization", "Bearer "+concKey)
		slow <- r
	}()
	require.Eventually(t, func() bool { return up.count() > before }, waitLong, pollEvery, "the slow stream reached the upstream")
	refusedWhileBusy := g.call(t, "POST", "/v1/chat/completions", chatBody, "Authorization", "Bearer "+concKey)
	e = familyA(t, refusedWhileBusy, 429, "rate_limit_error")
	assert.Contains(t, e.Get("message").String(), "1 concurrent requests")
	r = <-slow
	require.NotNil(t, r)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	assert.Greater(t, r.Elapsed, time.Second, "the slow stream was in flight while the other was refused")
	assert.Equal(t, 200, g.call(t, "POST", "/v1/chat/completions", chatBody, "Authorization", "Bearer "+concKey).Status, "the slot is released when the answer ends")

	// A per-model total budget of 0.15: each request reserves 0.1 and is metered at 0.01,
	// so requests fit while the spend is at most 0.05: six are answered, the seventh is
	// refused in Family B's envelope, without Retry-After (a total never resets). Another
	// model is not limited by it.
	for i := range 6 {
		r := g.call(t, "POST", "/v1/messages", msgBody, "x-api-key", modelKey, "anthropic-version", "2023-06-01")
		require.Equal(t, 200, r.Status, "request %d: %s", i+1, r.Body)
	}
	r = g.call(t, "POST", "/v1/messages", msgBody, "x-api-key", modelKey, "anthropic-version", "2023-06-01")
	e = familyB(t, r, 429, "rate_limit_error")
	assert.Equal(t, "budget_exceeded", e.Get("code").String())
	assert.Contains(t, e.Get("message").String(), "priced-chat")
	assert.Equal(t, "false", r.Header.Get("X-Should-Retry"))
	assert.Empty(t, r.Header.Get("Retry-After"))
	assert.Equal(t, 200, g.call(t, "POST", "/v1/chat/completions", strings.Replace(chatBody, "priced-chat", "slow-chat", 1), "Authorization", "Bearer "+modelKey).Status)
}

// TestProjectLimitsHoldForEveryKeyInTheProject: a project's budget, set through the admin
// API, is shared by its keys; the refusal says it is the project's, and the spend and the
// audit trail show in the admin API. Limit refusals are counted in the metrics.
func TestProjectLimitsHoldForEveryKeyInTheProject(t *testing.T) {
	up := newUpstream(t)
	g := startGatewayWith(t, up, pricedChat("http://"+up.hostport(), upstreamPrefix+"-c"), "")
	status, answer := g.adminCall(t, "POST", "/switchyard/projects", `{"id":"platform","limits":{"budget":"0.25/month"}}`)
	require.Equal(t, 201, status, "%s", answer.Raw)
	_, first := g.createKey(t, `{"name":"first","project_id":"platform"}`)
	secondID, second := g.createKey(t, `{"name":"second","project_id":"platform"}`)
	_, outside := g.createKey(t, `{"name":"outside"}`)
	chat := func(secret string) *result {
		return g.call(t, "POST", "/v1/chat/completions", `{"model":"priced-chat","max_tokens":100,"messages":[{"role":"user","content":"Hello"}]}`, "Authorization", "Bearer "+secret)
	}
	// Each request reserves 0.1 and is metered at 0.01: the project's 0.25 takes requests
	// while its spend is at most 0.15, whichever of its keys sends them.
	for i := range 16 {
		secret := first
		if i%2 == 1 {
			secret = second
		}
		r := chat(secret)
		require.Equal(t, 200, r.Status, "request %d: %s", i+1, r.Body)
	}
	r := chat(second)
	e := familyA(t, r, 429, "insufficient_quota")
	assert.Equal(t, "budget_exceeded", e.Get("code").String())
	assert.Contains(t, e.Get("message").String(), "project")
	assert.Contains(t, e.Get("message").String(), "0.25/month")
	assert.NotEmpty(t, r.Header.Get("X-Should-Retry"))
	assert.Equal(t, 200, chat(outside).Status, "a key outside the project is not held by its budget")

	// The key leaves the project: the project's budget no longer holds it.
	status, answer = g.adminCall(t, "PUT", "/switchyard/keys/"+secondID+"/project", `{"project_id":""}`)
	require.Equal(t, 200, status, "%s", answer.Raw)
	assert.Equal(t, 200, chat(second).Status)

	status, answer = g.adminCall(t, "GET", "/switchyard/projects/platform", "")
	require.Equal(t, 200, status, "%s", answer.Raw)
	t.Logf("project standing: %s", answer.Get("project.standing").Raw)
	assert.Equal(t, "0.25/month", answer.Get("project.standing.budget").String())
	assert.Equal(t, int64(160_000), answer.Get("project.standing.spent_micros").Int(), "16 answers at 0.01, from the ledger of this process")
	status, answer = g.adminCall(t, "GET", "/switchyard/audit", "")
	require.Equal(t, 200, status)
	assert.Equal(t, "key.project", answer.Get("entries.0.action").String())
	assert.Equal(t, "admin API", answer.Get("entries.0.actor").String())

	series, _ := g.scrapeMetrics(t)
	assert.Equal(t, 1.0, series[`switchyard_limit_rejections_total{limit="project_budget",model="priced-chat"}`])
}

// TestGatewayStartsWhileRedisIsDownAndSharesCountsWhenItReturns: with Redis unreachable,
// a budgeted key is refused with a 503 in its family's envelope (never overspent), a key
// with only a rate limit is served (counted locally), and once Redis answers the budget is
// enforced through it again.
func TestGatewayStartsWhileRedisIsDownAndSharesCountsWhenItReturns(t *testing.T) {
	rd := redistest.Start(t)
	rd.Stop(t)
	up := newUpstream(t)
	const rateKey = "sk-rate-key-0123456789abcdef"
	g := startGatewayWith(t, up, pricedChat("http://"+up.hostport(), upstreamPrefix+"-c"), fmt.Sprintf(`		limits {
			redis %s
		}
		key budgeted %s {
			budget 10/month
		}
		key rated %s {
			rpm 1000
		}
`, rd.URL(), budgetKey, rateKey))
	body := `{"model":"priced-chat","max_tokens":100,"messages":[{"role":"user","content":"Hello"}]}`
	before := up.count()
	r := g.call(t, "POST", "/v1/messages", body, "x-api-key", budgetKey, "anthropic-version", "2023-06-01")
	e := familyB(t, r, 503, "overloaded_error")
	assert.Equal(t, "limits_unavailable", e.Get("code").String())
	assert.Equal(t, "1", r.Header.Get("Retry-After"))
	assert.NotContains(t, string(r.Body), rd.Addr(), "the Redis address stays out of answers")
	assert.Equal(t, before, up.count(), "nothing was sent upstream")
	r = g.call(t, "POST", "/v1/chat/completions", body, "Authorization", "Bearer "+rateKey)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	assert.Equal(t, "1000", r.Header.Get("x-ratelimit-limit-requests"), "rate limits count in this gateway meanwhile")

	rd.Start(t)
	require.Eventually(t, func() bool {
		r, err := g.send("POST", "/v1/chat/completions", body, "Authorization", "Bearer "+budgetKey)
		return err == nil && r.Status == 200
	}, waitLong, 100*time.Millisecond, "the budgeted key is served once Redis answers")
}

// TestAHugeOutputCapIsNoWayAroundALimit: a client that claims an output cap near the
// int64 limit, on a model that declares none, must not wrap its reservation into a small
// or negative one: the budget and the token limit refuse it, and the upstream sees nothing.
func TestAHugeOutputCapIsNoWayAroundALimit(t *testing.T) {
	up := newUpstream(t)
	const tpmKey = "sk-tpm-key-0123456789abcdef"
	g := startGatewayWith(t, up, pricedChat("http://"+up.hostport(), upstreamPrefix+"-c"), fmt.Sprintf(`		key budgeted %s {
			budget 10/month
		}
		key tpm-limited %s {
			tpm 100000
		}
`, budgetKey, tpmKey))
	for _, cap := range []string{"100000000000000000", "9223372036854775807"} {
		body := `{"model":"priced-chat","max_tokens":` + cap + `,"messages":[{"role":"user","content":"Hello"}]}`
		r := g.call(t, "POST", "/v1/chat/completions", body, "Authorization", "Bearer "+budgetKey)
		e := familyA(t, r, 429, "insufficient_quota")
		assert.Equal(t, "budget_exceeded", e.Get("code").String(), "max_tokens %s", cap)
		r = g.call(t, "POST", "/v1/chat/completions", body, "Authorization", "Bearer "+tpmKey)
		familyA(t, r, 429, "rate_limit_error")
		assert.Equal(t, "false", r.Header.Get("X-Should-Retry"), "max_tokens %s: waiting cannot help", cap)
	}
	assert.Zero(t, up.count(), "no request reached the upstream")
}
