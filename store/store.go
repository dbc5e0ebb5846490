// Package store keeps Switchyard's shared state in a database: API keys, projects and
// their limits, the audit trail and the usage ledger. Two drivers give the same tables and the same behaviour:
//
//   - "sqlite": an embedded SQLite file (pure Go, no cgo). The default: one gateway, or
//     several processes on one host sharing the file.
//   - "postgres": a PostgreSQL database, for several gateways on different hosts.
//
// A *Store implements auth.KeyStore, auth.AuditedKeyStore and auth.ProjectStore (see
// projects.go), metering.Sink and metering.Reader for usage (see usage.go), the limits'
// seeding by Spend, and access.Store for people, sessions and API tokens (people.go). The schema is created and upgraded by migrations embedded in the
// binary and applied by Open.
package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/metering"
)

// The drivers Open accepts.
const (
	DriverSQLite   = "sqlite"
	DriverPostgres = "postgres"
)

// ErrConflict is returned when a write would break a uniqueness rule: a key id or key
// hash that is already stored, or the rotation of a key that was already replaced.
var ErrConflict = fmt.Errorf("store: %w", auth.ErrConflict)

// maxPrefixLen bounds a key's display prefix (auth.DisplayPrefix gives 12 characters):
// a longer one is more of the secret than a list needs, and is refused.
const maxPrefixLen = 16

// maxIDLen bounds a key id (auth.NewKeyID gives 20 characters).
const maxIDLen = 64

// Store is a key and usage store on SQLite or PostgreSQL. It is safe for concurrent use.
type Store struct {
	driver string
	ref    atomic.Pointer[backendRef] // nil until the database has been reached
	health *health

	closeOnce sync.Once
	stop      chan struct{} // closed by Close
	opening   chan struct{} // closed when background opening has ended; nil without it
}

type backendRef struct{ backend }

var _ auth.KeyStore = (*Store)(nil)

// Open connects to the database and brings its schema up to date.
//
// For "sqlite", dsn is the path of the database file; missing parent directories are
// created, and a new file is readable by its owner only. The file is put in WAL mode,
// so readers never wait for the writer, and a busy timeout lets writers from several
// processes queue for the file lock. Keep it on a local file system.
//
// For "postgres", dsn is a libpq connection string, either a URL
// ("postgres://user:pass@host:5432/db?sslmode=verify-full") or key=value pairs
// ("host=db user=switchyard dbname=switchyard"). pgxpool settings such as
// pool_max_conns may be given in it; otherwise the pool keeps at most 8 connections and
// at least 1 (for the cache's polling). Tables go in the connection's current schema
// (set search_path in the DSN to choose another).
func Open(ctx context.Context, driver, dsn string) (*Store, error) {
	b, err := openBackend(ctx, driver, dsn)
	if err != nil {
		return nil, err
	}
	s := &Store{driver: driver, health: newHealth(nil), stop: make(chan struct{})}
	s.ref.Store(&backendRef{b})
	return s, nil
}

func openBackend(ctx context.Context, driver, dsn string) (backend, error) {
	var (
		b   backend
		err error
	)
	switch driver {
	case DriverSQLite:
		b, err = openSQLite(ctx, dsn)
	case DriverPostgres:
		b, err = openPostgres(ctx, dsn)
	default:
		return nil, fmt.Errorf("store: unknown driver %q (want %q or %q)", driver, DriverSQLite, DriverPostgres)
	}
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", driver, err)
	}
	migrations, err := loadMigrations(driver)
	if err == nil {
		err = b.migrate(ctx, migrations)
	}
	if err != nil {
		_ = b.close()
		return nil, fmt.Errorf("store: migrate %s: %w", driver, err)
	}
	return b, nil
}

// Options tune Connect.
type Options struct {
	// Retry is how often a database not reached yet is tried again (default 250 ms,
	// the key cache's poll).
	Retry time.Duration
	// AttemptTimeout bounds each attempt to reach it (default 5 s): a server that
	// drops packets must not hold a gateway's start for the minutes a TCP connect can
	// take.
	AttemptTimeout time.Duration
	// OnOutage hears when the database stops answering and when it answers again:
	// once each way, not per call.
	OnOutage func(Outage)
}

// Connect is Open for a gateway: when the database cannot be reached (a PostgreSQL
// server down, restarting or out of connections; a SQLite file locked), it returns a
// Store at once, whose calls fail with ErrUnavailable, and keeps trying in the
// background every opts.Retry until it succeeds or the store is closed. A mistake in
// the configuration (an unknown driver, a DSN that does not parse, a password refused,
// a database that does not exist, a SQLite path that cannot be created) is still an
// error, at once.
func Connect(ctx context.Context, driver, dsn string, opts Options) (*Store, error) {
	if opts.Retry <= 0 {
		opts.Retry = 250 * time.Millisecond
	}
	if opts.AttemptTimeout <= 0 {
		opts.AttemptTimeout = 5 * time.Second
	}
	s := &Store{driver: driver, health: newHealth(opts.OnOutage), stop: make(chan struct{})}
	attempt := func(ctx context.Context) (backend, error) {
		ctx, cancel := context.WithTimeout(ctx, opts.AttemptTimeout)
		defer cancel()
		return openBackend(ctx, driver, dsn)
	}
	b, err := attempt(ctx)
	if err == nil {
		s.ref.Store(&backendRef{b})
		return s, nil
	}
	if !unreachable(driver, err) {
		return nil, err
	}
	s.health.down(err)
	s.opening = make(chan struct{})
	go func() {
		defer close(s.opening)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-s.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		tick := time.NewTicker(opts.Retry)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			b, err := attempt(ctx)
			if err != nil {
				continue
			}
			s.ref.Store(&backendRef{b})
			s.health.up()
			return
		}
	}()
	return s, nil
}

// unreachable reports an error of Open that an outage explains (try again later), as
// opposed to a mistake in the configuration.
func unreachable(driver string, err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	switch driver {
	case DriverPostgres:
		pe, ok := errors.AsType[*pgconn.PgError](err)
		if !ok {
			return !errors.Is(err, errBadDSN) // refused, reset, timed out, no route, DNS
		}
		// Connection exceptions, too many connections or out of resources, the server
		// shutting down or starting up, a system error, a transaction to retry, a
		// standby that takes no writes yet.
		for _, class := range []string{"08", "53", "57", "58", "40"} {
			if strings.HasPrefix(pe.Code, class) {
				return true
			}
		}
		return pe.Code == "25006"
	case DriverSQLite:
		return sqliteBusy(err)
	}
	return false
}

// Driver is the driver the store was opened with.
func (s *Store) Driver() string { return s.driver }

// Close releases the store's connections, and stops trying to reach the database.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.stop)
		if s.opening != nil {
			<-s.opening
		}
		if r := s.ref.Load(); r != nil {
			err = r.close()
		}
	})
	return err
}

// Recovered implements metering.RecoveryNotifier: the channel is closed when a kind of
// call (reads, writes) that was failing succeeds again.
func (s *Store) Recovered() <-chan struct{} { return s.health.recoveredChan() }

// Connected reports whether the database has been reached since the store was made.
func (s *Store) Connected() bool { return s.ref.Load() != nil }

// call runs fn on the backend and tells the health tracker how it went.
func call[T any](ctx context.Context, s *Store, kind int, fn func(backend) (T, error)) (T, error) {
	var (
		v   T
		err = ErrUnavailable
	)
	if r := s.ref.Load(); r != nil {
		v, err = fn(r.backend)
	}
	s.health.observe(ctx, kind, err)
	return v, err
}

func call0(ctx context.Context, s *Store, kind int, fn func(backend) error) error {
	_, err := call(ctx, s, kind, func(b backend) (struct{}, error) { return struct{}{}, fn(b) })
	return err
}

// CreateKey implements auth.KeyStore. It stores k's ID, Name, Prefix, Hash, Models,
// CreatedAt (now when zero), ExpiresAt, ProjectID, Owner and Limits; a new key has not been
// used, revoked or replaced, so the other fields are not read. On success k.Seq is the
// key's sequence number, and k.CreatedAt is set if it was zero. A key id or hash already
// stored gives ErrConflict; a ProjectID not stored, an error naming the project that
// errors.Is auth.ErrNotFound.
func (s *Store) CreateKey(ctx context.Context, k *auth.Key) error {
	return s.CreateKeyAudited(ctx, k, nil)
}

// CreateKeyAudited implements auth.AuditedKeyStore: CreateKey, and e (when not nil)
// in the same transaction.
func (s *Store) CreateKeyAudited(ctx context.Context, k *auth.Key, e *auth.AuditEntry) error {
	row, err := newRow(k, time.Now())
	if err != nil {
		return err
	}
	entry, err := newAuditRow(e)
	if err != nil {
		return err
	}
	err = call0(ctx, s, kindWrite, func(b backend) error {
		return b.write(ctx, func(w writer) error {
			if err := checkProject(ctx, w, row.ProjectID); err != nil {
				return err
			}
			seq, err := w.nextSeq(ctx)
			if err != nil {
				return err
			}
			row.Seq = seq
			if err := w.insert(ctx, row); err != nil {
				return err
			}
			return appendAuditIn(ctx, w, entry)
		})
	})
	if err != nil {
		return err
	}
	k.Seq = row.Seq
	if k.CreatedAt.IsZero() {
		k.CreatedAt = row.CreatedAt
	}
	auditDone(e, entry)
	return nil
}

// GetKey implements auth.KeyStore.
func (s *Store) GetKey(ctx context.Context, id string) (*auth.Key, error) {
	return call(ctx, s, kindRead, func(b backend) (*auth.Key, error) { return b.getKey(ctx, id) })
}

// ListKeys implements auth.KeyStore: every key, newest first (ties by id, descending).
func (s *Store) ListKeys(ctx context.Context) ([]*auth.Key, error) {
	return call(ctx, s, kindRead, func(b backend) ([]*auth.Key, error) { return b.listKeys(ctx) })
}

// RevokeKey implements auth.KeyStore. at is now when zero. Revoking a key that is
// already revoked changes nothing (it keeps its first revocation time and its Seq, so
// no gateway is woken for it). An unknown id gives auth.ErrNotFound.
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) error {
	_, err := s.RevokeKeyAudited(ctx, id, at, nil)
	return err
}

// RevokeKeyAudited implements auth.AuditedKeyStore: RevokeKey, and e (when not nil) in
// the same transaction when the key was not revoked yet (changed). A key already
// revoked records nothing.
func (s *Store) RevokeKeyAudited(ctx context.Context, id string, at time.Time, e *auth.AuditEntry) (changed bool, err error) {
	at = storedTime(orNow(at))
	entry, err := newAuditRow(e)
	if err != nil {
		return false, err
	}
	err = call0(ctx, s, kindWrite, func(b backend) error {
		changed = false
		return b.write(ctx, func(w writer) error {
			k, err := w.get(ctx, id)
			if err != nil || !k.RevokedAt.IsZero() {
				return err
			}
			if k.Seq, err = w.nextSeq(ctx); err != nil {
				return err
			}
			k.RevokedAt = at
			if err := w.update(ctx, k); err != nil {
				return err
			}
			changed = true
			return appendAuditIn(ctx, w, entry)
		})
	})
	if err == nil && changed {
		auditDone(e, entry)
	}
	return changed && err == nil, err
}

// RotateKey implements auth.KeyStore. In one transaction it stores replacement (its
// CreatedAt is at when zero) and ends the old key: revoked at `at` when grace is zero
// (a key already revoked keeps its first revocation time), otherwise expiring at
// at+grace or at the expiry it already had, whichever comes first. The old key's
// ReplacedBy is set to replacement.ID. The replacement takes the next sequence number
// and the old key the one after, so a cache applying changes in order adds the new key
// before it ends the old one. An unknown oldID gives auth.ErrNotFound and stores nothing; a
// key that was already replaced gives ErrConflict. On success replacement.Seq is set.
// The replacement's ProjectID and Limits are stored as given (auth.Manager carries the
// old key's); its Owner is always the old key's (an owner never changes), and
// replacement.Owner is set to it.
func (s *Store) RotateKey(ctx context.Context, oldID string, replacement *auth.Key, at time.Time, grace time.Duration) (*auth.Key, error) {
	return s.RotateKeyAudited(ctx, oldID, replacement, at, grace, nil)
}

// RotateKeyAudited implements auth.AuditedKeyStore: RotateKey, and e (when not nil) in
// the same transaction.
func (s *Store) RotateKeyAudited(ctx context.Context, oldID string, replacement *auth.Key, at time.Time, grace time.Duration, e *auth.AuditEntry) (*auth.Key, error) {
	if grace < 0 {
		return nil, fmt.Errorf("store: rotate %q: negative grace %v", oldID, grace)
	}
	at = storedTime(orNow(at))
	row, err := newRow(replacement, at)
	if err != nil {
		return nil, err
	}
	entry, err := newAuditRow(e)
	if err != nil {
		return nil, err
	}
	var old *auth.Key
	err = call0(ctx, s, kindWrite, func(b backend) error {
		return b.write(ctx, func(w writer) error {
			k, err := w.get(ctx, oldID)
			if err != nil {
				return err
			}
			if k.ReplacedBy != "" {
				return fmt.Errorf("%w: key %q was already replaced by %q", ErrConflict, oldID, k.ReplacedBy)
			}
			if err := checkProject(ctx, w, row.ProjectID); err != nil {
				return err
			}
			// A key's owner never changes: the replacement is the same person's key,
			// whatever the caller gave, so their usage and their keys stay together.
			row.Owner = k.Owner
			if row.Seq, err = w.nextSeq(ctx); err != nil {
				return err
			}
			if err := w.insert(ctx, row); err != nil {
				return err
			}
			if k.Seq, err = w.nextSeq(ctx); err != nil {
				return err
			}
			if grace == 0 {
				if k.RevokedAt.IsZero() {
					k.RevokedAt = at
				}
			} else if end := storedTime(at.Add(grace)); k.ExpiresAt.IsZero() || end.Before(k.ExpiresAt) {
				k.ExpiresAt = end
			}
			k.ReplacedBy = row.ID
			old = k
			if err := w.update(ctx, k); err != nil {
				return err
			}
			return appendAuditIn(ctx, w, entry)
		})
	})
	if err != nil {
		return nil, err
	}
	auditDone(e, entry)
	replacement.Seq, replacement.Owner = row.Seq, row.Owner
	if replacement.CreatedAt.IsZero() {
		replacement.CreatedAt = row.CreatedAt
	}
	return old, nil
}

// ChangedSince implements auth.KeyStore.
func (s *Store) ChangedSince(ctx context.Context, seq int64) ([]*auth.Key, error) {
	return call(ctx, s, kindRead, func(b backend) ([]*auth.Key, error) { return b.changedSince(ctx, seq) })
}

// TouchKeys implements auth.KeyStore. It writes every last-used time of the batch in
// one transaction, never moves a last-used time backwards (gateways flush out of
// order), ignores ids it does not have, and leaves Seq alone: a key being used is not
// a change other gateways need to hear about.
func (s *Store) TouchKeys(ctx context.Context, lastUsed map[string]time.Time) error {
	if len(lastUsed) == 0 {
		return nil
	}
	batch := make(map[string]time.Time, len(lastUsed))
	for id, t := range lastUsed {
		if !t.IsZero() {
			batch[id] = storedTime(t)
		}
	}
	if len(batch) == 0 {
		return nil
	}
	return call0(ctx, s, kindWrite, func(b backend) error { return b.touchKeys(ctx, batch) })
}

// newRow checks a key about to be stored and returns the copy to store: times in UTC
// to the microsecond (what both databases keep), CreatedAt defaulting to created.
func newRow(k *auth.Key, created time.Time) (*auth.Key, error) {
	if k == nil {
		return nil, errors.New("store: nil key")
	}
	switch {
	case k.ID == "" || len(k.ID) > maxIDLen:
		return nil, fmt.Errorf("store: key id %q: want 1 to %d bytes", k.ID, maxIDLen)
	case k.Hash == auth.Hash{}:
		return nil, fmt.Errorf("store: key %q: no hash", k.ID)
	case len(k.Prefix) > maxPrefixLen:
		return nil, fmt.Errorf("store: key %q: display prefix longer than %d bytes", k.ID, maxPrefixLen)
	case k.Prefix != "" && auth.HashKey(k.Prefix) == k.Hash:
		// The "prefix" is the whole secret: storing it would store the secret.
		return nil, fmt.Errorf("store: key %q: the display prefix is the secret itself", k.ID)
	}
	if err := auth.ValidateName(k.Name); err != nil {
		return nil, fmt.Errorf("store: key %q: %w", k.ID, err)
	}
	if k.ProjectID != "" {
		if err := auth.ValidateProjectID(k.ProjectID); err != nil {
			return nil, fmt.Errorf("store: key %q: %w", k.ID, err)
		}
	}
	if err := k.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("store: key %q: limits: %w", k.ID, err)
	}
	if err := checkOwner(k.Owner); err != nil {
		return nil, fmt.Errorf("store: key %q: %w", k.ID, err)
	}
	var models []string
	for _, m := range k.Models {
		if strings.TrimSpace(m) == "" {
			return nil, fmt.Errorf("store: key %q: empty model name", k.ID)
		}
		models = append(models, m)
	}
	createdAt := k.CreatedAt
	if createdAt.IsZero() {
		createdAt = created
	}
	return &auth.Key{
		ID:        k.ID,
		Name:      k.Name,
		Prefix:    k.Prefix,
		Hash:      k.Hash,
		Models:    models,
		CreatedAt: storedTime(createdAt),
		ExpiresAt: storedTime(k.ExpiresAt),
		ProjectID: k.ProjectID,
		Owner:     k.Owner,
		Limits:    auth.NormalizeLimits(k.Limits),
	}, nil
}

// maxOwnerLen bounds a key's owner: a user id ("usr_" and 16 characters) or a service
// account's name ("svc:" and a name of a few words).
const maxOwnerLen = 128

// checkOwner refuses an owner that is neither empty, a user id ("usr_…") nor a service
// account ("svc:<name>"), or is longer than maxOwnerLen or not printable: it is shown
// in lists and grouped by in usage.
func checkOwner(owner string) error {
	if owner == "" {
		return nil
	}
	rest, user := strings.CutPrefix(owner, "usr_")
	if !user {
		rest, _ = strings.CutPrefix(owner, "svc:")
	}
	switch {
	case len(owner) > maxOwnerLen:
		return fmt.Errorf("owner longer than %d bytes", maxOwnerLen)
	case rest == owner || rest == "":
		return fmt.Errorf("owner %s: want a user id (usr_…) or a service account (svc:<name>)", strconv.QuoteToGraphic(owner))
	case !utf8.ValidString(owner) || strings.IndexFunc(owner, func(r rune) bool { return !unicode.IsGraphic(r) }) >= 0:
		return fmt.Errorf("owner %s: only printable characters", strconv.QuoteToGraphic(owner))
	}
	return nil
}

// storedTime is t as the database gives it back: UTC, truncated to the microsecond,
// without a monotonic reading. The zero time (unset) stays zero.
func storedTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Microsecond)
}

func orNow(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}

// backend is what a database provides; Store holds the rules common to both.
type backend interface {
	// migrate applies the migrations not yet recorded, in one transaction, with
	// concurrent Opens of the same database serialised.
	migrate(ctx context.Context, migrations []migration) error
	// write runs fn in a transaction in which nextSeq gives numbers in commit order:
	// no other write transaction takes a number until this one has committed.
	write(ctx context.Context, fn func(writer) error) error
	getKey(ctx context.Context, id string) (*auth.Key, error)
	listKeys(ctx context.Context) ([]*auth.Key, error)
	changedSince(ctx context.Context, seq int64) ([]*auth.Key, error)
	// touchKeys raises last_used_at to the given times (already storedTime).
	touchKeys(ctx context.Context, lastUsed map[string]time.Time) error
	// writeUsage inserts the records not already stored and raises journalID's position
	// to upTo, in one transaction (see Store.WriteUsage).
	writeUsage(ctx context.Context, journalID string, upTo int64, records []metering.Record, now time.Time) error
	journalPosition(ctx context.Context, journalID string) (int64, error)
	// usageDialect is how this database spells the parts of a usage query that differ.
	usageDialect() *usageDialect
	// queryUsage runs a query built by buildUsageQuery.
	queryUsage(ctx context.Context, uq usageQuery) ([]metering.Row, error)
	// listRequests runs ListRequests' query.
	listRequests(ctx context.Context, query string, args []any) ([]metering.RequestRow, error)
	// queryLatency runs latencySQL.
	queryLatency(ctx context.Context, query string, args ...any) ([]latencyCell, error)
	// queryInt runs a query that answers one integer.
	queryInt(ctx context.Context, query string, args ...any) (int64, error)
	getProject(ctx context.Context, id string) (*auth.Project, error)
	listProjects(ctx context.Context) ([]*auth.Project, error)
	projectsChangedSince(ctx context.Context, seq int64) ([]*auth.Project, error)
	listAudit(ctx context.Context, limit int, beforeID int64) ([]*auth.AuditEntry, error)
	alertDB // the alerts' outbox (alerts.go)
	// runner runs the people's statements (see sqlrun.go): reads on the read pool,
	// and writes that order nothing outside the writers' turn.
	runner
	close() error
}

// writer is a write transaction.
type writer interface {
	nextSeq(ctx context.Context) (int64, error)
	// get reads one key, or returns auth.ErrNotFound.
	get(ctx context.Context, id string) (*auth.Key, error)
	// insert stores a new key (every column; ErrConflict on a duplicate id or hash).
	insert(ctx context.Context, k *auth.Key) error
	// update writes the columns a key's change may touch: expires_at, revoked_at,
	// replaced_by, project_id, limits and seq.
	update(ctx context.Context, k *auth.Key) error
	// getProject reads one project, or returns a *auth.NotFoundError.
	getProject(ctx context.Context, id string) (*auth.Project, error)
	// insertProject stores a new project (ErrConflict on a duplicate id).
	insertProject(ctx context.Context, p *auth.Project) error
	// updateProject writes a project's name, limits and seq.
	updateProject(ctx context.Context, p *auth.Project) error
	// appendAudit stores an entry and returns its id.
	appendAudit(ctx context.Context, e *auth.AuditEntry) (int64, error)
	// runner runs the people's statements in the transaction (see sqlrun.go).
	runner
}

// resultRows is what both drivers' query results offer: pgx.Rows and *sql.Rows.
type resultRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// each calls scan on every row of a result.
func each(rows resultRows, scan func(resultRows) error) error {
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// collect scans every row of a result with scan.
func collect[T any](rows resultRows, scan func(resultRows) (T, error)) ([]T, error) {
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
