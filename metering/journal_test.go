package metering

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	eventually(t, "the other records", func() bool { return sink.count() == 99 })
	require.NoError(t, l.Close())
	assert.Equal(t, []string{"sy_000037"}, refusedIDs(t, dir), "only the refused record is set aside, once")
	assert.Empty(t, sink.deliveredMoreThanOnce())
	assert.Zero(t, l.Stats().PendingBytes)

	assert.Error(t, (&Ledger{}).Append(&Record{}), "a record without a request id is refused at once")
}

// A refused record is set aside once even when moving the position past it fails and
// the batch is read again.
func TestARefusedRecordIsSetAsideOnce(t *testing.T) {
	dir, sink := t.TempDir(), newMemorySink()
	sink.failEmpty = 3
	l, err := OpenLedger(context.Background(), dir, sink, Options{Interval: 10 * time.Millisecond})
	require.NoError(t, err)
	for i := 0; i < 10; i++ {
		r := record(i)
		if i == 4 {
			r.Model = "poison"
		}
		require.NoError(t, l.Append(r))
	}
	eventually(t, "the journal to drain", func() bool { return sink.count() == 9 && l.Stats().PendingBytes == 0 })
	require.NoError(t, l.Close())
	assert.Equal(t, []string{"sy_000004"}, refusedIDs(t, dir))
	assert.Empty(t, sink.deliveredMoreThanOnce())
}

// The case: a database that refuses writes while reads succeed. Nothing it
// refuses that way is the records' fault, so nothing may be set aside; once it takes
// writes again every record is stored once.
func TestNothingIsSetAsideWhileTheDatabaseTakesNoWrites(t *testing.T) {
	dir, sink := t.TempDir(), newMemorySink()
	sink.noWrites = true
	l, err := OpenLedger(context.Background(), dir, sink, Options{Interval: 10 * time.Millisecond, BatchRecords: 8})
	require.NoError(t, err)
	for i := 0; i < 40; i++ {
		require.NoError(t, l.Append(record(i)))
	}
	eventually(t, "several failed writes", func() bool { return sink.callCount() >= 4 })
	sink.mu.Lock()
	sink.noWrites = false
	sink.mu.Unlock()
	eventually(t, "the journal to drain", func() bool { return sink.count() == 40 && l.Stats().PendingBytes == 0 })
	require.NoError(t, l.Close())
	assert.Empty(t, refusedIDs(t, dir), "nothing in refused.jsonl")
	assert.Empty(t, sink.deliveredMoreThanOnce())
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

// refusedIDs lists the request ids in the dead-letter file, in its order.
func refusedIDs(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "refused.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r Record
		require.NoError(t, json.Unmarshal([]byte(line), &r))
		ids = append(ids, r.RequestID)
	}
	return ids
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
