package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/metering"
)

// ErrUnavailable is returned while the database has not been reached yet (a gateway
// that started during an outage keeps trying in the background).
var ErrUnavailable = errors.New("store: the database has not been reached yet")

// Outage is what a store tells its owner when the database stops or starts answering.
// Reads and writes are followed apart: a database may refuse writes while reads
// succeed. An outage starts at the first failure of either and ends once every kind
// that failed has succeeded again, so it is reported once each way, not per call.
type Outage struct {
	// Down is true when the outage starts, false when it ends.
	Down bool
	// Failing says what failed: "reads", "writes", or "reads and writes".
	Failing string
	// Err is the failure that started it (Down only).
	Err error
	// Lasted is how long it lasted (when it ends).
	Lasted time.Duration
}

// call kinds followed by the health tracker.
const (
	kindRead = iota
	kindWrite
	kinds
)

var kindNames = [kinds]string{"reads", "writes"}

// health follows whether the database answers, from the outcome of every call.
type health struct {
	notify func(Outage) // nil: nobody listens

	mu        sync.Mutex
	failing   [kinds]bool
	everFail  [kinds]bool // kinds that failed during the current outage
	since     time.Time   // start of the current outage; zero when there is none
	recovered chan struct{}
}

func newHealth(notify func(Outage)) *health {
	return &health{notify: notify, recovered: make(chan struct{})}
}

// observe records the outcome of a call of the given kind. Errors that show the
// database answered (a missing key, a conflict, a record it refused) count as
// successes; a call the caller gave up on counts as nothing.
func (h *health) observe(ctx context.Context, kind int, err error) {
	if err != nil && ctx.Err() != nil {
		return
	}
	ok := err == nil || answered(err)
	var event *Outage
	h.mu.Lock()
	switch {
	case !ok && !h.failing[kind]:
		h.failing[kind], h.everFail[kind] = true, true
		if h.since.IsZero() {
			h.since = time.Now()
			event = &Outage{Down: true, Failing: kindNames[kind], Err: err}
		}
	case ok && h.failing[kind]:
		h.failing[kind] = false
		close(h.recovered) // wake whoever waits for the database (the usage ledger)
		h.recovered = make(chan struct{})
		if !h.failing[kindRead] && !h.failing[kindWrite] {
			var what []string
			for k := range kinds {
				if h.everFail[k] {
					what = append(what, kindNames[k])
				}
			}
			event = &Outage{Failing: strings.Join(what, " and "), Lasted: time.Since(h.since)}
			h.since, h.everFail = time.Time{}, [kinds]bool{}
		}
	}
	h.mu.Unlock()
	if event != nil && h.notify != nil {
		h.notify(*event)
	}
}

// down marks every kind as failing: the database could not be reached at all.
func (h *health) down(err error) {
	h.mu.Lock()
	started := h.since.IsZero()
	if started {
		h.since = time.Now()
	}
	for k := range kinds {
		h.failing[k], h.everFail[k] = true, true
	}
	h.mu.Unlock()
	if started && h.notify != nil {
		h.notify(Outage{Down: true, Failing: "reads and writes", Err: err})
	}
}

// up marks every kind as answering: the database was just opened.
func (h *health) up() {
	h.observe(context.Background(), kindRead, nil)
	h.observe(context.Background(), kindWrite, nil)
}

// recoveredChan is closed when a kind of call that was failing succeeds again.
func (h *health) recoveredChan() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.recovered
}

// answered reports an error that the database itself gave about the request, as opposed
// to not answering it.
func answered(err error) bool {
	return errors.Is(err, auth.ErrNotFound) || errors.Is(err, auth.ErrConflict) || errors.Is(err, metering.ErrRecordRefused)
}

// rowRefusal reports an error caused by the values of a row: writing the same row again
// would fail again whatever the database's state. PostgreSQL: data exceptions (class 22:
// a NUL or invalid UTF-8 in text, a number out of range), integrity constraint
// violations (class 23: a NULL in a NOT NULL column, a failed CHECK) and a row or index
// entry too large (54000). SQLite: constraint failures, a value too big, a type
// mismatch. A read-only or full database, a lost connection, a lock timeout or a
// missing permission are not: they say nothing about the row.
func rowRefusal(err error) bool {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		return strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23") || pe.Code == "54000"
	}
	if se, ok := errors.AsType[*sqlite.Error](err); ok {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_CONSTRAINT, sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_MISMATCH:
			return true
		}
	}
	return false
}
