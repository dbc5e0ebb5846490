package metering

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// eventually polls cond every 10 ms for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, 10*time.Millisecond, "waiting for %s", what)
}

// sinkState is what a test reads from a memorySink, under its lock.
func (s *memorySink) state() (delivered map[string]int, sent int, positions map[string]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delivered = make(map[string]int, len(s.delivered))
	for id, n := range s.delivered {
		delivered[id] = n
	}
	positions = make(map[string]int64, len(s.positions))
	for j, p := range s.positions {
		positions[j] = p
	}
	return delivered, s.sent, positions
}

// assertEachDeliveredOnce checks that records 0..n-1, and nothing else, reached the sink,
// each exactly once.
func assertEachDeliveredOnce(t *testing.T, sink *memorySink, n int) {
	t.Helper()
	delivered, sent, _ := sink.state()
	var twice, missing []string
	for i := range n {
		id := record(i).RequestID
		switch delivered[id] {
		case 1:
		case 0:
			missing = append(missing, id)
		default:
			twice = append(twice, fmt.Sprintf("%s×%d", id, delivered[id]))
		}
	}
	assert.Empty(t, missing, "records never delivered")
	assert.Empty(t, twice, "records delivered more than once")
	assert.Len(t, delivered, n, "no record the test did not append")
	assert.Equal(t, n, sent, "records handed to the database, duplicates included")
}

// journalIDs lists the request ids of the records the journal segments in dir hold.
func journalIDs(t *testing.T, dir string) []string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, segmentPrefix+"*"+segmentSuffix))
	require.NoError(t, err)
	var ids []string
	for _, seg := range segs {
		b, err := os.ReadFile(seg)
		require.NoError(t, err)
		for _, line := range bytes.SplitAfter(b, []byte{'\n'}) {
			var r Record
			if len(line) > 0 && json.Unmarshal(line, &r) == nil {
				ids = append(ids, r.RequestID)
			}
		}
	}
	return ids
}

// A restart resumes where the database says the journal was written up to, not from the
// start of the journal: across two lifetimes of the ledger over one directory, each
// record reaches the database once. The first lifetime ends with part of its journal
// segment written and part not (the database went away before Close), so the second
// must start exactly at the stored position: neither before it (records sent again)
// nor after it (records lost).
func TestARestartResumesAtTheStoredPosition(t *testing.T) {
	dir, sink := t.TempDir(), newMemorySink()
	opts := Options{Interval: 10 * time.Millisecond, BatchRecords: 16}

	first, err := OpenLedger(context.Background(), dir, sink, opts)
	require.NoError(t, err)
	for i := range 100 {
		require.NoError(t, first.Append(record(i)))
	}
	eventually(t, "the first 100 records in the database", func() bool {
		return sink.count() == 100 && first.Stats().PendingBytes == 0
	})
	sink.setDown(true)
	for i := 100; i < 150; i++ {
		require.NoError(t, first.Append(record(i)))
	}
	require.NoError(t, first.Close())
	_, _, positions := sink.state()
	stored := positions[first.Stats().JournalID]
	require.Positive(t, stored)
	assert.Equal(t, 100, sink.count(), "the database was down for the last 50")
	segs, err := filepath.Glob(filepath.Join(dir, segmentPrefix+"*"+segmentSuffix))
	require.NoError(t, err)
	require.Len(t, segs, 1, "the stored position is inside the one segment")

	sink.setDown(false)
	second, err := OpenLedger(context.Background(), dir, sink, opts)
	require.NoError(t, err)
	require.Equal(t, first.Stats().JournalID, second.Stats().JournalID, "the same journal continues")
	for i := 150; i < 200; i++ {
		require.NoError(t, second.Append(record(i)))
	}
	eventually(t, "all 200 records in the database", func() bool {
		return sink.count() == 200 && second.Stats().PendingBytes == 0
	})
	require.NoError(t, second.Close())

	assertEachDeliveredOnce(t, sink, 200)
	_, _, positions = sink.state()
	assert.Greater(t, positions[second.Stats().JournalID], stored, "the position moved on from where it was")
}

// Close while the database is down, whether it refuses connections at once or has
// stopped answering, returns within its drain limit and loses nothing: the records stay
// in the journal, and the next ledger over it delivers each of them once.
func TestCloseWhileTheDatabaseIsDown(t *testing.T) {
	for _, mode := range []string{"refusing", "not answering"} {
		t.Run(mode, func(t *testing.T) {
			dir, sink := t.TempDir(), newMemorySink()
			first, err := OpenLedger(context.Background(), dir, sink, Options{Interval: 10 * time.Millisecond, BatchRecords: 16})
			require.NoError(t, err)
			for i := range 40 {
				require.NoError(t, first.Append(record(i)))
			}
			eventually(t, "the first records", func() bool { return sink.count() == 40 && first.Stats().PendingBytes == 0 })

			sink.mu.Lock()
			if mode == "refusing" {
				sink.down = true
			} else {
				sink.hang = true
			}
			sink.mu.Unlock()
			for i := 40; i < 100; i++ {
				require.NoError(t, first.Append(record(i)))
			}
			if mode == "not answering" {
				// Close while a write is waiting on the database: the writer must not
				// wait out its own write timeout (15 s) before the drain begins.
				eventually(t, "a write waiting on the database", func() bool {
					sink.mu.Lock()
					defer sink.mu.Unlock()
					return sink.hanging > 0
				})
			}
			first.drainLimit = 300 * time.Millisecond // read by the writer only once Close has stopped it
			closed := make(chan error, 1)
			go func() { closed <- first.Close() }()
			select {
			case err := <-closed:
				require.NoError(t, err)
			case <-time.After(writeTimeout):
				t.Fatalf("Close did not return within the write timeout (%v) with the database down", writeTimeout)
			}
			assert.Equal(t, 40, sink.count())
			assert.Positive(t, first.Stats().PendingBytes)
			ids := journalIDs(t, dir)
			for i := 40; i < 100; i++ {
				assert.Contains(t, ids, record(i).RequestID, "kept in the journal")
			}

			sink.mu.Lock()
			sink.down, sink.hang = false, false
			sink.mu.Unlock()
			second, err := OpenLedger(context.Background(), dir, sink, Options{Interval: 10 * time.Millisecond, BatchRecords: 16})
			require.NoError(t, err)
			eventually(t, "the rest", func() bool { return sink.count() == 100 && second.Stats().PendingBytes == 0 })
			require.NoError(t, second.Close())
			assertEachDeliveredOnce(t, sink, 100)
		})
	}
}

// logCounter collects what a ledger reports.
type logCounter struct {
	mu    sync.Mutex
	lines []string
}

func (l *logCounter) add(what string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf("%s: %v", what, err))
}

func (l *logCounter) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

func (l *logCounter) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
