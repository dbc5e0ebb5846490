package metering

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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

// A line in the middle of the journal that is not a record (cut short, or overwritten
// with other bytes) is copied to damaged.jsonl beside the journal, with its position,
// reported once, and passed over: the records after it are delivered. Writes failing
// just after the set-aside make the ledger read the damaged lines again, which must
// neither copy them twice nor report them twice; nor must a restart.
func TestADamagedJournalLineIsSetAsideAndTheRestDelivered(t *testing.T) {
	dir, sink := t.TempDir(), newMemorySink()
	sink.setDown(true)
	first, err := OpenLedger(context.Background(), dir, sink, Options{Interval: time.Hour})
	require.NoError(t, err)
	for i := range 30 {
		require.NoError(t, first.Append(record(i)))
	}
	require.NoError(t, first.Close())

	// Damage the journal: after record 9 a record cut short, after record 19 a line of
	// bytes that are not text, after record 24 a valid JSON value that is no record.
	segs, err := filepath.Glob(filepath.Join(dir, segmentPrefix+"*"+segmentSuffix))
	require.NoError(t, err)
	require.Len(t, segs, 1)
	orig, err := os.ReadFile(segs[0])
	require.NoError(t, err)
	lines := bytes.SplitAfter(orig, []byte{'\n'})
	require.Len(t, lines, 31) // 30 lines and the empty rest
	damage := map[int][]byte{
		10: []byte(`{"request_id":"sy_cut","key_id":"key_a","mod` + "\n"),
		20: []byte("\x00\xff\xfe\x01garbage\x00\x00\n"),
		25: []byte("null\n"),
	}
	var journal []byte
	var wantDamaged [][]byte
	for i, line := range lines {
		if d, ok := damage[i]; ok {
			journal = append(journal, d...)
			wantDamaged = append(wantDamaged, d)
		}
		journal = append(journal, line...)
	}
	require.NoError(t, os.WriteFile(segs[0], journal, 0o600))

	var logs logCounter
	sink.setDown(false)
	sink.mu.Lock()
	// The batch after the last damaged line fails a few times, so the ledger reads
	// damaged lines again after it has set them aside.
	sink.failHolding, sink.failHoldingN = record(25).RequestID, 3
	sink.mu.Unlock()
	second, err := OpenLedger(context.Background(), dir, sink, Options{Interval: 10 * time.Millisecond, BatchRecords: 8, OnError: logs.add})
	require.NoError(t, err)
	eventually(t, "the journal to drain", func() bool { return sink.count() == 30 && second.Stats().PendingBytes == 0 })
	require.NoError(t, second.Close())
	assertEachDeliveredOnce(t, sink, 30)

	got := damagedLines(t, dir)
	require.Len(t, got, len(wantDamaged), "each damaged line set aside once")
	for i, d := range got {
		assert.Equal(t, wantDamaged[i], d.Bytes, "damaged line %d copied byte for byte", i)
		assert.Equal(t, d.Bytes, journal[d.Position:d.Position+int64(len(d.Bytes))], "its position in the journal")
	}
	assert.Equal(t, 3, logs.count("damaged"), "each damaged line reported once:\n%s", logs.all())
	assert.NotContains(t, logs.all(), "garbage", "the damaged bytes are in the file, not in the log")

	// A restart does not set them aside again.
	third, err := OpenLedger(context.Background(), dir, sink, Options{Interval: 10 * time.Millisecond, OnError: logs.add})
	require.NoError(t, err)
	require.NoError(t, third.Append(record(30)))
	eventually(t, "the new record", func() bool { return sink.count() == 31 && third.Stats().PendingBytes == 0 })
	require.NoError(t, third.Close())
	assert.Len(t, damagedLines(t, dir), 3)
	assert.Equal(t, 3, logs.count("damaged"))
	assertEachDeliveredOnce(t, sink, 31)
}

// damagedLines reads damaged.jsonl in dir.
func damagedLines(t *testing.T, dir string) []damagedLine {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, damagedFile))
	require.NoError(t, err)
	defer f.Close()
	var out []damagedLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var d damagedLine
		require.NoError(t, json.Unmarshal(sc.Bytes(), &d), "damaged.jsonl holds JSON lines")
		out = append(out, d)
	}
	require.NoError(t, sc.Err())
	return out
}
