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
