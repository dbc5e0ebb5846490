package store

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/metering"
	"github.com/switchyard-gw/switchyard/protocols"
)

// utc is a time in UTC, for the fixed data sets.
func utc(year int, month time.Month, day, hour, minute, sec, nsec int) time.Time {
	return time.Date(year, month, day, hour, minute, sec, nsec, time.UTC)
}

// usageFixture is a small data set around the UTC day boundaries of 2026-03-14 and
// 2026-03-15. Some times are given in other zones, where their local day differs from
// their UTC day; some have nanoseconds, which the databases drop.
func usageFixture() []metering.Record {
	newYork := time.FixedZone("EDT", -4*3600)
	tokyo := time.FixedZone("JST", 9*3600)
	// key_a is in project "platform", key_b in "ci"; the others are in none.
	projectOf := map[string]string{"key_a": "platform", "key_b": "ci"}
	rec := func(id, key, model string, at time.Time, in, cached, write, out, reasoning, cost int64, est bool) metering.Record {
		return metering.Record{
			RequestID: id, KeyID: key, ProjectID: projectOf[key], Model: model, Candidate: model + "@upstream", Protocol: "openai", Operation: "chat",
			Status: 200, Usage: metering.Usage{Input: in, CachedInput: cached, CacheWrite: write, Output: out, Reasoning: reasoning, Estimated: est},
			CostMicros: cost, LatencyMs: 1200, TTFBMs: 300, Attempts: 1, Time: at,
		}
	}
	rs := []metering.Record{
		// The last microsecond of 2026-03-13 (UTC), once the nanoseconds are dropped.
		rec("sy_01", "key_a", "m1", utc(2026, 3, 13, 23, 59, 59, 999_999_500), 1, 0, 0, 2, 0, 3, false),
		// The first instant of 2026-03-14.
		rec("sy_02", "key_a", "m1", utc(2026, 3, 14, 0, 0, 0, 0), 100, 10, 5, 50, 20, 1_000, false),
		// Still 2026-03-14 in UTC; 2026-03-15 in Tokyo.
		rec("sy_03", "key_b", "m2", time.Date(2026, 3, 15, 8, 30, 0, 0, tokyo), 200, 20, 0, 80, 0, 2_000, true),
		// The last microsecond of 2026-03-14.
		rec("sy_04", "key_a", "m2", utc(2026, 3, 14, 23, 59, 59, 999_999_000), 400, 0, 40, 160, 60, 4_000, false),
		// 2026-03-15 00:00 UTC, though 2026-03-14 in New York.
		rec("sy_05", "key_b", "m1", time.Date(2026, 3, 14, 20, 0, 0, 0, newYork), 800, 80, 0, 320, 0, 8_000, false),
		// No key.
		rec("sy_06", "", "m1", utc(2026, 3, 15, 12, 0, 0, 0), 1_600, 0, 0, 640, 100, 16_000, true),
		// A static key, in the last nanosecond of 2026-03-15.
		rec("sy_07", "static:ops", "m2", utc(2026, 3, 15, 23, 59, 59, 999_999_999), 3_200, 320, 160, 1_280, 0, 32_000, false),
		// 2026-03-16.
		rec("sy_08", "key_b", "m2", utc(2026, 3, 16, 0, 0, 0, 0), 6_400, 0, 0, 2_560, 1_000, 64_000, true),
	}
	// Two answers of m2 came through cloud channels, one from a candidate of its own.
	rs[2].Channel, rs[2].Candidate = "vertex", "m2@vertex"
	rs[3].Channel = "bedrock"
	// Two answers used server-side tools.
	rs[1].ToolUses[protocols.ToolWebSearch] = 25
	rs[4].ToolUses[protocols.ToolFileSearch], rs[4].ToolUses[protocols.ToolImageGeneration] = 2, 1
	return rs
}

// expectedUsage answers q from records in Go: the reference QueryUsage must agree with.
func expectedUsage(records []metering.Record, q metering.Query) []metering.Row {
	groups := map[[5]string]*metering.Row{}
	var order [][5]string
	for _, r := range records {
		at := storedTime(r.Time)
		if !q.From.IsZero() && at.Before(q.From) || !q.To.IsZero() && !at.Before(q.To) ||
			q.KeyID != "" && r.KeyID != q.KeyID || q.Model != "" && r.Model != q.Model {
			continue
		}
		var g [5]string
		row := metering.Row{}
		for i, dim := range q.GroupBy {
			switch dim {
			case dimDay:
				g[i], row.Day = at.Format(time.DateOnly), at.Format(time.DateOnly)
			case dimKey:
				g[i], row.KeyID = r.KeyID, r.KeyID
			case dimModel:
				g[i], row.Model = r.Model, r.Model
			case dimCandidate:
				g[i], row.Candidate = r.Candidate, r.Candidate
			case dimChannel:
				ch := cmp.Or(r.Channel, "api")
				g[i], row.Channel = ch, ch
			}
		}
		sum, ok := groups[g]
		if !ok {
			sum = &row
			groups[g] = sum
			order = append(order, g)
		}
		sum.Requests++
		sum.Input += r.Input
		sum.CachedIn += r.CachedInput
		sum.CacheWrite += r.CacheWrite
		sum.Output += r.Output
		sum.Reasoning += r.Reasoning
		sum.CostMicros += r.CostMicros
		if r.Estimated {
			sum.Estimated++
		}
	}
	if len(q.GroupBy) == 0 && len(order) == 0 {
		return []metering.Row{{}}
	}
	slices.SortFunc(order, func(a, b [5]string) int {
		return cmp.Or(strings.Compare(a[0], b[0]), strings.Compare(a[1], b[1]), strings.Compare(a[2], b[2]),
			strings.Compare(a[3], b[3]), strings.Compare(a[4], b[4]))
	})
	out := make([]metering.Row, 0, len(order))
	for _, g := range order {
		out = append(out, *groups[g])
	}
	return out
}

// usageRows reads usage_records back, one line per record in request id order, with
// values normalised across the drivers: integers as int64, booleans as 0 or 1, times
// as Unix microseconds, NULL as nil.
func (f *fixture) usageRows(t testing.TB) [][]any {
	t.Helper()
	rows := f.rows(t, `SELECT `+usageColumns+` FROM usage_records ORDER BY request_id`)
	for _, r := range rows {
		for i, v := range r {
			switch v := v.(type) {
			case int32:
				r[i] = int64(v)
			case bool:
				r[i] = int64(0)
				if v {
					r[i] = int64(1)
				}
			case time.Time:
				r[i] = v.UnixMicro()
			}
		}
	}
	return rows
}

// numbered returns n distinct records of one key and model.
func numbered(prefix string, n int, at time.Time) []metering.Record {
	out := make([]metering.Record, n)
	for i := range out {
		out[i] = metering.Record{
			RequestID: fmt.Sprintf("%s_%06d", prefix, i), KeyID: "key_n", Model: "m", Candidate: "c",
			Protocol: "openai", Operation: "chat", Status: 200, Attempts: 1,
			Usage: metering.Usage{Input: int64(i), Output: 1}, CostMicros: 1, Time: at.Add(time.Duration(i) * time.Millisecond),
		}
	}
	return out
}

func (f *fixture) usageCount(t testing.TB) int64 {
	t.Helper()
	v := f.rows(t, `SELECT count(*) FROM usage_records`)[0][0]
	return v.(int64)
}

var usageSuite = []struct {
	name string
	run  func(t *testing.T, f *fixture)
}{
	{"WriteUsage stores every field", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		rs := usageFixture()
		require.NoError(t, s.WriteUsage(ctx, "gw-1", 4096, rs))
		got := f.usageRows(t)
		require.Len(t, got, len(rs))
		for i, r := range rs {
			var key any = r.KeyID
			if r.KeyID == "" {
				key = nil // a request without a key
			}
			var project any = r.ProjectID
			if r.ProjectID == "" {
				project = nil // a key in no project
			}
			est := int64(0)
			if r.Estimated {
				est = 1
			}
			want := []any{r.RequestID, key, r.Model, r.Candidate, r.Protocol, r.Operation, int64(r.Status),
				r.Input, r.CachedInput, r.CacheWrite, r.Output, r.Reasoning, est,
				r.CostMicros, r.LatencyMs, r.TTFBMs, int64(r.Attempts), storedTime(r.Time).UnixMicro(), project, cmp.Or(r.Channel, "api"),
				"served", nil, nil, nil} // a served answer with no attempts recorded
			if !r.ToolUses.IsZero() {
				want[len(want)-1] = string(r.ToolUses.AppendJSON(nil))
			}
			assert.Equal(t, want, got[i], "record %s", r.RequestID)
		}
		pos, err := s.JournalPosition(ctx, "gw-1")
		require.NoError(t, err)
		assert.Equal(t, int64(4096), pos)
	}},

	{"duplicate request ids are ignored, the first copy kept", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		rs := usageFixture()
		require.NoError(t, s.WriteUsage(ctx, "gw-1", 100, rs[:4]))
		before := f.usageRows(t)

		// A replay of the batch, changed copies of stored records, and one new record
		// given twice in the batch.
		replay := slices.Clone(rs[:4])
		changed := rs[1]
		changed.Output, changed.CostMicros = 999_999, 999_999
		twice := rs[4]
		second := twice
		second.Output = 12_345
		batch := append(replay, changed, twice, second)
		require.NoError(t, s.WriteUsage(ctx, "gw-1", 200, batch))
		// And the same records again through another journal.
		require.NoError(t, s.WriteUsage(ctx, "gw-2", 300, batch))

		after := f.usageRows(t)
		require.Len(t, after, 5)
		assert.Equal(t, before, after[:4], "stored records are not touched")
		assert.Equal(t, twice.Output, after[4][10], "the first copy in a batch is kept")
		total, err := s.QueryUsage(ctx, metering.Query{})
		require.NoError(t, err)
		assert.Equal(t, expectedUsage(rs[:5], metering.Query{}), total)
	}},

	{"the journal position is stored and never moves back", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		pos, err := s.JournalPosition(ctx, "gw-1")
		require.NoError(t, err)
		assert.Zero(t, pos, "a journal never written")

		at := utc(2026, 3, 14, 12, 0, 0, 0)
		require.NoError(t, s.WriteUsage(ctx, "gw-1", 1_000, numbered("a", 3, at)))
		require.NoError(t, s.WriteUsage(ctx, "gw-2", 7, nil), "a batch of damaged lines only still moves the position")
		// An older batch committing late: its records are stored, the position stays.
		require.NoError(t, s.WriteUsage(ctx, "gw-1", 400, numbered("b", 2, at)))
		check := func(journal string, want int64) {
			t.Helper()
			got, err := s.JournalPosition(ctx, journal)
			require.NoError(t, err)
			assert.Equal(t, want, got, journal)
		}
		check("gw-1", 1_000)
		check("gw-2", 7)
		assert.Equal(t, int64(5), f.usageCount(t))
		require.NoError(t, s.WriteUsage(ctx, "gw-1", 1_500, nil))
		check("gw-1", 1_500)
		// Another handle (another gateway) reads the same positions.
		other := f.open(t)
		got, err := other.JournalPosition(ctx, "gw-1")
		require.NoError(t, err)
		assert.Equal(t, int64(1_500), got)
	}},

	{"a batch that fails stores neither records nor position", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		at := utc(2026, 3, 14, 12, 0, 0, 0)
		require.NoError(t, s.WriteUsage(ctx, "gw-1", 10, numbered("ok", 2, at)))

		// The bad record comes last, after more than two of SQLite's INSERT chunks
		// have gone in within the transaction.
		noID := numbered("x", 2*sqliteUsageChunk+10, at)
		noID[len(noID)-1].RequestID = ""
		noTime := numbered("y", 20, at)
		noTime[10].Time = time.Time{}
		for name, bad := range map[string]struct {
			upTo    int64
			records []metering.Record
		}{
			"a record without a request id": {500, noID},
			"a record without a time":       {600, noTime},
			// The records are fine but the position is refused (CHECK position >= 0),
			// after every record of the batch was inserted.
			"a negative position": {-1, numbered("z", 5, at)},
		} {
			err := s.WriteUsage(ctx, "gw-1", bad.upTo, bad.records)
			require.Error(t, err, name)
			t.Log(name, ": ", err)
			assert.Equal(t, int64(2), f.usageCount(t), "%s: no record of the batch stored", name)
			pos, err := s.JournalPosition(ctx, "gw-1")
			require.NoError(t, err)
			assert.Equal(t, int64(10), pos, "%s: position unchanged", name)
		}
		// The store is still usable, and the good part of a batch goes in once fixed.
		noID[len(noID)-1].RequestID = "x_last"
		require.NoError(t, s.WriteUsage(ctx, "gw-1", 500, noID))
		assert.Equal(t, int64(2+len(noID)), f.usageCount(t))
	}},

	{"QueryUsage sums by every grouping and filter", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		rs := usageFixture()
		// In two batches, through two journals.
		require.NoError(t, s.WriteUsage(ctx, "gw-1", 1, rs[:3]))
		require.NoError(t, s.WriteUsage(ctx, "gw-2", 1, rs[3:]))

		// A few answers written out in full.
		rows, err := s.QueryUsage(ctx, metering.Query{})
		require.NoError(t, err)
		assert.Equal(t, []metering.Row{{Requests: 8, Input: 12_701, CachedIn: 430, CacheWrite: 205, Output: 5_092,
			Reasoning: 1_180, CostMicros: 127_003, Estimated: 3}}, rows)

		rows, err = s.QueryUsage(ctx, metering.Query{GroupBy: []string{"day"}})
		require.NoError(t, err)
		assert.Equal(t, []metering.Row{
			{Day: "2026-03-13", Requests: 1, Input: 1, Output: 2, CostMicros: 3},
			{Day: "2026-03-14", Requests: 3, Input: 700, CachedIn: 30, CacheWrite: 45, Output: 290, Reasoning: 80, CostMicros: 7_000, Estimated: 1},
			{Day: "2026-03-15", Requests: 3, Input: 5_600, CachedIn: 400, CacheWrite: 160, Output: 2_240, Reasoning: 100, CostMicros: 56_000, Estimated: 1},
			{Day: "2026-03-16", Requests: 1, Input: 6_400, Output: 2_560, Reasoning: 1_000, CostMicros: 64_000, Estimated: 1},
		}, rows)

		rows, err = s.QueryUsage(ctx, metering.Query{GroupBy: []string{"key", "day"},
			From: utc(2026, 3, 14, 0, 0, 0, 0), To: utc(2026, 3, 16, 0, 0, 0, 0)})
		require.NoError(t, err)
		assert.Equal(t, []metering.Row{
			{KeyID: "", Day: "2026-03-15", Requests: 1, Input: 1_600, Output: 640, Reasoning: 100, CostMicros: 16_000, Estimated: 1},
			{KeyID: "key_a", Day: "2026-03-14", Requests: 2, Input: 500, CachedIn: 10, CacheWrite: 45, Output: 210, Reasoning: 80, CostMicros: 5_000},
			{KeyID: "key_b", Day: "2026-03-14", Requests: 1, Input: 200, CachedIn: 20, Output: 80, CostMicros: 2_000, Estimated: 1},
			{KeyID: "key_b", Day: "2026-03-15", Requests: 1, Input: 800, CachedIn: 80, Output: 320, CostMicros: 8_000},
			{KeyID: "static:ops", Day: "2026-03-15", Requests: 1, Input: 3_200, CachedIn: 320, CacheWrite: 160, Output: 1_280, CostMicros: 32_000},
		}, rows)

		rows, err = s.QueryUsage(ctx, metering.Query{KeyID: "key_b", Model: "m2", GroupBy: []string{"model", "key", "day"}})
		require.NoError(t, err)
		assert.Equal(t, []metering.Row{
			{Model: "m2", KeyID: "key_b", Day: "2026-03-14", Requests: 1, Input: 200, CachedIn: 20, Output: 80, CostMicros: 2_000, Estimated: 1},
			{Model: "m2", KeyID: "key_b", Day: "2026-03-16", Requests: 1, Input: 6_400, Output: 2_560, Reasoning: 1_000, CostMicros: 64_000, Estimated: 1},
		}, rows)

		// Nothing matches: no groups, or one row of zeros for the totals.
		rows, err = s.QueryUsage(ctx, metering.Query{KeyID: "key_nobody", GroupBy: []string{"day"}})
		require.NoError(t, err)
		assert.Empty(t, rows)
		rows, err = s.QueryUsage(ctx, metering.Query{KeyID: "key_nobody"})
		require.NoError(t, err)
		assert.Equal(t, []metering.Row{{}}, rows)

		// Every ordered subset of the dimensions, under every filter, against the
		// reference.
		var groupings [][]string
		var perm func(prefix, rest []string)
		perm = func(prefix, rest []string) {
			groupings = append(groupings, slices.Clone(prefix))
			for i, d := range rest {
				perm(append(slices.Clone(prefix), d), append(slices.Clone(rest[:i]), rest[i+1:]...))
			}
		}
		perm(nil, []string{"day", "key", "model"})
		require.Len(t, groupings, 16)
		filters := []metering.Query{
			{},
			{KeyID: "key_a"},
			{KeyID: "static:ops"},
			{Model: "m1"},
			{KeyID: "key_b", Model: "m1"},
			{From: utc(2026, 3, 14, 0, 0, 0, 0)}, // inclusive
			{To: utc(2026, 3, 15, 0, 0, 0, 0)},   // exclusive
			{From: utc(2026, 3, 15, 0, 0, 0, 0), To: utc(2026, 3, 16, 0, 0, 0, 0)}, // one UTC day
			// Bounds with nanoseconds: stored times are whole microseconds, so
			// 23:59:59.999999 is before From and at To's microsecond not before To.
			{From: utc(2026, 3, 14, 23, 59, 59, 999_999_001)},
			{To: utc(2026, 3, 14, 23, 59, 59, 999_999_001)},
			// The same instants in another zone.
			{From: utc(2026, 3, 15, 0, 0, 0, 0).In(time.FixedZone("X", -7*3600)), To: utc(2026, 3, 15, 12, 0, 0, 1)},
			{From: utc(2026, 3, 20, 0, 0, 0, 0), To: utc(2026, 3, 10, 0, 0, 0, 0)}, // an empty period
		}
		for _, filter := range filters {
			for _, g := range groupings {
				q := filter
				q.GroupBy = g
				rows, err := s.QueryUsage(ctx, q)
				require.NoError(t, err)
				want := expectedUsage(rs, q)
				if len(want) == 0 {
					want = nil
				}
				assert.Equal(t, want, rows, "%+v", q)
			}
		}
	}},

	{"QueryUsage groups by candidate and by channel", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		rs := usageFixture()
		require.NoError(t, s.WriteUsage(ctx, "gw-1", 1, rs))
		for _, g := range [][]string{{"channel"}, {"candidate"}, {"model", "candidate"}, {"channel", "day"},
			{"key", "channel", "model"}, {"day", "key", "model", "candidate", "channel"}} {
			rows, err := s.QueryUsage(ctx, metering.Query{GroupBy: g})
			require.NoError(t, err)
			assert.Equal(t, expectedUsage(rs, metering.Query{GroupBy: g}), rows, "%q", g)
		}
		rows, err := s.QueryUsage(ctx, metering.Query{Model: "m2", GroupBy: []string{"channel"}})
		require.NoError(t, err)
		require.Len(t, rows, 3, "api, bedrock and vertex")
		assert.Equal(t, []string{"api", "bedrock", "vertex"}, []string{rows[0].Channel, rows[1].Channel, rows[2].Channel})
	}},

	{"QueryUsage refuses unknown or repeated groupings", func(t *testing.T, f *fixture) {
		s := f.open(t)
		for _, g := range [][]string{{"week"}, {"day", "day"}, {"key", "model", "key"}, {""}} {
			_, err := s.QueryUsage(context.Background(), metering.Query{GroupBy: g})
			assert.Error(t, err, "%q", g)
		}
	}},

	{"a ledger delivers its journal into the store", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		dir := t.TempDir()
		l, err := metering.OpenLedger(ctx, dir, s, metering.Options{BatchRecords: 64, Interval: 10 * time.Millisecond, SegmentBytes: 16 << 10})
		require.NoError(t, err)
		rs := numbered("led", 500, utc(2026, 3, 14, 12, 0, 0, 0))
		for i := range rs {
			require.NoError(t, l.Append(&rs[i]))
		}
		require.NoError(t, l.Close())
		assert.Equal(t, int64(len(rs)), f.usageCount(t))
		id := l.Stats().JournalID
		pos, err := s.JournalPosition(ctx, id)
		require.NoError(t, err)
		assert.Positive(t, pos)
		assert.Zero(t, l.Stats().PendingBytes)

		// A restart resumes from the stored position: nothing is written twice, and
		// the next record goes in.
		l, err = metering.OpenLedger(ctx, dir, s, metering.Options{Interval: 10 * time.Millisecond})
		require.NoError(t, err)
		more := numbered("after", 1, utc(2026, 3, 14, 13, 0, 0, 0))
		require.NoError(t, l.Append(&more[0]))
		require.NoError(t, l.Close())
		assert.Equal(t, int64(len(rs)+1), f.usageCount(t))
		total, err := s.QueryUsage(ctx, metering.Query{KeyID: "key_n"})
		require.NoError(t, err)
		assert.Equal(t, expectedUsage(append(rs, more...), metering.Query{}), total)
	}},
}

func TestUsageStore(t *testing.T) {
	for _, d := range drivers {
		t.Run(d, func(t *testing.T) {
			for _, tc := range usageSuite {
				t.Run(tc.name, func(t *testing.T) { tc.run(t, newFixture(t, d)) })
			}
		})
	}
}

// Days are UTC days, written YYYY-MM-DD, whatever the PostgreSQL session's time zone
// and date style: here a zone 14 hours ahead of UTC, where most of the fixture's
// records fall on another local day, and dates written day first.
func TestUsageDaysAreUTCWhateverTheSessionTimeZone(t *testing.T) {
	f := newFixture(t, DriverPostgres)
	ctx := context.Background()
	s := f.open(t)
	rs := usageFixture()
	require.NoError(t, s.WriteUsage(ctx, "gw-1", 1, rs))
	f.dsn = withPGParam(t, withPGParam(t, f.dsn, "timezone", "Pacific/Kiritimati"), "datestyle", "SQL,DMY")
	far := f.open(t)
	var tz, style string
	require.NoError(t, far.ref.Load().backend.(*pgBackend).pool.QueryRow(ctx, `SELECT current_setting('TimeZone'), current_setting('DateStyle')`).Scan(&tz, &style))
	require.Equal(t, "Pacific/Kiritimati", tz)
	require.Equal(t, "SQL, DMY", style)
	for _, g := range [][]string{{"day"}, {"key", "day"}, {"day", "model"}} {
		rows, err := far.QueryUsage(ctx, metering.Query{GroupBy: g})
		require.NoError(t, err)
		assert.Equal(t, expectedUsage(rs, metering.Query{GroupBy: g}), rows, "%q", g)
	}
}

// withPGParam adds a run-time parameter to a URL or key=value DSN.
func withPGParam(t testing.TB, dsn, name, value string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		require.NoError(t, err)
		q := u.Query()
		q.Set(name, value)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " " + name + "=" + value
}

// The two queries the console makes most (one key's month by day; everyone's day by
// model or key) are range searches on an index, on both databases. The data set is big
// enough that PostgreSQL's planner prefers the index to a scan of the table.
func TestUsageQueriesUseTheIndexes(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		start := utc(2026, 3, 1, 0, 0, 0, 0)
		require.NoError(t, s.WriteUsage(ctx, "gen", 1, generateUsage(start, 30, 50, 10)))
		perKey := metering.Query{KeyID: benchKeyID(7), From: start, To: start.AddDate(0, 0, 30), GroupBy: []string{"day"}}
		oneDay := metering.Query{From: start.AddDate(0, 0, 14), To: start.AddDate(0, 0, 15), GroupBy: []string{"day", "model"}}
		for _, tc := range []struct {
			q     metering.Query
			index string
		}{{perKey, "usage_records_by_key_ts"}, {oneDay, "usage_records_by_ts"}} {
			plan := explainUsage(t, f, s, tc.q)
			t.Logf("%+v:\n%s", tc.q, plan)
			assert.Contains(t, plan, tc.index)
			assert.NotRegexp(t, `(?i)seq scan|SCAN usage_records\b`, plan, "no scan of the whole table")
		}
	})
}

// explainUsage returns the plan of q as the database would run it.
func explainUsage(t testing.TB, f *fixture, s *Store, q metering.Query) string {
	t.Helper()
	uq, err := buildUsageQuery(s.ref.Load().usageDialect(), q)
	require.NoError(t, err)
	var lines []string
	switch f.driver {
	case DriverSQLite:
		for _, r := range f.rows(t, `EXPLAIN QUERY PLAN `+uq.sql, uq.args...) {
			lines = append(lines, fmt.Sprint(r[len(r)-1]))
		}
	case DriverPostgres:
		f.rows(t, `ANALYZE usage_records`)
		for _, r := range f.rows(t, `EXPLAIN `+uq.sql, uq.args...) {
			lines = append(lines, fmt.Sprint(r...))
		}
	}
	return strings.Join(lines, "\n")
}

// benchKeyID names the i-th generated key like auth.NewKeyID does (20 characters).
func benchKeyID(i int) string { return fmt.Sprintf("key_%016d", i) }

var benchModels = []string{"claude-sonnet", "gpt-5", "gpt-5-mini", "gemini-pro", "llama-70b"}

// generateUsage makes days × keys × perDay records from start (see generateUsageDay).
func generateUsage(start time.Time, days, keys, perDay int) []metering.Record {
	out := make([]metering.Record, 0, days*keys*perDay)
	for d := range days {
		out = append(out, generateUsageDay(start, d, keys, perDay)...)
	}
	return out
}

// generateUsageDay makes the records of day d after start: perDay for each of keys
// keys, spread over the day, with the models in turn. Request ids are unique across
// days.
func generateUsageDay(start time.Time, d, keys, perDay int) []metering.Record {
	out := make([]metering.Record, 0, keys*perDay)
	step := 24 * time.Hour / time.Duration(perDay)
	day := start.AddDate(0, 0, d)
	for k := range keys {
		key := benchKeyID(k)
		for i := range perDay {
			n := (d*keys+k)*perDay + i + 1
			in := int64(500 + n%1500)
			out = append(out, metering.Record{
				RequestID: fmt.Sprintf("sy_%024x", n), KeyID: key, Model: benchModels[(k+i)%len(benchModels)],
				Candidate: "upstream-a", Protocol: "openai", Operation: "chat", Status: 200,
				Usage:      metering.Usage{Input: in, CachedInput: in / 4, Output: int64(100 + n%400), Reasoning: int64(n % 50), Estimated: n%97 == 0},
				CostMicros: in * 3, LatencyMs: 900, TTFBMs: 250, Attempts: 1,
				Time: day.Add(time.Duration(i)*step + time.Duration(k)*time.Second),
			})
		}
	}
	return out
}

// The ledger moves past a record the database refused for good by writing an empty
// batch with the new position: both stores must take it.
func TestEmptyUsageBatchMovesThePosition(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		s := f.open(t)
		ctx := context.Background()
		require.NoError(t, s.WriteUsage(ctx, "j1", 120, nil))
		pos, err := s.JournalPosition(ctx, "j1")
		require.NoError(t, err)
		assert.Equal(t, int64(120), pos)
		assert.Equal(t, int64(0), f.usageCount(t))
	})
}
