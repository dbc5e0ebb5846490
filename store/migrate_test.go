package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/auth"
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

// v1Keys fills a database at version 1 with keys in each state a key can be in: in
// use (with an allowlist, an expiry and a last-used time), revoked, and rotated with
// a grace period (its replacement too). It returns the secrets by name and the keys as
// the version-1 store reads them back.
func v1Keys(t *testing.T, s *Store) (map[string]string, []*auth.Key) {
	t.Helper()
	ctx := context.Background()
	secrets := map[string]string{}
	add := func(name string, edit func(*auth.Key)) *auth.Key {
		secret, k := newKey(t, name, t0)
		edit(k)
		require.NoError(t, s.CreateKey(ctx, k))
		secrets[name] = secret
		return k
	}
	// Expiries are relative to now: the cache checks them against the clock.
	now := time.Now()
	inUse := add("in use", func(k *auth.Key) { k.Models = []string{"model-a"}; k.ExpiresAt = now.Add(1000 * time.Hour) })
	require.NoError(t, s.TouchKeys(ctx, map[string]time.Time{inUse.ID: t0.Add(time.Hour)}))
	revoked := add("revoked", func(*auth.Key) {})
	require.NoError(t, s.RevokeKey(ctx, revoked.ID, t0.Add(2*time.Hour)))
	rotated := add("rotated", func(*auth.Key) {})
	secret, replacement := newKey(t, "replacement", t0)
	_, err := s.RotateKey(ctx, rotated.ID, replacement, now, 1000*time.Hour)
	require.NoError(t, err)
	secrets["replacement"] = secret
	keys, err := s.ListKeys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 4)
	return secrets, keys
}

// A database created by a gateway that had only migration 1, holding keys, upgraded by
// Open: every key reads back as it was, the ones in use still verify (the revoked one
// does not), new keys follow the old ones in the change order, and usage can be written.
func TestUpgradingAVersion1DatabaseKeepsItsKeys(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		ms, err := loadMigrations(f.driver)
		require.NoError(t, err)
		require.Greater(t, len(ms), 1, "there is something to upgrade to")
		old := f.backend(t)
		require.NoError(t, old.migrate(ctx, ms[:1]))
		require.Equal(t, []int64{1}, f.appliedMigrations(t))
		secrets, before := v1Keys(t, storeOn(f.driver, old))
		require.NotContains(t, f.tables(t), "usage_records")
		require.NoError(t, old.close())

		s := f.open(t)
		assert.Equal(t, versionsOf(ms), f.appliedMigrations(t), "every migration applied")
		after, err := s.ListKeys(ctx)
		require.NoError(t, err)
		assert.Equal(t, before, after, "every key and every field as it was")

		cache, err := auth.NewCache(ctx, s)
		require.NoError(t, err)
		for name, want := range map[string]bool{"in use": true, "revoked": false, "rotated": true, "replacement": true} {
			id, ok := cache.Verify(secrets[name])
			assert.Equal(t, want, ok, "key %q verifies", name)
			if ok {
				assert.Equal(t, name, id.Name)
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
		future := append(slices.Clone(ms), futureMigration(f.driver, len(ms)+1))
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
		secrets, before := v1Keys(t, storeOn(f.driver, b))
		tablesBefore := f.tables(t)

		broken := migration{version: len(ms) + 1, name: fmt.Sprintf("%04d_broken", len(ms)+1),
			sql: "CREATE TABLE half_done (x integer);\nINSERT INTO no_such_table VALUES (1);"}
		err = b.migrate(ctx, append(slices.Clone(ms), broken))
		require.Error(t, err)
		assert.Contains(t, err.Error(), broken.name, "the error names the migration")

		assert.Equal(t, []int64{1}, f.appliedMigrations(t), "nothing recorded")
		assert.Equal(t, tablesBefore, f.tables(t), "no table of the failed run is left")
		got, err := storeOn(f.driver, b).ListKeys(ctx)
		require.NoError(t, err, "the connection still works")
		assert.Equal(t, before, got)

		openCtx, cancel := context.WithTimeout(ctx, 5*time.Second) // a transaction left open would hold SQLite's lock for 10 s
		defer cancel()
		s, err := Open(openCtx, f.driver, f.dsn)
		require.NoError(t, err, "the database can be opened and upgraded at once")
		t.Cleanup(func() { _ = s.Close() })
		assert.Equal(t, versionsOf(ms), f.appliedMigrations(t))
		assert.NotContains(t, f.tables(t), "half_done")
		cache, err := auth.NewCache(ctx, s)
		require.NoError(t, err)
		_, ok := cache.Verify(secrets["in use"])
		assert.True(t, ok)
	})
}
