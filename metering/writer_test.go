package metering

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLedgerDeliversEveryRecordOnceThroughAnOutage(t *testing.T) {
	dir, sink := t.TempDir(), newMemorySink()
	l, err := OpenLedger(context.Background(), dir, sink, Options{Interval: 10 * time.Millisecond, BatchRecords: 64, SegmentBytes: 4 << 10})
	require.NoError(t, err)
	for i := 0; i < 300; i++ {
		require.NoError(t, l.Append(record(i)))
	}
	eventually(t, "the first records", func() bool { return sink.count() == 300 })

	sink.setDown(true)
	callsBefore := sink.callCount()
	for i := 300; i < 900; i++ {
		require.NoError(t, l.Append(record(i)), "appends go on while the database is down")
	}
	// The writer has tried, and failed, at least twice while the database was down: what
	// it could not write is still in the journal, not dropped and not set aside.
	eventually(t, "the writer trying the database while it is down", func() bool { return sink.callCount() >= callsBefore+2 })
	assert.Equal(t, 300, sink.count())
	perRecord := len(mustJSON(t, record(899))) + 1
	assert.GreaterOrEqual(t, l.Stats().PendingBytes, int64(600*perRecord-600), "the journal holds all 600 records the database could not take")
	assert.NoFileExists(t, filepath.Join(dir, "refused.jsonl"), "an outage sets nothing aside")
	sink.setDown(false)
	eventually(t, "recovery", func() bool { return sink.count() == 900 })
	require.NoError(t, l.Close())
	assert.Zero(t, l.Stats().PendingBytes)

	segs, _ := filepath.Glob(filepath.Join(dir, "usage-*.jsonl"))
	assert.LessOrEqual(t, len(segs), 2, "segments already in the database are removed")
}

// After an outage long enough for the back-off to reach its longest, the journal drains
// within a couple of seconds of the database returning, and at once when the sink says
// it is back. Every record is stored once and none is set aside.
func TestLedgerCatchesUpPromptlyAfterAnOutage(t *testing.T) {
	for _, notify := range []bool{false, true} {
		t.Run(map[bool]string{false: "back-off", true: "woken by the sink"}[notify], func(t *testing.T) {
			dir, mem := t.TempDir(), newMemorySink()
			var sink Sink = mem
			if notify {
				mem.recovered = make(chan struct{})
				sink = notifyingSink{mem}
			}
			mem.setDown(true)
			l, err := OpenLedger(context.Background(), dir, sink, Options{Interval: 10 * time.Millisecond})
			require.NoError(t, err)
			defer l.Close()
			for i := 0; i < 200; i++ {
				require.NoError(t, l.Append(record(i)))
			}
			// Enough failed attempts for any back-off to have grown to its longest
			// (250 ms doubling: 0.25, 0.5, 1, 1 s).
			eventually(t, "the back-off to grow", func() bool { return mem.callCount() >= 6 })
			mem.setDown(false)
			back := time.Now()
			eventually(t, "the journal to drain", func() bool { return mem.count() == 200 })
			took := time.Since(back)
			t.Logf("drained %v after the database came back", took)
			limit := 1500 * time.Millisecond
			if notify {
				limit = 300 * time.Millisecond
			}
			assert.Less(t, took, limit)
			assert.Empty(t, refusedIDs(t, dir))
			assert.Empty(t, mem.deliveredMoreThanOnce())
		})
	}
}

// The writer moves records from memory while it keeps up, and from the journal when an
// outage outlasted what memory keeps: either way each record arrives once, whole.
func TestRecordsArriveOnceWhetherFromMemoryOrTheJournal(t *testing.T) {
	sink := newMemorySink()
	l, err := OpenLedger(context.Background(), t.TempDir(), sink, Options{Interval: 5 * time.Millisecond, BatchRecords: 16})
	require.NoError(t, err)
	defer l.Close()
	for i := 0; i < 40; i++ {
		require.NoError(t, l.Append(record(i)))
	}
	eventually(t, "the first records, from memory", func() bool { return sink.count() == 40 })

	sink.setDown(true)
	// Memory keeps 4 batches (64 records); 500 during the outage overflow it many times.
	for i := 40; i < 540; i++ {
		require.NoError(t, l.Append(record(i)))
	}
	bad := record(540)
	bad.Candidate = "cand\xff" // what the journal's JSON turns into U+FFFD
	require.NoError(t, l.Append(bad))
	for i := 541; i < 600; i++ {
		require.NoError(t, l.Append(record(i)))
	}
	sink.setDown(false)
	eventually(t, "every record after the outage", func() bool { return sink.count() == 600 })
	assert.Empty(t, sink.deliveredMoreThanOnce())
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for i := 0; i < 600; i++ {
		got, want := sink.records[record(i).RequestID], record(i)
		if i == 540 {
			want = bad
			want.Candidate = "cand\uFFFD"
		}
		require.Equal(t, want.Output, got.Output, "record %d", i)
		require.Equal(t, want.Candidate, got.Candidate, "record %d", i)
		require.True(t, want.Time.Equal(got.Time), "record %d", i)
	}
}
