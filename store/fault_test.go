package store

import (
	"context"
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

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/internal/pgtest"
	"github.com/switchyard-gw/switchyard/metering"
)

// outageLog collects a store's outage reports.
type outageLog struct {
	mu     sync.Mutex
	events []Outage
}

func (o *outageLog) add(e Outage) { o.mu.Lock(); o.events = append(o.events, e); o.mu.Unlock() }

func (o *outageLog) list() []Outage {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Outage(nil), o.events...)
}

// A gateway that starts while PostgreSQL is down gets a store at once, whose calls fail
// with ErrUnavailable; it reaches the database in the background once it is back, and
// the outage is reported once when it starts and once when it ends, however many calls
// failed meanwhile.
func TestConnectWhileThePostgresServerIsDown(t *testing.T) {
	cluster := pgtest.NewCluster(t)
	// A first gateway makes the schema, as in real life.
	ctx := context.Background()
	first, err := Open(ctx, DriverPostgres, cluster.DSN())
	require.NoError(t, err)
	_, k := newKey(t, "known", time.Time{})
	require.NoError(t, first.CreateKey(ctx, k))
	require.NoError(t, first.Close())
	cluster.Stop(t)

	var outages outageLog
	started := time.Now()
	s, err := Connect(ctx, DriverPostgres, cluster.DSN(), Options{Retry: 50 * time.Millisecond, OnOutage: outages.add})
	require.NoError(t, err, "an unreachable server is an outage, not a configuration error")
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	t.Logf("Connect returned %v after it was called with the server down", time.Since(started))
	assert.Less(t, time.Since(started), 2*time.Second)
	assert.False(t, s.Connected())
	_, err = s.ChangedSince(ctx, 0)
	assert.ErrorIs(t, err, ErrUnavailable)
	err = s.WriteUsage(ctx, "j", 1, []metering.Record{{RequestID: "r1", Time: time.Now()}})
	assert.False(t, errors.Is(err, metering.ErrRecordRefused), "a store that is not there refuses no record: %v", err)

	// Many calls fail while it is down; one report.
	for range 20 {
		_, _ = s.ChangedSince(ctx, 0)
	}
	require.Len(t, outages.list(), 1)
	assert.True(t, outages.list()[0].Down)
	assert.Equal(t, "reads and writes", outages.list()[0].Failing)

	recovered := s.Recovered()
	cluster.Start(t)
	back := time.Now()
	require.Eventually(t, s.Connected, 10*time.Second, 10*time.Millisecond)
	t.Logf("reached the database %v after it came back", time.Since(back))
	select {
	case <-recovered:
	default:
		t.Error("the recovery signal was not given")
	}
	keys, err := s.ChangedSince(ctx, 0)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	assert.Equal(t, k.ID, keys[0].ID)
	events := outages.list()
	require.Len(t, events, 2)
	assert.False(t, events[1].Down)
	assert.Equal(t, "reads and writes", events[1].Failing)
	assert.Positive(t, events[1].Lasted)

	// A restart of the server under a connected store: one report each way again.
	cluster.Stop(t)
	for range 10 {
		_, _ = s.ChangedSince(ctx, 0)
	}
	cluster.Start(t)
	require.Eventually(t, func() bool { _, err := s.ChangedSince(ctx, 0); return err == nil }, 10*time.Second, 10*time.Millisecond)
	events = outages.list()
	require.Len(t, events, 4, "%+v", events)
	assert.True(t, events[2].Down)
	assert.Equal(t, "reads", events[2].Failing)
	assert.False(t, events[3].Down)
}

// Mistakes in the configuration are not outages: they fail at once.
func TestConnectRefusesAMistakeAtOnce(t *testing.T) {
	ctx := context.Background()
	_, err := Connect(ctx, DriverPostgres, "postgres://%zz", Options{})
	assert.Error(t, err)
	_, err = Connect(ctx, "mysql", "x", Options{})
	assert.Error(t, err)
	_, err = Connect(ctx, DriverSQLite, ":memory:", Options{})
	assert.Error(t, err)
	blocked := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(blocked, nil, 0o600))
	_, err = Connect(ctx, DriverSQLite, filepath.Join(blocked, "sub", "x.db"), Options{})
	assert.Error(t, err, "a SQLite path that cannot be made")

	dsn := pgtest.DSN(t)
	missing := strings.Replace(dsn, "/postgres?", "/no_such_database?", 1)
	require.NotEqual(t, dsn, missing)
	start := time.Now()
	_, err = Connect(ctx, DriverPostgres, missing, Options{})
	assert.Error(t, err, "a database that does not exist")
	assert.Less(t, time.Since(start), 5*time.Second)
}

// Reads that succeed while writes fail (a database taking no writes) are one outage,
// reported when it starts and when writes work again; reads succeeding meanwhile do not
// end it.
func TestAnOutageOfWritesIsReportedOnce(t *testing.T) {
	var outages outageLog
	h := newHealth(outages.add)
	ctx := context.Background()
	failed := errors.New("read-only")
	for range 10 {
		h.observe(ctx, kindRead, nil)
		h.observe(ctx, kindWrite, failed)
	}
	h.observe(ctx, kindRead, auth.ErrNotFound)
	h.observe(ctx, kindWrite, metering.ErrRecordRefused)
	h.observe(ctx, kindWrite, nil)
	events := outages.list()
	require.Len(t, events, 2)
	assert.Equal(t, Outage{Down: true, Failing: "writes", Err: failed}, events[0])
	assert.Equal(t, "writes", events[1].Failing)
	assert.False(t, events[1].Down)

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	h.observe(canceled, kindRead, context.Canceled)
	assert.Len(t, outages.list(), 2, "a call its caller gave up on says nothing about the database")
}

// Only a row the database refuses for what it holds is reported as a refused record;
// a database that is away, or takes no writes, refuses no record.
func TestWriteUsageTellsARefusedRecordFromAnOutage(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		good := metering.Record{RequestID: "sy_good", Model: "m", Time: time.Now()}
		noID := metering.Record{Model: "m", Time: time.Now()}
		err := s.WriteUsage(ctx, "j", 10, []metering.Record{good, noID})
		assert.ErrorIs(t, err, metering.ErrRecordRefused, "a NULL in a NOT NULL column is the row's fault")

		if f.driver == DriverPostgres {
			nul := metering.Record{RequestID: "sy_nul", Model: "m\x00", Time: time.Now()}
			assert.ErrorIs(t, s.WriteUsage(ctx, "j", 10, []metering.Record{good, nul}), metering.ErrRecordRefused,
				"PostgreSQL refuses a NUL in text")
			// A database that takes no writes: a trigger raising what a full disk raises.
			exec := func(q string) {
				_, err := s.ref.Load().backend.(*pgBackend).pool.Exec(ctx, q)
				require.NoError(t, err)
			}
			exec(`CREATE FUNCTION no_writes() RETURNS trigger LANGUAGE plpgsql AS
				$$ BEGIN RAISE EXCEPTION 'could not extend file' USING ERRCODE = 'disk_full'; END $$`)
			exec(`CREATE TRIGGER no_writes BEFORE INSERT ON usage_records EXECUTE FUNCTION no_writes()`)
			err := s.WriteUsage(ctx, "j", 10, []metering.Record{good})
			require.Error(t, err)
			assert.False(t, errors.Is(err, metering.ErrRecordRefused), "a full disk is not the record's fault: %v", err)
			exec(`DROP TRIGGER no_writes ON usage_records`)
		}

		require.NoError(t, s.WriteUsage(ctx, "j", 10, []metering.Record{good}))
		require.NoError(t, s.Close())
		err = s.WriteUsage(ctx, "j", 20, []metering.Record{{RequestID: "sy_late", Model: "m", Time: time.Now()}})
		require.Error(t, err)
		assert.False(t, errors.Is(err, metering.ErrRecordRefused), "a closed store refuses no record: %v", err)
	})
}

// The ledger over real PostgreSQL: a record the database refuses (a NUL in a text
// column) goes to refused.jsonl, alone and once, while a spell of refused writes (a
// full disk) sets nothing aside; every other record is stored exactly once.
func TestLedgerOverPostgresSetsAsideOnlyTheRefusedRecord(t *testing.T) {
	f := newFixture(t, DriverPostgres)
	s := f.open(t)
	ctx := context.Background()
	pool := s.ref.Load().backend.(*pgBackend).pool
	_, err := pool.Exec(ctx, `CREATE FUNCTION no_writes() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN RAISE EXCEPTION 'could not extend file' USING ERRCODE = 'disk_full'; END $$`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `CREATE TRIGGER no_writes BEFORE INSERT ON usage_records EXECUTE FUNCTION no_writes()`)
	require.NoError(t, err)

	dir := t.TempDir()
	l, err := metering.OpenLedger(ctx, dir, s, metering.Options{Interval: 10 * time.Millisecond, BatchRecords: 64})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	const n = 300
	for i := range n {
		r := &metering.Record{RequestID: fmt.Sprintf("sy_%06d", i), KeyID: "k", Model: "m", Time: time.Now()}
		if i == 123 {
			r.Model = "bad\x00model"
		}
		require.NoError(t, l.Append(r))
	}
	require.Eventually(t, func() bool { return l.Stats().LastError != nil }, 5*time.Second, 10*time.Millisecond)
	_, err = pool.Exec(ctx, `DROP TRIGGER no_writes ON usage_records`)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return l.Stats().PendingBytes == 0 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, l.Close())

	rows := f.rows(t, `SELECT request_id, count(*) FROM usage_records GROUP BY request_id`)
	assert.Len(t, rows, n-1)
	for _, r := range rows {
		assert.EqualValues(t, 1, r[1])
	}
	refused, err := os.ReadFile(filepath.Join(dir, "refused.jsonl"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(refused)), "\n")
	require.Len(t, lines, 1, "only the refused record, once: %s", refused)
	assert.Contains(t, lines[0], `"sy_000123"`)
}

func TestFingerprintLeavesThePasswordOut(t *testing.T) {
	a := Fingerprint(DriverPostgres, "postgres://gw:secret-1@db.internal:5432/switchyard?pool_max_conns=4")
	b := Fingerprint(DriverPostgres, "postgres://gw:secret-2@db.internal:5432/switchyard")
	c := Fingerprint(DriverPostgres, "postgres://gw:secret-1@db.internal:5432/other")
	assert.Equal(t, a, b, "a new password is the same store")
	assert.NotEqual(t, a, c)
	assert.NotContains(t, a, "secret")
	assert.NotEqual(t, Fingerprint(DriverSQLite, "/a/x.db"), Fingerprint(DriverSQLite, "/b/x.db"))
}

// A batch of any size is stored whole and once: it goes in as statements of 256, 128,
// …, 1 rows, and a record written again is skipped.
func TestEveryBatchSizeIsStoredExactlyOnce(t *testing.T) {
	f := newFixture(t, DriverSQLite)
	s := f.open(t)
	ctx := context.Background()
	db := s.ref.Load().backend.(*sqliteBackend).r
	count := func() (n int) {
		require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM usage_records`).Scan(&n))
		return n
	}
	total, position := 0, int64(0)
	for _, size := range []int{1, 2, 3, 77, 255, 256, 257, 511, 1000} {
		batch := make([]metering.Record, size)
		for i := range batch {
			batch[i] = metering.Record{RequestID: fmt.Sprintf("sy_%d_%d", size, i), Model: "m", Status: 200 + i, Time: time.Now()}
		}
		position += int64(size)
		require.NoError(t, s.WriteUsage(ctx, "j", position, batch))
		total += size
		assert.Equal(t, total, count(), "after a batch of %d", size)
		// The same batch again (a retry after a crash) adds nothing.
		require.NoError(t, s.WriteUsage(ctx, "j", position, batch))
		assert.Equal(t, total, count(), "after a batch of %d written twice", size)
	}
	var outputs int64
	require.NoError(t, db.QueryRowContext(ctx, `SELECT sum(status - 200) FROM usage_records WHERE request_id LIKE 'sy_1000_%'`).Scan(&outputs))
	assert.Equal(t, int64(999*1000/2), outputs, "every row of the largest batch holds its own values")
}
