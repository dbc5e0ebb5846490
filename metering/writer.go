package metering

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"sort"
	"time"
	"unicode/utf8"
)

// The writer: a goroutine per ledger that moves journal lines into the Sink in batches,
// from memory while it keeps up and from the journal files after a restart or a long
// outage, and removes segments the database has whole.

// Sink is the database side of the ledger.
type Sink interface {
	// WriteUsage stores records, ignoring request ids it already has, and in the same
	// transaction records that journal journalID has been written up to position upTo.
	// Either all of it is stored or nothing is. When the database refused the batch
	// because of what one of its records holds (a constraint or data error on a row),
	// the error wraps ErrRecordRefused; any other error (no connection, a database that
	// takes no writes, a timeout) says nothing about the records, which are tried again.
	WriteUsage(ctx context.Context, journalID string, upTo int64, records []Record) error
	// JournalPosition is how far journal journalID has been written (0 if never).
	JournalPosition(ctx context.Context, journalID string) (int64, error)
}

// ErrRecordRefused marks a Sink error caused by the records of the batch themselves:
// writing the same records again would fail again, whatever state the database is in.
var ErrRecordRefused = errors.New("the database refused a usage record")

// RecoveryNotifier is a Sink that can tell when it answers again after failing. The
// ledger then writes at once instead of waiting out its back-off.
type RecoveryNotifier interface {
	// Recovered returns a channel closed at the next recovery.
	Recovered() <-chan struct{}
}

const (
	// After a failed write the writer waits minBackoff, doubling up to maxBackoff, so a
	// database that comes back is written to within a second or so (at once when
	// the sink says it has recovered). A failed attempt costs one round trip.
	minBackoff = 250 * time.Millisecond
	maxBackoff = time.Second
	// writeTimeout bounds one batch's write, so a database that stops answering
	// without closing the connection cannot stall the writer.
	writeTimeout = 15 * time.Second
)

// run moves the journal into the sink until Close.
func (l *Ledger) run(batch int, interval time.Duration, segBytes int64) {
	defer close(l.done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	backoff := time.Duration(0)
	failing := false
	for {
		select {
		case <-l.stop:
			l.drain(batch, l.drainLimit)
			return
		case <-tick.C:
		case <-l.kick:
		}
		if backoff > 0 {
			wait := time.NewTimer(backoff)
			select {
			case <-l.stop:
				wait.Stop()
				l.drain(batch, l.drainLimit)
				return
			case <-wait.C:
			case <-l.recovered():
				wait.Stop()
			}
		}
		err := l.flush(l.halt, batch, segBytes)
		if l.halt.Err() != nil {
			// Close abandoned this write; its drain tries once more.
			l.drain(batch, l.drainLimit)
			return
		}
		l.statsMu.Lock()
		l.lastErr = err
		l.statsMu.Unlock()
		if err == nil {
			backoff, failing = 0, false
			continue
		}
		backoff = min(max(2*backoff, minBackoff), maxBackoff)
		if !failing {
			// Once per run of failures: a database outage would otherwise fill the log
			// with the same line every few seconds.
			failing = true
			l.log("writing usage to the database; records stay in the journal until it answers", err)
		}
	}
}

// recovered is the sink's recovery signal, or nil (never ready) when it gives none.
func (l *Ledger) recovered() <-chan struct{} {
	if n, ok := l.sink.(RecoveryNotifier); ok {
		return n.Recovered()
	}
	return nil
}

// drain writes what is left, for a bounded time (shutdown and reload).
func (l *Ledger) drain(batch int, limit time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for ctx.Err() == nil {
		err := l.flush(ctx, batch, 0)
		if err == nil {
			if l.pendingBytes() == 0 {
				return
			}
			continue
		}
		l.log("writing usage at shutdown; records stay in the journal for the next start", err)
		return
	}
}

func (l *Ledger) pendingBytes() int64 {
	l.mu.Lock()
	written := l.written
	l.mu.Unlock()
	l.statsMu.Lock()
	defer l.statsMu.Unlock()
	return written - l.committed
}

// flush writes everything appended so far, batch by batch, and removes segments that are
// entirely in the database. segBytes > 0 lets it start a new segment.
func (l *Ledger) flush(ctx context.Context, batch int, segBytes int64) error {
	l.mu.Lock()
	written := l.written
	if segBytes > 0 && written-l.segBase >= segBytes {
		// Start a new segment; the old one is removed once it is all in the database.
		_ = l.seg.Close()
		l.segBase = written
		if err := l.openSegment(); err != nil {
			l.mu.Unlock()
			return err
		}
	}
	l.mu.Unlock()

	l.statsMu.Lock()
	from := l.committed
	l.statsMu.Unlock()
	for from < written {
		records, ends, lines, upTo, ok := l.takeRecent(from, written, batch)
		var damaged []damagedLine
		if !ok {
			var err error
			if records, ends, lines, damaged, upTo, err = l.read(from, written, batch); err != nil {
				return err
			}
		}
		// Damaged lines are copied aside before the position moves past them.
		if err := l.setAsideDamaged(damaged); err != nil {
			return err
		}
		if err := l.write(ctx, records, ends, lines, upTo); err != nil {
			return err
		}
		from = upTo
	}
	return l.removeCommittedSegments(from)
}

// write stores one batch read from the journal, ending at position upTo. A batch the
// database refuses because of a record in it is split in halves, and each half written
// on its own, down to the single records it refuses: those are set aside in the
// dead-letter file and the position moves past them, so that one record the database
// will never take cannot hold back all billing after it. Any other failure (the
// database not answering, or taking no writes) says nothing about the records: the
// error is returned and the batch is tried again later, with nothing set aside.
func (l *Ledger) write(ctx context.Context, records []Record, ends []int64, lines [][]byte, upTo int64) error {
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	err := l.sink.WriteUsage(wctx, l.id, upTo, records)
	cancel()
	switch {
	case err == nil:
		l.advance(upTo)
		return nil
	case !errors.Is(err, ErrRecordRefused):
		return err
	case len(records) <= 1:
		return l.setAside(ctx, records, lines, upTo, err)
	}
	half := len(records) / 2
	if err := l.write(ctx, records[:half], ends[:half], lines[:half], ends[half-1]); err != nil {
		return err
	}
	return l.write(ctx, records[half:], ends[half:], lines[half:], upTo)
}

// advance records that the journal is in the database up to pos.
func (l *Ledger) advance(pos int64) {
	l.statsMu.Lock()
	l.committed = max(l.committed, pos)
	l.statsMu.Unlock()
}

// takeRecent returns up to batch records starting exactly at journal position from (and
// ending by to) from the records kept in memory, dropping those before from, which are
// in the database. ok is false when the record at from is no longer in memory.
func (l *Ledger) takeRecent(from, to int64, batch int) (records []Record, ends []int64, lines [][]byte, upTo int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := sort.Search(len(l.recent), func(i int) bool { return l.recent[i].start >= from })
	if i > 0 {
		l.recent = append(l.recent[:0], l.recent[i:]...)
	}
	if len(l.recent) == 0 || l.recent[0].start != from {
		return nil, nil, nil, 0, false
	}
	n := 0
	for n < len(l.recent) && n < batch && l.recent[n].end <= to {
		n++
	}
	if n == 0 {
		return nil, nil, nil, 0, false
	}
	records, ends, lines = make([]Record, n), make([]int64, n), make([][]byte, n)
	for j, r := range l.recent[:n] {
		records[j], ends[j], lines[j] = r.rec, r.end, r.line
	}
	return records, ends, lines, ends[n-1], true
}

// textValid reports whether the record's text fields are valid UTF-8. The journal's
// JSON replaces invalid bytes, so only a valid record is the same in memory as in the
// journal; any other is left for the writer to read from the journal.
func (r *Record) textValid() bool {
	for _, s := range []string{r.RequestID, r.KeyID, r.ProjectID, r.Model, r.Candidate, r.Channel, r.Protocol, r.Operation} {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

// read parses up to batch records from position from (but not beyond to). Lines that
// are not records are returned in damaged.
func (l *Ledger) read(from, to int64, batch int) (records []Record, ends []int64, lines [][]byte, damaged []damagedLine, upTo int64, err error) {
	segs, err := l.segments()
	if err != nil {
		return nil, nil, nil, nil, 0, err
	}
	pos := from
	for i, base := range segs {
		end := to
		if i+1 < len(segs) {
			end = min(end, segs[i+1])
		}
		if pos >= end || base > pos {
			continue
		}
		f, err := os.Open(l.segPath(base))
		if err != nil {
			return nil, nil, nil, nil, 0, err
		}
		r := bufio.NewReaderSize(io.NewSectionReader(f, pos-base, end-pos), 64<<10)
		for len(records) < batch {
			line, err := r.ReadBytes('\n')
			if err != nil {
				break // the rest belongs to a record still being written, or the segment ended
			}
			start := pos
			pos += int64(len(line))
			var rec Record
			if err := json.Unmarshal(line, &rec); err != nil || rec.RequestID == "" || rec.Time.IsZero() {
				// Not a record Append wrote: set aside rather than block the ledger.
				if err == nil {
					err = errors.New("a usage record needs a request id and a time")
				}
				damaged = append(damaged, damagedLine{Position: start, Bytes: line, cause: err})
				continue
			}
			records = append(records, rec)
			ends = append(ends, pos)
			lines = append(lines, line)
		}
		f.Close()
		if len(records) >= batch {
			break
		}
	}
	return records, ends, lines, damaged, pos, nil
}

func (l *Ledger) removeCommittedSegments(committed int64) error {
	segs, err := l.segments()
	if err != nil {
		return err
	}
	l.mu.Lock()
	current := l.segBase
	l.mu.Unlock()
	for i, base := range segs {
		if base == current || i+1 >= len(segs) || segs[i+1] > committed {
			continue
		}
		_ = os.Remove(l.segPath(base))
	}
	return nil
}
