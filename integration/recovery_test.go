package integration

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// recoveryBound is how soon after its upstream recovers a candidate takes traffic again
// with the default probe schedule: the longest wait between two probes (5s), plus the
// prober's tick, the probe itself and a busy machine.
const recoveryBound = 5*time.Second + 2*time.Second

// probeCount reads switchyard_probes_total for one candidate and result (the counters
// are process-wide: compare before and after).
func probeCount(t *testing.T, g *gateway, model, cand, result string) float64 {
	t.Helper()
	m, _ := g.scrapeMetrics(t)
	return m[`switchyard_probes_total{candidate="`+cand+`",model="`+model+`",result="`+result+`"}`]
}

// The recovery test: a primary down for a minute under light traffic (a request
// every 4 s). The fallback serves every request; once the circuit is open no client
// request reaches the primary, only background probes, and at a gentle pace; the
// primary serves again within recoveryBound of its return; no probe is billed.
// SWITCHYARD_RECOVERY_OUTAGE shortens the outage for a local run (CI uses 60s).
func TestRecoveryWithoutTraffic(t *testing.T) {
	outage := time.Minute
	if s := os.Getenv("SWITCHYARD_RECOVERY_OUTAGE"); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err, "SWITCHYARD_RECOVERY_OUTAGE")
		outage = d
	}
	if testing.Short() {
		t.Skip("a minute-long outage")
	}
	const pace = 4 * time.Second

	bad, good := newSwitchable(t), newUpstream(t)
	dbPath := filepath.Join(t.TempDir(), "usage.db")
	// The default health settings: three failures in 30s open the circuit, probes at 1s,
	// doubling to 5s.
	g := startGatewayWith(t, good, pair(bad, good), "\t\tstore sqlite "+dbPath+"\n")
	failsBefore := probeCount(t, g, "pair", "flaky", "fail")
	passesBefore := probeCount(t, g, "pair", "flaky", "pass")

	body := `{"model":"pair","messages":[{"role":"user","content":"hello"}]}`
	requests := 0
	send := func() {
		t.Helper()
		r := g.call(t, "POST", "/v1/chat/completions", body)
		requests++
		require.Equal(t, 200, r.Status, "request %d: the fallback hides the outage: %s", requests, r.Body)
		assert.Equal(t, "pair", gjson.GetBytes(r.Body, "model").Str)
	}

	bad.failing.Store(true)
	down := time.Now()
	ticker := time.NewTicker(pace)
	defer ticker.Stop()

	// Until the circuit opens, requests that try the primary fail over.
	var opened time.Time
	var hitsAtOpen int64
	for opened.IsZero() {
		send()
		if row := g.healthRow(t, "pair", "flaky"); row.Get("state").Str == "open" {
			opened, hitsAtOpen = time.Now(), bad.hits.Load()
			assert.True(t, row.Get("probing").Bool(), "an open circuit is probed in the background")
			assert.LessOrEqual(t, row.Get("next_probe_s").Float(), 1.0)
			break
		}
		require.Less(t, time.Since(down), outage, "the circuit never opened")
		<-ticker.C
	}
	t.Logf("circuit opened %v into the outage, after %d requests", opened.Sub(down).Round(time.Millisecond), requests)

	// The rest of the outage: every request is served by the fallback; the primary sees
	// probes only.
	for time.Since(down)+pace < outage {
		<-ticker.C
		send()
		row := g.healthRow(t, "pair", "flaky")
		require.Equal(t, "open", row.Get("state").Str)
		require.True(t, row.Get("probing").Bool())
		require.LessOrEqual(t, row.Get("next_probe_s").Float(), 5.0, "the wait between probes is capped")
	}
	probesDuringOutage := bad.probes.Load()
	assert.Equal(t, hitsAtOpen, bad.hits.Load(), "a client request reached the primary while its circuit was open")
	// 1s, 2s, 4s, then every 5s: a handful, never a tight loop.
	outageOpen := time.Since(opened)
	maxProbes := int64(outageOpen/(5*time.Second)) + 4
	t.Logf("during %v of open circuit: %d requests, %d probes (at most %d allowed)", outageOpen.Round(time.Second), requests, probesDuringOutage, maxProbes)
	assert.Positive(t, probesDuringOutage)
	assert.LessOrEqual(t, probesDuringOutage, maxProbes)

	// The primary comes back: a probe notices, and the primary serves again.
	for time.Since(down) < outage {
		<-ticker.C
		send()
	}
	bad.failing.Store(false)
	back := time.Now()
	require.Eventually(t, func() bool {
		return g.healthRow(t, "pair", "flaky").Get("state").Str == "closed"
	}, recoveryBound+5*time.Second, pollEvery, "the recovered primary's circuit never closed")
	noticed := time.Since(back)
	hits := bad.hits.Load()
	send()
	assert.Equal(t, hits+1, bad.hits.Load(), "the primary serves again")
	t.Logf("recovered primary back in service %v after its return (bound %v)", noticed.Round(time.Millisecond), recoveryBound)
	assert.Less(t, noticed, recoveryBound)
	assert.Equal(t, hitsAtOpen, hits, "no client request reached the primary between the circuit opening and closing")

	assert.Positive(t, probeCount(t, g, "pair", "flaky", "fail")-failsBefore)
	assert.Equal(t, 1.0, probeCount(t, g, "pair", "flaky", "pass")-passesBefore)

	// Probes are not client traffic: the ledger holds the clients' requests, and only them.
	db, err := sql.Open("sqlite", dbPath)
	require.NoError(t, err)
	defer db.Close()
	var rows int
	require.Eventually(t, func() bool {
		return db.QueryRow(`SELECT COUNT(*) FROM usage_records WHERE outcome = 'served'`).Scan(&rows) == nil && rows >= requests
	}, waitShort, pollEvery, "the ledger has %d of %d requests", rows, requests)
	assert.Equal(t, requests, rows, "a probe was billed")
	var served string
	require.NoError(t, db.QueryRow(`SELECT GROUP_CONCAT(DISTINCT operation) FROM usage_records WHERE outcome = 'served'`).Scan(&served))
	assert.False(t, strings.Contains(served, "models"), "operations billed: %s", served)
}
