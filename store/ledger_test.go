package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/limits"
	"github.com/switchyard-gw/switchyard/metering"
)

// countingSink is a Store that counts each record the ledger hands it in a write that
// succeeded, duplicates included: the database ignores a request id it already has,
// which would hide a record sent twice.
type countingSink struct {
	*Store
	mu     sync.Mutex
	handed map[string]int
}

func (c *countingSink) WriteUsage(ctx context.Context, journalID string, upTo int64, records []metering.Record) error {
	if err := c.Store.WriteUsage(ctx, journalID, upTo, records); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range records {
		c.handed[r.RequestID]++
	}
	return nil
}

// A ledger restarted over the same journal and the same database resumes at the
// position the database stored: across two lifetimes each record is handed to the
// database once, and the stored position is the journal's length.
func TestLedgerRestartOverTheStoreSendsNothingTwice(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		sink := &countingSink{Store: f.open(t), handed: map[string]int{}}
		dir := t.TempDir()
		opts := metering.Options{Interval: 10 * time.Millisecond, BatchRecords: 32}
		rec := func(i int) *metering.Record {
			return &metering.Record{RequestID: fmt.Sprintf("sy_%06d", i), KeyID: "k", Model: "m", Status: 200, Time: t0}
		}
		lifetime := func(from, to int) string {
			l, err := metering.OpenLedger(ctx, dir, sink, opts)
			require.NoError(t, err)
			for i := from; i < to; i++ {
				require.NoError(t, l.Append(rec(i)))
			}
			require.Eventually(t, func() bool { return l.Stats().PendingBytes == 0 }, 10*time.Second, 10*time.Millisecond)
			require.NoError(t, l.Close())
			return l.Stats().JournalID
		}
		first := lifetime(0, 100)
		second := lifetime(100, 150)
		require.Equal(t, first, second, "one journal")

		sink.mu.Lock()
		for i := range 150 {
			assert.Equal(t, 1, sink.handed[rec(i).RequestID], "record %d handed to the database", i)
		}
		assert.Len(t, sink.handed, 150)
		sink.mu.Unlock()
		assert.Equal(t, int64(150), f.usageCount(t))

		segs, err := filepath.Glob(filepath.Join(dir, "usage-*.jsonl"))
		require.NoError(t, err)
		require.Len(t, segs, 1)
		info, err := os.Stat(segs[0])
		require.NoError(t, err)
		pos, err := sink.JournalPosition(ctx, first)
		require.NoError(t, err)
		assert.Equal(t, info.Size(), pos, "the stored position is the end of the journal")
	})
}

// A journal holds lines written before records had a project (an older gateway's) and
// lines with one: both reach the database, the older as a record of no project, and
// each counts for the spend of the project it was metered in.
func TestJournalLinesWithAndWithoutAProjectReachTheStore(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		dir := t.TempDir()
		// As an older gateway wrote it: no project_id.
		old := `{"request_id":"sy_old","key_id":"key_a","model":"m","candidate":"c","protocol":"openai","operation":"chat",` +
			`"status":200,"input":10,"output":5,"cost_micros":7,"latency_ms":1,"ttfb_ms":1,"attempts":1,"time":"2026-05-01T10:00:00Z"}` + "\n"
		require.NoError(t, os.WriteFile(filepath.Join(dir, "usage-0000000000000000.jsonl"), []byte(old), 0o600))
		l, err := metering.OpenLedger(ctx, dir, s, metering.Options{Interval: 10 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, l.Append(&metering.Record{RequestID: "sy_new", KeyID: "key_a", ProjectID: "platform", Model: "m",
			Status: 200, CostMicros: 100, Time: time.Date(2026, 5, 1, 11, 0, 0, 0, time.UTC)}))
		require.Eventually(t, func() bool { return l.Stats().PendingBytes == 0 }, 10*time.Second, 10*time.Millisecond)
		require.NoError(t, l.Close())

		rows := f.rows(t, `SELECT request_id, project_id FROM usage_records ORDER BY request_id`)
		require.Len(t, rows, 2)
		assert.Equal(t, []any{"sy_new", "platform"}, rows[0])
		assert.Equal(t, []any{"sy_old", nil}, rows[1])
		spent, err := s.Spend(ctx, limits.Scope{Kind: limits.ScopeKey, ID: "key_a"}, time.Time{})
		require.NoError(t, err)
		assert.Equal(t, int64(107), spent)
		spent, err = s.Spend(ctx, limits.Scope{Kind: limits.ScopeProject, ID: "platform"}, time.Time{})
		require.NoError(t, err)
		assert.Equal(t, int64(100), spent)
	})
}
