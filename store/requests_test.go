package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/metering"
)

// requestIDs lists a page's request ids in order.
func requestIDs(p metering.RequestPage) []string {
	out := []string{}
	for _, r := range p.Requests {
		out = append(out, r.RequestID)
	}
	return out
}

// The log lists every outcome newest first, names the key (never more of it), shows a
// request's attempts with its flags, and filters by each field.
func TestRequestLogListsNewestFirstWithFiltersAndAttempts(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		_, k := newKey(t, "billing-bot", time.Time{})
		require.NoError(t, s.CreateKey(ctx, k))
		t0 := utc(2026, 5, 1, 12, 0, 0, 0)
		recs := []metering.Record{
			{RequestID: "r1", KeyID: k.ID, Model: "gpt-5", Candidate: "a", Protocol: "family_a", Operation: "chat_completions",
				Status: 200, Usage: metering.Usage{Input: 10, Output: 5}, CostMicros: 70, LatencyMs: 900, TTFBMs: 120, Attempts: 2, Time: t0,
				Tries: []metering.Try{{Candidate: "b", Status: 503, Reason: "upstream_5xx", DurationMs: 40}, {Candidate: "a", Status: 200, DurationMs: 860}}},
			{RequestID: "r2", KeyID: "static:ops", ProjectID: "p1", Model: "claude", Protocol: "family_c", Operation: "messages",
				Status: 429, Time: t0.Add(time.Second), Outcome: metering.OutcomeRefused, RefusedBy: "project_budget"},
			{RequestID: "r3", KeyID: k.ID, Model: "gpt-5", Candidate: "a", Protocol: "family_a", Operation: "chat_completions",
				Status: 200, Attempts: 2, Time: t0.Add(2 * time.Second),
				Tries: []metering.Try{{Candidate: "a", Status: 429, Reason: "rate_limited", DurationMs: 5}, {Candidate: "a", Retry: 1, WaitMs: 250, Status: 200, DurationMs: 30}}},
			{RequestID: "r4", KeyID: k.ID, Model: "claude", Protocol: "family_c", Operation: "messages",
				Status: 502, Attempts: 1, Time: t0.Add(3 * time.Second), Outcome: metering.OutcomeFailed,
				Tries: []metering.Try{{Candidate: "c", Status: 500, Reason: "upstream_5xx", DurationMs: 9}}},
		}
		require.NoError(t, s.WriteUsage(ctx, "j", 1, recs))

		all, err := s.ListRequests(ctx, metering.RequestQuery{})
		require.NoError(t, err)
		assert.Equal(t, []string{"r4", "r3", "r2", "r1"}, requestIDs(all), "newest first")
		assert.Empty(t, all.Next, "one page holds them all")
		byID := map[string]metering.RequestRow{}
		for _, r := range all.Requests {
			byID[r.RequestID] = r
		}
		r1 := byID["r1"]
		assert.Equal(t, "billing-bot", r1.KeyName)
		assert.Equal(t, t0, r1.Time)
		assert.Equal(t, metering.OutcomeServed, r1.Outcome)
		assert.True(t, r1.FailedOver, "b failed, a served")
		assert.False(t, r1.Retried)
		assert.Equal(t, recs[0].Tries, r1.Tries)
		assert.Equal(t, []int64{10, 5, 70, 900, 120}, []int64{r1.Input, r1.Output, r1.CostMicros, r1.DurationMs, r1.TTFBMs})
		assert.True(t, byID["r3"].Retried)
		assert.False(t, byID["r3"].FailedOver, "a retry on the same candidate is not a failover")
		assert.Equal(t, "ops", byID["r2"].KeyName, "a key of the configuration is named by its id")
		assert.Equal(t, metering.OutcomeRefused, byID["r2"].Outcome)
		assert.Equal(t, "project_budget", byID["r2"].RefusedBy)
		assert.Equal(t, metering.OutcomeFailed, byID["r4"].Outcome)

		for _, tc := range []struct {
			q    metering.RequestQuery
			want []string
		}{
			{metering.RequestQuery{KeyID: k.ID}, []string{"r4", "r3", "r1"}},
			{metering.RequestQuery{ProjectID: "p1"}, []string{"r2"}},
			{metering.RequestQuery{Model: "gpt-5"}, []string{"r3", "r1"}},
			{metering.RequestQuery{Candidate: "a"}, []string{"r3", "r1"}},
			{metering.RequestQuery{Status: 429}, []string{"r2"}},
			{metering.RequestQuery{Since: t0.Add(time.Second), Until: t0.Add(3 * time.Second)}, []string{"r3", "r2"}},
			{metering.RequestQuery{Model: "claude", KeyID: k.ID}, []string{"r4"}},
		} {
			page, err := s.ListRequests(ctx, tc.q)
			require.NoError(t, err)
			assert.Equal(t, tc.want, requestIDs(page), "%+v", tc.q)
		}
	})
}

// Paging walks every row once, newest first, also through rows of the same
// microsecond, and rows written while someone pages do not shift the pages.
func TestRequestLogPagesAreStableUnderInserts(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		t0 := utc(2026, 5, 1, 0, 0, 0, 0)
		var recs []metering.Record
		for i := range 25 {
			// Pairs of rows share a time: the request id breaks the tie.
			recs = append(recs, metering.Record{RequestID: fmt.Sprintf("req_%02d", i), Model: "m", Candidate: "c",
				Protocol: "family_a", Operation: "chat_completions", Status: 200, Time: t0.Add(time.Duration(i/2) * time.Millisecond)})
		}
		require.NoError(t, s.WriteUsage(ctx, "j", 1, recs))
		var seen []string
		q := metering.RequestQuery{Limit: 4}
		for pages := 0; ; pages++ {
			require.Less(t, pages, 10, "paging ends")
			page, err := s.ListRequests(ctx, q)
			require.NoError(t, err)
			seen = append(seen, requestIDs(page)...)
			if pages == 1 {
				// Newer rows arrive between pages: they belong before the first page.
				require.NoError(t, s.WriteUsage(ctx, "j", 2, []metering.Record{{RequestID: "late", Model: "m", Candidate: "c",
					Protocol: "family_a", Operation: "chat_completions", Status: 200, Time: t0.Add(time.Hour)}}))
			}
			if page.Next == "" {
				break
			}
			q.After = page.Next
		}
		var want []string
		for i := 24; i >= 0; i-- {
			want = append(want, fmt.Sprintf("req_%02d", i))
		}
		assert.Equal(t, want, seen, "every row once, newest first")

		_, err := s.ListRequests(ctx, metering.RequestQuery{After: "not a cursor!"})
		assert.ErrorIs(t, err, metering.ErrBadCursor)
	})
}

// A refused or failed request is in the log but not in usage: existing usage totals
// count served answers only.
func TestRefusedAndFailedRequestsAreNotUsage(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		t0 := utc(2026, 5, 1, 0, 0, 0, 0)
		require.NoError(t, s.WriteUsage(ctx, "j", 1, []metering.Record{
			{RequestID: "served", KeyID: "k", Model: "m", Candidate: "c", Protocol: "family_a", Operation: "chat_completions",
				Status: 200, Usage: metering.Usage{Input: 3, Output: 4}, CostMicros: 9, Time: t0},
			{RequestID: "refused", KeyID: "k", Model: "m", Protocol: "family_a", Operation: "chat_completions",
				Status: 429, Time: t0, Outcome: metering.OutcomeRefused, RefusedBy: "key_requests"},
			{RequestID: "failed", KeyID: "k", Model: "m", Protocol: "family_a", Operation: "chat_completions",
				Status: 502, Time: t0, Outcome: metering.OutcomeFailed},
		}))
		for _, g := range [][]string{nil, {"key"}, {"day", "model"}} {
			rows, err := s.QueryUsage(ctx, metering.Query{KeyID: "k", GroupBy: g})
			require.NoError(t, err)
			require.Len(t, rows, 1)
			assert.Equal(t, int64(1), rows[0].Requests, "only the served answer is a request in usage (%v)", g)
			assert.Equal(t, int64(9), rows[0].CostMicros)
		}
		page, err := s.ListRequests(ctx, metering.RequestQuery{KeyID: "k"})
		require.NoError(t, err)
		assert.Len(t, page.Requests, 3, "the log has all three")
		latency, err := s.QueryLatency(ctx, t0.Add(-time.Hour), t0.Add(time.Hour))
		require.NoError(t, err)
		require.Len(t, latency, 1, "the Models view's latency: one candidate's served answer")
		assert.Equal(t, "c", latency[0].Candidate)
		assert.Equal(t, int64(1), latency[0].Requests)
		assert.Zero(t, latency[0].Errors)
	})
}
