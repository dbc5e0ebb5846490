package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/limits"
	"github.com/switchyard-gw/switchyard/metering"
)

// backend opens the fixture's database without migrating it, closed at the test's end.
func (f *fixture) backend(t *testing.T) backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var (
		b   backend
		err error
	)
	switch f.driver {
	case DriverSQLite:
		b, err = openSQLite(ctx, f.dsn)
	case DriverPostgres:
		b, err = openPostgres(ctx, f.dsn)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.close() })
	return b
}

// storeOn is a Store over a backend migrated by the test: a gateway of another version.
func storeOn(driver string, b backend) *Store {
	s := &Store{driver: driver, health: newHealth(nil), stop: make(chan struct{})}
	s.ref.Store(&backendRef{b})
	return s
}

// tables lists the tables of the fixture's database.
func (f *fixture) tables(t *testing.T) []string {
	t.Helper()
	query := `SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name`
	if f.driver == DriverPostgres {
		query = `SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1`
	}
	var out []string
	for _, r := range f.rows(t, query) {
		out = append(out, fmt.Sprint(r[0]))
	}
	return out
}

func versionsOf(ms []migration) []int64 {
	var out []int64
	for _, m := range ms {
		out = append(out, int64(m.version))
	}
	return out
}

// exec runs a statement on a connection of its own (not the store's), as a gateway of
// an older version would write: with the columns of the schema it knew.
func (f *fixture) exec(t testing.TB, query string, args ...any) {
	t.Helper()
	ctx := context.Background()
	switch f.driver {
	case DriverSQLite:
		db, err := sql.Open("sqlite", f.dsn+"?_busy_timeout=10000&_foreign_keys=on")
		require.NoError(t, err)
		defer db.Close()
		_, err = db.ExecContext(ctx, query, args...)
		require.NoError(t, err)
	case DriverPostgres:
		conn, err := pgx.Connect(ctx, f.dsn)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, query, args...)
		require.NoError(t, err)
	}
}

// legacyKey stores k as a gateway with migration 1 only would have (its columns only),
// taking the next number of the keys' sequence, and sets k.Seq.
func (f *fixture) legacyKey(t *testing.T, k *auth.Key) {
	t.Helper()
	k.CreatedAt, k.LastUsedAt, k.ExpiresAt, k.RevokedAt = storedTime(k.CreatedAt), storedTime(k.LastUsedAt), storedTime(k.ExpiresAt), storedTime(k.RevokedAt)
	const cols = `id, name, prefix, hash, models, created_at, last_used_at, expires_at, revoked_at, replaced_by, seq`
	switch f.driver {
	case DriverSQLite:
		f.exec(t, `UPDATE sequences SET value = value + 1 WHERE name = 'api_keys'`)
		var models any
		if len(k.Models) > 0 {
			b, err := json.Marshal(k.Models)
			require.NoError(t, err)
			models = string(b)
		}
		f.exec(t, `INSERT INTO api_keys (`+cols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, (SELECT value FROM sequences WHERE name = 'api_keys'))`,
			k.ID, k.Name, k.Prefix, k.Hash[:], models, k.CreatedAt.UnixMicro(),
			sqliteTime(k.LastUsedAt), sqliteTime(k.ExpiresAt), sqliteTime(k.RevokedAt), nullString(k.ReplacedBy))
	case DriverPostgres:
		var models []string
		if len(k.Models) > 0 {
			models = k.Models
		}
		f.exec(t, `INSERT INTO api_keys (`+cols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, nextval('api_keys_seq'))`,
			k.ID, k.Name, k.Prefix, k.Hash[:], models, k.CreatedAt,
			pgTime(k.LastUsedAt), pgTime(k.ExpiresAt), pgTime(k.RevokedAt), nullString(k.ReplacedBy))
	}
	seq := f.rows(t, `SELECT seq FROM api_keys WHERE id = `+map[string]string{DriverSQLite: "?", DriverPostgres: "$1"}[f.driver], k.ID)
	require.Len(t, seq, 1)
	k.Seq = seq[0][0].(int64)
}

// legacyKeys fills a database of an older version with keys in each state a key can be
// in: in use (with an allowlist, an expiry and a last-used time), revoked, and rotated
// with a grace period (its replacement too). It returns the secrets by name and the
// keys as a store reads them back, by id.
func legacyKeys(t *testing.T, f *fixture) (map[string]string, []*auth.Key) {
	t.Helper()
	secrets := map[string]string{}
	var keys []*auth.Key
	add := func(name string, edit func(*auth.Key)) *auth.Key {
		secret, k := newKey(t, name, t0)
		edit(k)
		f.legacyKey(t, k)
		secrets[name] = secret
		keys = append(keys, k)
		return k
	}
	// Expiries are relative to now: the cache checks them against the clock.
	now := time.Now()
	add("in use", func(k *auth.Key) {
		k.Models, k.ExpiresAt, k.LastUsedAt = []string{"model-a"}, now.Add(1000*time.Hour), t0.Add(time.Hour)
	})
	add("revoked", func(k *auth.Key) { k.RevokedAt = t0.Add(2 * time.Hour) })
	replacement := add("replacement", func(*auth.Key) {})
	add("rotated", func(k *auth.Key) { k.ExpiresAt, k.ReplacedBy = now.Add(1000*time.Hour), replacement.ID })
	slices.SortFunc(keys, func(a, b *auth.Key) int { return cmp.Compare(a.ID, b.ID) })
	return secrets, keys
}

// byID sorts keys by id.
func byID(keys []*auth.Key) []*auth.Key {
	keys = slices.Clone(keys)
	slices.SortFunc(keys, func(a, b *auth.Key) int { return cmp.Compare(a.ID, b.ID) })
	return keys
}

// A database created by a gateway that had only migration 1, holding keys, upgraded by
// Open: every key reads back as it was (in no project, without limits of its own), the
// ones in use still verify (the revoked one does not), new keys follow the old ones in
// the change order, and usage can be written.
func TestUpgradingAVersion1DatabaseKeepsItsKeys(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		ms, err := loadMigrations(f.driver)
		require.NoError(t, err)
		require.Greater(t, len(ms), 1, "there is something to upgrade to")
		old := f.backend(t)
		require.NoError(t, old.migrate(ctx, ms[:1]))
		require.Equal(t, []int64{1}, f.appliedMigrations(t))
		secrets, before := legacyKeys(t, f)
		require.NotContains(t, f.tables(t), "usage_records")
		require.NoError(t, old.close())

		s := f.open(t)
		assert.Equal(t, versionsOf(ms), f.appliedMigrations(t), "every migration applied")
		after, err := s.ListKeys(ctx)
		require.NoError(t, err)
		assert.Equal(t, before, byID(after), "every key and every field as it was")

		cache, err := auth.NewCache(ctx, s)
		require.NoError(t, err)
		for name, want := range map[string]bool{"in use": true, "revoked": false, "rotated": true, "replacement": true} {
			id, ok := cache.Verify(secrets[name])
			assert.Equal(t, want, ok, "key %q verifies", name)
			if ok {
				assert.Equal(t, name, id.Name)
				assert.Empty(t, id.ProjectID)
				assert.Nil(t, id.Limits)
			}
		}
		id, _ := cache.Verify(secrets["in use"])
		require.NotNil(t, id)
		assert.True(t, id.MayCall("model-a"))
		assert.False(t, id.MayCall("model-b"), "the allowlist survives")

		_, k := newKey(t, "after the upgrade", t0)
		require.NoError(t, s.CreateKey(ctx, k))
		assert.Greater(t, k.Seq, slices.MaxFunc(before, func(a, b *auth.Key) int { return cmp.Compare(a.Seq, b.Seq) }).Seq,
			"a new key comes after the old ones in the change order")
		require.NoError(t, cache.Refresh(ctx))
		_, ok := cache.Verify(secrets["in use"])
		assert.True(t, ok)

		rec := metering.Record{RequestID: "sy_upgrade", KeyID: before[0].ID, Model: "m", Status: 200, Time: t0}
		require.NoError(t, s.WriteUsage(ctx, "journal-1", 42, []metering.Record{rec}))
		pos, err := s.JournalPosition(ctx, "journal-1")
		require.NoError(t, err)
		assert.Equal(t, int64(42), pos)
	})
}

// A database of a gateway that had migrations 1 and 2 (keys and a usage ledger, no
// projects), upgraded by Open: the keys read back as they were, in no project and
// without limits; the usage records stay, count for their keys' spend and for no
// project's; a key then moved into a project, with limits, works, and so does the
// audit trail.
func TestUpgradingAVersion2DatabaseKeepsKeysAndUsage(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		ms, err := loadMigrations(f.driver)
		require.NoError(t, err)
		require.Greater(t, len(ms), 2, "there is something to upgrade to")
		old := f.backend(t)
		require.NoError(t, old.migrate(ctx, ms[:2]))
		secrets, before := legacyKeys(t, f)
		inUse := before[slices.IndexFunc(before, func(k *auth.Key) bool { return k.Name == "in use" })]
		// Usage as a version-2 gateway wrote it: no project_id column.
		const cols = `request_id, key_id, model, candidate, protocol, operation, status, input, cached_input, cache_write, ` +
			`output, reasoning, estimated, cost_micros, latency_ms, ttfb_ms, attempts, ts`
		for i, cost := range []int64{1_000, 2_500, 40} {
			at := t0.Add(time.Duration(i) * time.Minute)
			if f.driver == DriverSQLite {
				f.exec(t, `INSERT INTO usage_records (`+cols+`) VALUES (?, ?, 'm', 'c', 'openai', 'chat', 200, 10, 0, 0, 5, 0, 0, ?, 100, 10, 1, ?)`,
					fmt.Sprintf("sy_old_%d", i), inUse.ID, cost, at.UnixMicro())
			} else {
				f.exec(t, `INSERT INTO usage_records (`+cols+`) VALUES ($1, $2, 'm', 'c', 'openai', 'chat', 200, 10, 0, 0, 5, 0, false, $3, 100, 10, 1, $4)`,
					fmt.Sprintf("sy_old_%d", i), inUse.ID, cost, at)
			}
		}
		require.NoError(t, old.close())

		s := f.open(t)
		assert.Equal(t, versionsOf(ms), f.appliedMigrations(t))
		after, err := s.ListKeys(ctx)
		require.NoError(t, err)
		assert.Equal(t, before, byID(after), "every key and every field as it was")
		rows, err := s.QueryUsage(ctx, metering.Query{KeyID: inUse.ID})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		assert.Equal(t, int64(3), rows[0].Requests, "the old usage records stay")
		spent, err := s.Spend(ctx, limits.Scope{Kind: limits.ScopeKey, ID: inUse.ID}, time.Time{})
		require.NoError(t, err)
		assert.Equal(t, int64(3_540), spent, "old records count for their key")

		require.NoError(t, s.CreateProject(ctx, &auth.Project{ID: "platform", Name: "Platform"}, nil))
		e := &auth.AuditEntry{Actor: "admin API", Action: auth.ActionKeyProject, Target: inUse.ID, Detail: "project none → platform"}
		require.NoError(t, s.SetKeyProject(ctx, inUse.ID, "platform", e))
		spent, err = s.Spend(ctx, limits.Scope{Kind: limits.ScopeProject, ID: "platform"}, time.Time{})
		require.NoError(t, err)
		assert.Zero(t, spent, "records from before the key joined the project are not the project's")
		cache, err := auth.NewCache(ctx, s)
		require.NoError(t, err)
		id, ok := cache.Verify(secrets["in use"])
		require.True(t, ok)
		assert.Equal(t, "platform", id.ProjectID)
		audit, err := s.ListAudit(ctx, 10, 0)
		require.NoError(t, err)
		require.Len(t, audit, 1)
		assert.Equal(t, e.ID, audit[0].ID)
	})
}

// futureMigration is what a newer gateway might add: a column, a table, an index.
// Migrations only add, so a gateway that does not know it keeps working.
func futureMigration(driver string, version int) migration {
	sql := `ALTER TABLE api_keys ADD COLUMN note TEXT;
CREATE TABLE key_notes (key_id TEXT NOT NULL PRIMARY KEY, note TEXT NOT NULL) STRICT;
CREATE INDEX usage_records_by_model ON usage_records (model);`
	if driver == DriverPostgres {
		sql = `ALTER TABLE api_keys ADD COLUMN note text;
CREATE TABLE key_notes (key_id text NOT NULL PRIMARY KEY, note text NOT NULL);
CREATE INDEX usage_records_by_model ON usage_records (model);`
	}
	return migration{version: version, name: fmt.Sprintf("%04d_future", version), sql: sql}
}

// The rolling-upgrade case pending() is written for: a newer gateway has migrated the
// shared database to a version this binary does not know. Open does not fail, does
// not undo or forget the newer migration, and this gateway keeps working with the
// tables it knows, side by side with the newer one.
func TestAGatewayMeetsANewerSchemaVersion(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		ms, err := loadMigrations(f.driver)
		require.NoError(t, err)
		future := append(slices.Clone(ms), futureMigration(f.driver, ms[len(ms)-1].version+1))
		newerBackend := f.backend(t)
		require.NoError(t, newerBackend.migrate(ctx, future))
		newer := storeOn(f.driver, newerBackend)
		newerSecret, fromNewer := newKey(t, "from the newer gateway", t0)
		require.NoError(t, newer.CreateKey(ctx, fromNewer))

		older := f.open(t) // this binary: it knows ms only
		assert.Equal(t, versionsOf(future), f.appliedMigrations(t), "the newer version stays recorded")
		assert.Contains(t, f.tables(t), "key_notes", "and its table stays")
		f.open(t)
		assert.Equal(t, versionsOf(future), f.appliedMigrations(t), "a second open changes nothing")

		got, err := older.GetKey(ctx, fromNewer.ID)
		require.NoError(t, err)
		assert.Equal(t, fromNewer.Hash, got.Hash)
		olderSecret, fromOlder := newKey(t, "from the older gateway", t0)
		require.NoError(t, older.CreateKey(ctx, fromOlder))
		require.NoError(t, older.TouchKeys(ctx, map[string]time.Time{fromNewer.ID: t0.Add(time.Hour)}))
		require.NoError(t, older.RevokeKey(ctx, fromNewer.ID, t0.Add(2*time.Hour)))
		cache, err := auth.NewCache(ctx, older)
		require.NoError(t, err)
		_, ok := cache.Verify(olderSecret)
		assert.True(t, ok)
		_, ok = cache.Verify(newerSecret)
		assert.False(t, ok, "revoked by the older gateway")

		rec := metering.Record{RequestID: "sy_rolling", KeyID: fromOlder.ID, Model: "m", Status: 200, Usage: metering.Usage{Input: 7}, Time: t0}
		require.NoError(t, older.WriteUsage(ctx, "journal-old", 10, []metering.Record{rec}))
		rows, err := older.QueryUsage(ctx, metering.Query{})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		assert.Equal(t, int64(7), rows[0].Input)

		// The newer gateway sees what the older one wrote.
		seen, err := newer.GetKey(ctx, fromOlder.ID)
		require.NoError(t, err)
		assert.Equal(t, fromOlder.Hash, seen.Hash)
		gone, err := newer.GetKey(ctx, fromNewer.ID)
		require.NoError(t, err)
		assert.False(t, gone.RevokedAt.IsZero())
	})
}

// A migration that fails part-way leaves the database exactly as it was: neither the
// failing migration's first statements nor the migrations before it in the same run
// are kept or recorded, the connection is left with no transaction open (another
// gateway can open the database at once), and a later Open upgrades it normally.
func TestAFailedMigrationRollsBack(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		ms, err := loadMigrations(f.driver)
		require.NoError(t, err)
		b := f.backend(t)
		require.NoError(t, b.migrate(ctx, ms[:1]))
		secrets, before := legacyKeys(t, f)
		tablesBefore := f.tables(t)

		broken := migration{version: ms[len(ms)-1].version + 1, name: fmt.Sprintf("%04d_broken", ms[len(ms)-1].version+1),
			sql: "CREATE TABLE half_done (x integer);\nINSERT INTO no_such_table VALUES (1);"}
		err = b.migrate(ctx, append(slices.Clone(ms), broken))
		require.Error(t, err)
		assert.Contains(t, err.Error(), broken.name, "the error names the migration")

		assert.Equal(t, []int64{1}, f.appliedMigrations(t), "nothing recorded")
		assert.Equal(t, tablesBefore, f.tables(t), "no table of the failed run is left")
		require.NoError(t, b.write(ctx, func(w writer) error { _, err := w.nextSeq(ctx); return err }), "the connection still works")
		assert.Len(t, f.rows(t, `SELECT id FROM api_keys`), len(before), "the keys stay")

		openCtx, cancel := context.WithTimeout(ctx, 5*time.Second) // a transaction left open would hold SQLite's lock for 10 s
		defer cancel()
		s, err := Open(openCtx, f.driver, f.dsn)
		require.NoError(t, err, "the database can be opened and upgraded at once")
		t.Cleanup(func() { _ = s.Close() })
		assert.Equal(t, versionsOf(ms), f.appliedMigrations(t))
		assert.NotContains(t, f.tables(t), "half_done")
		got, err := s.ListKeys(ctx)
		require.NoError(t, err)
		assert.Equal(t, before, byID(got), "every key as it was")
		cache, err := auth.NewCache(ctx, s)
		require.NoError(t, err)
		_, ok := cache.Verify(secrets["in use"])
		assert.True(t, ok)
	})
}
