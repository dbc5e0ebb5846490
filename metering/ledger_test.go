package metering

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memorySink is a database that can be taken down; it keeps records by request id, as
// the real stores do, and the journal positions.
type memorySink struct {
	mu        sync.Mutex
	down      bool
	records   map[string]Record
	positions map[string]int64
	writes    int
}

func newMemorySink() *memorySink {
	return &memorySink{records: map[string]Record{}, positions: map[string]int64{}}
}

func (s *memorySink) WriteUsage(_ context.Context, journal string, upTo int64, rs []Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errors.New("database unavailable")
	}
	for _, r := range rs {
		if r.Model == "poison" {
			return errors.New("the database refuses this record for good")
		}
	}
	for _, r := range rs {
		if _, dup := s.records[r.RequestID]; !dup {
			s.records[r.RequestID] = r
		}
	}
	s.positions[journal] = upTo
	s.writes++
	return nil
}

func (s *memorySink) JournalPosition(_ context.Context, journal string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return 0, errors.New("database unavailable")
	}
	return s.positions[journal], nil
}

func (s *memorySink) setDown(down bool) { s.mu.Lock(); s.down = down; s.mu.Unlock() }

func (s *memorySink) count() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.records) }

func record(i int) *Record {
	return &Record{RequestID: fmt.Sprintf("sy_%06d", i), KeyID: "key_a", Model: "m", Usage: Usage{Input: 10, Output: int64(i)}, Time: time.Unix(1_800_000_000, 0)}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLedgerDeliversEveryRecordOnceThroughAnOutage(t *testing.T) {
	dir, sink := t.TempDir(), newMemorySink()
	l, err := OpenLedger(context.Background(), dir, sink, Options{Interval: 10 * time.Millisecond, BatchRecords: 64, SegmentBytes: 4 << 10})
	require.NoError(t, err)
	for i := 0; i < 300; i++ {
		require.NoError(t, l.Append(record(i)))
	}
	waitFor(t, "the first records", func() bool { return sink.count() == 300 })

	sink.setDown(true)
	for i := 300; i < 900; i++ {
		require.NoError(t, l.Append(record(i)), "appends go on while the database is down")
	}
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, 300, sink.count())
	assert.Positive(t, l.Stats().PendingBytes, "the journal holds what the database could not take")
	sink.setDown(false)
	waitFor(t, "recovery", func() bool { return sink.count() == 900 })
	require.NoError(t, l.Close())
	assert.Zero(t, l.Stats().PendingBytes)

	segs, _ := filepath.Glob(filepath.Join(dir, "usage-*.jsonl"))
	assert.LessOrEqual(t, len(segs), 2, "segments already in the database are removed")
}

func TestLedgerReplaysAfterTheProcessDied(t *testing.T) {
	dir, sink := t.TempDir(), newMemorySink()
	sink.setDown(true)
	first, err := OpenLedger(context.Background(), dir, sink, Options{Interval: time.Hour})
	require.NoError(t, err)
	for i := 0; i < 50; i++ {
		require.NoError(t, first.Append(record(i)))
	}
	// The process dies here: no Close. A torn line from a write cut short is at the end.
	segs, _ := filepath.Glob(filepath.Join(dir, "usage-*.jsonl"))
	require.Len(t, segs, 1)
	f, err := os.OpenFile(segs[0], os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, _ = f.WriteString(`{"request_id":"sy_torn","mod`)
	f.Close()
	first.lock.Close() // the kernel drops a dead process's lock

	sink.setDown(false)
	second, err := OpenLedger(context.Background(), dir, sink, Options{Interval: 10 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, second.Append(record(50)))
	waitFor(t, "the replay", func() bool { return sink.count() == 51 })
	require.NoError(t, second.Close())
	assert.Equal(t, first.Stats().JournalID, second.Stats().JournalID, "the same journal continues")
	_, torn := sink.records["sy_torn"]
	assert.False(t, torn)
}

func TestLedgerCloseFlushes(t *testing.T) {
	sink := newMemorySink()
	l, err := OpenLedger(context.Background(), t.TempDir(), sink, Options{Interval: time.Hour})
	require.NoError(t, err)
	for i := 0; i < 10; i++ {
		require.NoError(t, l.Append(record(i)))
	}
	require.NoError(t, l.Close())
	assert.Equal(t, 10, sink.count(), "a reload or shutdown writes what is pending")
	assert.ErrorIs(t, l.Append(record(11)), ErrClosed)
}

func TestOneRefusedRecordDoesNotHoldBackTheRest(t *testing.T) {
	dir, sink := t.TempDir(), newMemorySink()
	l, err := OpenLedger(context.Background(), dir, sink, Options{Interval: 10 * time.Millisecond, BatchRecords: 50})
	require.NoError(t, err)
	for i := 0; i < 100; i++ {
		r := record(i)
		if i == 37 {
			r.Model = "poison"
		}
		require.NoError(t, l.Append(r))
	}
	waitFor(t, "the other records", func() bool { return sink.count() == 99 })
	require.NoError(t, l.Close())
	refused, err := os.ReadFile(filepath.Join(dir, "refused.jsonl"))
	require.NoError(t, err)
	assert.Contains(t, string(refused), "sy_000037", "the refused record is kept for an operator")
	assert.Zero(t, l.Stats().PendingBytes)

	assert.Error(t, (&Ledger{}).Append(&Record{}), "a record without a request id is refused at once")
}

func TestOneGatewayPerJournal(t *testing.T) {
	dir := t.TempDir()
	first, err := OpenLedger(context.Background(), dir, newMemorySink(), Options{})
	require.NoError(t, err)
	_, err = OpenLedger(context.Background(), dir, newMemorySink(), Options{})
	assert.ErrorContains(t, err, "in use by another gateway")
	require.NoError(t, first.Close())
	second, err := OpenLedger(context.Background(), dir, newMemorySink(), Options{})
	require.NoError(t, err, "free again once the first is closed")
	require.NoError(t, second.Close())
}
