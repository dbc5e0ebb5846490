package metering

import (
	"bytes"
	"context"
	"encoding/json"
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
// the real stores do, and the journal positions. Like the real stores it stores a
// request id once, but it counts every delivery of a record (delivered, per request id,
// and sent, in all), including the ones it ignored as already stored: a ledger that
// sends a record twice is seen, though the database would hide it.
type memorySink struct {
	mu        sync.Mutex
	down      bool // every call fails, as with no connection
	hang      bool // every call waits for its context to end, as with a server that stopped answering
	noWrites  bool // writes fail while reads succeed, as with a read-only database
	failEmpty int  // this many position-only writes fail before one succeeds
	// Writes holding request id failHolding fail, failHoldingN times, before anything
	// is stored.
	failHolding  string
	failHoldingN int
	hanging      int // calls waiting now in hang mode
	records      map[string]Record
	delivered    map[string]int
	sent         int // records in successful writes, duplicates included
	positions    map[string]int64
	writes       int
	calls        int
	recovered    chan struct{} // closed by setDown(false); nil: not a RecoveryNotifier
}

func newMemorySink() *memorySink {
	return &memorySink{records: map[string]Record{}, delivered: map[string]int{}, positions: map[string]int64{}}
}

// waitIfHanging blocks a call in hang mode until its context ends; s.mu is held on
// entry and on return.
func (s *memorySink) waitIfHanging(ctx context.Context) error {
	if !s.hang {
		return nil
	}
	s.hanging++
	s.mu.Unlock()
	<-ctx.Done()
	s.mu.Lock()
	s.hanging--
	return ctx.Err()
}

func (s *memorySink) WriteUsage(ctx context.Context, journal string, upTo int64, rs []Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if err := s.waitIfHanging(ctx); err != nil {
		return err
	}
	if s.down || s.noWrites {
		return errors.New("database unavailable")
	}
	if len(rs) == 0 && s.failEmpty > 0 {
		s.failEmpty--
		return errors.New("connection reset")
	}
	for _, r := range rs {
		if r.RequestID == s.failHolding && s.failHoldingN > 0 {
			s.failHoldingN--
			return errors.New("connection reset")
		}
		if r.Model == "poison" {
			return fmt.Errorf("row %s: %w", r.RequestID, ErrRecordRefused)
		}
	}
	for _, r := range rs {
		if _, dup := s.records[r.RequestID]; !dup {
			s.records[r.RequestID] = r
		}
		s.delivered[r.RequestID]++
		s.sent++
	}
	s.positions[journal] = max(s.positions[journal], upTo)
	s.writes++
	return nil
}

func (s *memorySink) JournalPosition(ctx context.Context, journal string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if err := s.waitIfHanging(ctx); err != nil {
		return 0, err
	}
	if s.down {
		return 0, errors.New("database unavailable")
	}
	return s.positions[journal], nil
}

func (s *memorySink) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
	if !down && s.recovered != nil {
		close(s.recovered)
		s.recovered = make(chan struct{})
	}
}

func (s *memorySink) count() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.records) }

func (s *memorySink) callCount() int { s.mu.Lock(); defer s.mu.Unlock(); return s.calls }

// deliveredMoreThanOnce lists the request ids stored more than once.
func (s *memorySink) deliveredMoreThanOnce() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, n := range s.delivered {
		if n > 1 {
			out = append(out, id)
		}
	}
	return out
}

// notifyingSink is a memorySink that tells the ledger when it answers again.
type notifyingSink struct{ *memorySink }

func (s notifyingSink) Recovered() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recovered
}

func record(i int) *Record {
	return &Record{RequestID: fmt.Sprintf("sy_%06d", i), KeyID: "key_a", Model: "m", Usage: Usage{Input: 10, Output: int64(i)}, Time: time.Unix(1_800_000_000, 0)}
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
	eventually(t, "the replay", func() bool { return sink.count() == 51 })
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

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// Appends from many goroutines at once share writes to the journal, and each record is
// still journaled whole, once, and delivered once, whether the writer takes it from
// memory or reads it back.
func TestConcurrentAppendsAreEachJournaledOnce(t *testing.T) {
	sink := newMemorySink()
	dir := t.TempDir()
	l, err := OpenLedger(context.Background(), dir, sink, Options{Interval: 5 * time.Millisecond, BatchRecords: 64})
	require.NoError(t, err)
	const writers, each = 16, 250
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				assert.NoError(t, l.Append(record(w*each+i)))
			}
		}()
	}
	wg.Wait()
	eventually(t, "every record", func() bool { return sink.count() == writers*each })
	assert.Empty(t, sink.deliveredMoreThanOnce())
	require.NoError(t, l.Close())

	// The journal holds one whole line per record, none twice.
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
			var r Record
			require.NoError(t, json.Unmarshal(line, &r), "a journal line is not a record: %q", line)
			assert.False(t, seen[r.RequestID], "journaled twice: %s", r.RequestID)
			seen[r.RequestID] = true
		}
	}
	assert.Len(t, seen, writers*each)
}
