package metering

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Record is one metered request.
type Record struct {
	RequestID string `json:"request_id"`
	KeyID     string `json:"key_id"`
	// ProjectID is the key's project when the request was made; empty: none. Journal
	// lines written before it existed have none.
	ProjectID string `json:"project_id,omitempty"`
	Model     string `json:"model"`
	Candidate string `json:"candidate"`
	// Channel is how the candidate was reached: "api" (the family's own API),
	// "bedrock", "vertex" or "azure". Journal lines written before it existed have none,
	// which the stores take as "api".
	Channel   string `json:"channel,omitempty"`
	Protocol  string `json:"protocol"`
	Operation string `json:"operation"`
	Status    int    `json:"status"`
	Usage
	CostMicros int64     `json:"cost_micros"`
	LatencyMs  int64     `json:"latency_ms"`
	TTFBMs     int64     `json:"ttfb_ms"`
	Attempts   int       `json:"attempts"`
	Time       time.Time `json:"time"`
	// Outcome is how the request ended when no answer was served: OutcomeRefused (a
	// limit of the gateway's refused it, RefusedBy names which) or OutcomeFailed (no
	// candidate answered). Empty: an answer was served, the only kind counted in usage.
	// Journal lines written before it existed are all served answers.
	Outcome   string `json:"outcome,omitempty"`
	RefusedBy string `json:"refused_by,omitempty"`
	// Tries are the upstream attempts in the order they were made, for the request log.
	Tries []Try `json:"tries,omitempty"`
}

// The outcomes of a request that was not served (see Record.Outcome).
const (
	OutcomeServed  = "served"
	OutcomeRefused = "refused"
	OutcomeFailed  = "failed"
	// OutcomeStreamError is a stream that reached the client and ended in an error event
	// (see Try.StreamError). It is stored as served, and billed as such: the client had
	// the answer's start and the upstream did the work. The request log shows it apart.
	OutcomeStreamError = "stream_error"
)

// Try is one upstream attempt of a request, as the request log shows it.
type Try struct {
	Candidate string `json:"candidate"`
	// Retry is which retry on its candidate it was (0: the first try); WaitMs the
	// back-off waited before it.
	Retry  int   `json:"retry,omitempty"`
	WaitMs int64 `json:"wait_ms,omitempty"`
	// Reason is why the gateway moved on from it (a failover reason); empty for the
	// attempt that served the request.
	Reason     string `json:"reason,omitempty"`
	Status     int    `json:"status,omitempty"`
	DurationMs int64  `json:"duration_ms"`
	// StreamError, on the attempt whose stream reached the client, is why that stream
	// ended in an error event: upstream_error (the upstream's own), malformed_event,
	// oversized_event, stalled, interrupted or shutdown.
	StreamError string `json:"stream_error,omitempty"`
}

// Ledger keeps usage records without losing any. Append writes each record to a local
// journal (one write call, so it survives the process being killed), and a background
// writer moves the journal into the Sink in batches, remembering in the same transaction
// how far it got. When the database is away, the journal simply grows (the spill file)
// and is replayed on recovery; a restart resumes where the database says it stopped.
type Ledger struct {
	dir   string
	id    string
	sink  Sink
	log   func(string, error)
	lock  io.Closer // held while open: one gateway per journal
	batch int       // records per database batch

	// queue holds Appends waiting for the journal's write (see Append); spare is the
	// slice the next queue reuses. queueMu guards queue alone and is not mu because an
	// Append must be able to queue while another holds mu through the write call: that
	// is how one write carries many lines.
	queueMu sync.Mutex
	queue   []*queuedAppend

	// mu guards the journal file and the fields below up to recent; it is held through
	// each write call to the journal.
	mu        sync.Mutex
	spare     []*queuedAppend
	writeBuf  []byte // the combined lines of one write
	seg       *os.File
	unflushed int   // records appended since the writer was last woken
	segBase   int64 // journal position where the current segment starts
	written   int64 // journal position after the last appended record
	closed    bool
	// recent holds the records appended since the writer last caught up, in journal
	// order, so that it can move them without reading the journal back and decoding it
	// (that read-back was a fifth of the ledger's CPU under load). At most maxRecent are
	// kept: past that, during a long database outage, the writer reads the journal as
	// it does after a restart.
	recent    []recentRecord
	maxRecent int

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
	// drainLimit bounds how long Close goes on writing what is left.
	drainLimit time.Duration

	// halt is cancelled by Close, so that a write waiting on a database that stopped
	// answering is abandoned at once and Close's own drain begins.
	halt       context.Context
	cancelHalt context.CancelFunc

	// statsMu guards what the writer has stored. It is not mu so that the writer's
	// progress and Stats (read by every metrics scrape) never wait on a journal write.
	statsMu   sync.Mutex
	committed int64 // journal position known to be in the sink
	lastErr   error

	// The set-aside files' indexes need no lock: only the writer goroutine reaches
	// them (flush runs in run and its drain, nowhere else).
	refusedIDs map[string]bool // request ids already in the dead-letter file; nil until read
	damagedAt  map[int64]bool  // journal positions already in the damaged-lines file; nil until read
}

// recentRecord is a record as Append journaled it: its line and where the line ends.
type recentRecord struct {
	rec        Record
	start, end int64
	line       []byte
}

// Options tune a ledger.
type Options struct {
	// BatchRecords and Interval bound how long a record waits for the database.
	BatchRecords int
	Interval     time.Duration
	// SegmentBytes is the size at which a new journal segment is started.
	SegmentBytes int64
	// OnError hears about failures: a record the database refused (set aside in
	// refused.jsonl), a damaged journal line (set aside in damaged.jsonl), the
	// journal's own file errors, and the first failed write to the
	// database of each run of failures (the ledger keeps the records meanwhile and does
	// not repeat itself until a write has succeeded again).
	OnError func(what string, err error)
}

const (
	defaultBatch    = 1000
	defaultInterval = 200 * time.Millisecond
	defaultSegment  = 32 << 20
	segmentPrefix   = "usage-"
	segmentSuffix   = ".jsonl"
	// positionTimeout bounds reading the journal position at open.
	positionTimeout = 5 * time.Second
	// drainTimeout bounds Close's last attempt to write what is left.
	drainTimeout = 10 * time.Second
)

// OpenLedger opens (or creates) the journal in dir and starts writing it to sink.
func OpenLedger(ctx context.Context, dir string, sink Sink, opts Options) (*Ledger, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	id, err := journalID(dir)
	if err != nil {
		lock.Close()
		return nil, err
	}
	l := &Ledger{dir: dir, id: id, sink: sink, log: opts.OnError, lock: lock,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), drainLimit: drainTimeout}
	l.halt, l.cancelHalt = context.WithCancel(context.Background())
	if l.log == nil {
		l.log = func(string, error) {}
	}
	segs, err := l.segments()
	if err != nil {
		return nil, err
	}
	// Resume at the end of the journal; a torn last line (a kill during a write) is cut.
	if len(segs) > 0 {
		last := segs[len(segs)-1]
		size, err := cutTornTail(l.segPath(last))
		if err != nil {
			return nil, err
		}
		l.segBase, l.written = last, last+size
	}
	if err := l.openSegment(); err != nil {
		return nil, err
	}
	posCtx, cancel := context.WithTimeout(ctx, positionTimeout)
	pos, err := sink.JournalPosition(posCtx, id)
	cancel()
	if err != nil {
		// The database may be down at start: replay everything kept; duplicates are
		// ignored by request id.
		l.log("reading the ledger position", err)
		pos = 0
	}
	if len(segs) > 0 && pos < segs[0] {
		pos = segs[0]
	}
	l.committed = pos
	batch, interval := opts.BatchRecords, opts.Interval
	if batch <= 0 {
		batch = defaultBatch
	}
	l.batch = batch
	l.maxRecent = 4 * batch
	if interval <= 0 {
		interval = defaultInterval
	}
	segBytes := opts.SegmentBytes
	if segBytes <= 0 {
		segBytes = defaultSegment
	}
	go l.run(batch, interval, segBytes)
	return l, nil
}

// journalID names this gateway's journal in the shared database; it is kept beside the
// journal so a restart continues the same one.
func journalID(dir string) (string, error) {
	path := filepath.Join(dir, "journal.id")
	if b, err := os.ReadFile(path); err == nil && len(bytes.TrimSpace(b)) > 0 {
		return string(bytes.TrimSpace(b)), nil
	}
	var r [12]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	host, _ := os.Hostname()
	id := host + "-" + hex.EncodeToString(r[:])
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", err
	}
	return id, nil
}

func (l *Ledger) segPath(base int64) string {
	return filepath.Join(l.dir, fmt.Sprintf("%s%016d%s", segmentPrefix, base, segmentSuffix))
}

// segments lists the journal segments by their starting position.
func (l *Ledger) segments() ([]int64, error) {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return nil, err
	}
	var out []int64
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, segmentPrefix) || !strings.HasSuffix(name, segmentSuffix) {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(name, segmentPrefix), segmentSuffix), 10, 64)
		if err == nil {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// cutTornTail truncates a segment after its last complete line and returns its size.
func cutTornTail(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	keep := int64(bytes.LastIndexByte(b, '\n') + 1)
	if keep != int64(len(b)) {
		if err := os.Truncate(path, keep); err != nil {
			return 0, err
		}
	}
	return keep, nil
}

func (l *Ledger) openSegment() error {
	f, err := os.OpenFile(l.segPath(l.segBase), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	l.seg = f
	return nil
}

// ErrClosed is returned by Append after Close.
var ErrClosed = errors.New("the usage ledger is closed")

// Append puts a record in the journal. When it returns without error the record will
// reach the database, whatever happens to this process afterwards.
//
// Appends that arrive together share one write: each queues its line, then takes the
// journal's lock, and whoever holds the lock writes every line queued so far in one
// call. An Append whose line a previous holder wrote finds it done and returns. Either
// way the kernel has the line before Append returns; only the count of write calls
// changes (one per record was the gateway's one system call per request more than a
// plain proxy makes).
func (l *Ledger) Append(r *Record) error {
	if r.RequestID == "" || r.Time.IsZero() {
		return errors.New("a usage record needs a request id and a time")
	}
	line, err := appendJournalLine(make([]byte, 0, 384), r)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	a := &queuedAppend{rec: r, line: line}
	l.queueMu.Lock()
	l.queue = append(l.queue, a)
	l.queueMu.Unlock()

	l.mu.Lock()
	defer l.mu.Unlock()
	if !a.done {
		l.writeQueued()
	}
	return a.err
}

// queuedAppend is a record waiting for the journal's write. done and err are set under mu.
type queuedAppend struct {
	rec  *Record
	line []byte
	done bool
	err  error
}

// writeQueued writes every queued line in one call and settles each Append. mu is held.
func (l *Ledger) writeQueued() {
	l.queueMu.Lock()
	queue := l.queue
	l.queue = l.spare[:0]
	l.queueMu.Unlock()
	l.spare = queue[:0] // the next writeQueued reuses this one; only mu's holder touches it
	defer clear(queue)  // the records and lines are not kept alive through the spare

	if l.closed {
		for _, a := range queue {
			a.done, a.err = true, ErrClosed
		}
		return
	}
	buf := l.writeBuf[:0]
	for _, a := range queue {
		buf = append(buf, a.line...)
	}
	if cap(buf) <= maxJournalWriteBuf {
		l.writeBuf = buf
	}
	start := l.written
	n, err := l.seg.Write(buf) // one write call: the kernel keeps it if we are killed
	l.written += int64(n)
	if err != nil {
		// A torn line is the journal's to judge (as damaged) when the writer reads it.
		l.recent = l.recent[:0]
	}
	for _, a := range queue {
		end := start + int64(len(a.line))
		a.done = true
		if end > l.written {
			a.err = err // not all of it reached the journal
		} else if err == nil {
			l.noteRecent(a, start, end)
		}
		start = end
	}
	// The writer runs on its interval; it is woken early only when a full batch waits.
	// Waking it on every record made a database transaction (with its commit) every few
	// milliseconds under load, which the load benchmark showed in CPU and in p99.
	if l.unflushed += len(queue); l.unflushed >= l.batch {
		l.unflushed = 0
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

// maxJournalWriteBuf is the largest combined write buffer the ledger keeps for the next.
const maxJournalWriteBuf = 256 << 10

// noteRecent keeps a record just journaled for the writer to take from memory.
func (l *Ledger) noteRecent(a *queuedAppend, start, end int64) {
	if len(l.recent) >= l.maxRecent {
		// The database is far behind: keep the newest half, the journal has the rest.
		l.recent = append(l.recent[:0], l.recent[len(l.recent)/2:]...)
	}
	if a.rec.textValid() {
		l.recent = append(l.recent, recentRecord{rec: *a.rec, start: start, end: end, line: a.line})
	}
}

// Stats is the ledger's state for metrics and tests.
type Stats struct {
	JournalID    string
	PendingBytes int64 // appended but not yet in the database
	LastError    error
}

// Stats reads the ledger's state.
func (l *Ledger) Stats() Stats {
	pending := l.pendingBytes()
	l.statsMu.Lock()
	defer l.statsMu.Unlock()
	return Stats{JournalID: l.id, PendingBytes: pending, LastError: l.lastErr}
}

// Close stops appending, writes what is left (for at most 10 s: a write already waiting
// on the database is abandoned at once; what does not make it stays in the journal for
// the next start) and closes the journal.
func (l *Ledger) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.cancelHalt()
	close(l.stop)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.seg.Close()
	l.lock.Close()
	return err
}
