package store

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/internal/pgtest"
)

// fixture is one fresh, empty database: a new SQLite file, or a new PostgreSQL schema.
type fixture struct {
	driver string
	dsn    string
}

var drivers = []string{DriverSQLite, DriverPostgres}

func newFixture(t testing.TB, driver string) *fixture {
	t.Helper()
	switch driver {
	case DriverSQLite:
		// A directory that does not exist yet: Open creates it.
		return &fixture{driver: driver, dsn: filepath.Join(t.TempDir(), "state", "switchyard.db")}
	case DriverPostgres:
		return &fixture{driver: driver, dsn: pgtest.SchemaDSN(t)}
	}
	t.Fatalf("unknown driver %q", driver)
	return nil
}

// forEachDriver runs fn as a subtest per driver, each with a fresh database.
func forEachDriver(t *testing.T, fn func(t *testing.T, f *fixture)) {
	for _, d := range drivers {
		t.Run(d, func(t *testing.T) { fn(t, newFixture(t, d)) })
	}
}

// open opens a store handle on the fixture's database, closed at the test's end.
// Several calls give several handles: several gateways sharing one database.
func (f *fixture) open(t testing.TB) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, f.driver, f.dsn)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	return s
}

// rows runs a query on a connection of its own (not the store's) and returns every
// row's values as the driver gives them ([]byte, string, int64, time.Time, nil, ...).
func (f *fixture) rows(t testing.TB, query string, args ...any) [][]any {
	t.Helper()
	ctx := context.Background()
	var out [][]any
	switch f.driver {
	case DriverSQLite:
		db, err := sql.Open("sqlite", f.dsn+"?_query_only=on&_busy_timeout=10000")
		require.NoError(t, err)
		defer db.Close()
		rows, err := db.QueryContext(ctx, query, args...)
		require.NoError(t, err)
		defer rows.Close()
		cols, err := rows.Columns()
		require.NoError(t, err)
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			require.NoError(t, rows.Scan(ptrs...))
			out = append(out, vals)
		}
		require.NoError(t, rows.Err())
	case DriverPostgres:
		conn, err := pgx.Connect(ctx, f.dsn)
		require.NoError(t, err)
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, query, args...)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			vals, err := rows.Values()
			require.NoError(t, err)
			out = append(out, vals)
		}
		require.NoError(t, rows.Err())
	}
	return out
}

// appliedMigrations lists schema_migrations' versions.
func (f *fixture) appliedMigrations(t testing.TB) []int64 {
	var vs []int64
	for _, r := range f.rows(t, `SELECT version FROM schema_migrations ORDER BY version`) {
		switch v := r[0].(type) {
		case int64:
			vs = append(vs, v)
		case int32:
			vs = append(vs, int64(v))
		default:
			t.Fatalf("version has type %T", v)
		}
	}
	return vs
}

// newKey returns a fresh secret and the key to store for it.
func newKey(t testing.TB, name string, created time.Time) (string, *auth.Key) {
	t.Helper()
	secret, err := auth.GenerateSecret()
	require.NoError(t, err)
	return secret, &auth.Key{
		ID:        auth.NewKeyID(),
		Name:      name,
		Prefix:    auth.DisplayPrefix(secret),
		Hash:      auth.HashKey(secret),
		CreatedAt: created,
	}
}

// maxSeq is the greatest Seq in the store.
func maxSeq(t testing.TB, s *Store) int64 {
	t.Helper()
	keys, err := s.ChangedSince(context.Background(), 0)
	require.NoError(t, err)
	if len(keys) == 0 {
		return 0
	}
	return keys[len(keys)-1].Seq
}

// t0 has a sub-microsecond part, which both databases drop.
var t0 = time.Date(2026, 3, 14, 15, 9, 26, 535897932, time.FixedZone("CET", 3600))

func seqsOf(keys []*auth.Key) []int64 {
	out := make([]int64, len(keys))
	for i, k := range keys {
		out[i] = k.Seq
	}
	return out
}

func idsOf(keys []*auth.Key) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.ID
	}
	return out
}

// keyStoreSuite is run against each driver, every case on a fresh database.
var keyStoreSuite = []struct {
	name string
	run  func(t *testing.T, f *fixture)
}{
	{"create and get round-trip every field", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		_, k := newKey(t, "ci runner", t0)
		k.Models = []string{"claude-sonnet", "gpt-5-mini"}
		k.ExpiresAt = t0.Add(90 * 24 * time.Hour)
		require.NoError(t, s.CreateKey(ctx, k))
		assert.Positive(t, k.Seq)

		got, err := s.GetKey(ctx, k.ID)
		require.NoError(t, err)
		want := &auth.Key{
			ID: k.ID, Name: "ci runner", Prefix: k.Prefix, Hash: k.Hash,
			Models:    []string{"claude-sonnet", "gpt-5-mini"},
			CreatedAt: t0.UTC().Truncate(time.Microsecond),
			ExpiresAt: t0.Add(90 * 24 * time.Hour).UTC().Truncate(time.Microsecond),
			Seq:       k.Seq,
		}
		assert.Equal(t, want, got)

		// No models (every model), no expiry, no creation time (now).
		before := time.Now().Add(-time.Second)
		_, bare := newKey(t, "bare", time.Time{})
		bare.Models = []string{}
		require.NoError(t, s.CreateKey(ctx, bare))
		assert.True(t, bare.CreatedAt.After(before), "CreatedAt set to now")
		got, err = s.GetKey(ctx, bare.ID)
		require.NoError(t, err)
		assert.Nil(t, got.Models)
		assert.True(t, got.ExpiresAt.IsZero())
		assert.True(t, got.LastUsedAt.IsZero())
		assert.True(t, got.RevokedAt.IsZero())
		assert.Empty(t, got.ReplacedBy)
		assert.Equal(t, time.UTC, got.CreatedAt.Location())
		assert.True(t, got.CreatedAt.Equal(bare.CreatedAt.Truncate(time.Microsecond)))
		assert.Greater(t, got.Seq, k.Seq)
	}},

	{"create refuses bad and duplicate keys", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		secret, k := newKey(t, "first", t0)
		require.NoError(t, s.CreateKey(ctx, k))
		seq := k.Seq

		bad := map[string]func(k *auth.Key){
			"no id":            func(k *auth.Key) { k.ID = "" },
			"no hash":          func(k *auth.Key) { k.Hash = auth.Hash{} },
			"no name":          func(k *auth.Key) { k.Name = "  " },
			"long prefix":      func(k *auth.Key) { k.Prefix = "sk-sy-abcdefghijklmnop" },
			"prefix is secret": func(k *auth.Key) { k.Prefix = "sk-sy-short"; k.Hash = auth.HashKey("sk-sy-short") },
			"empty model":      func(k *auth.Key) { k.Models = []string{"a", ""} },
		}
		for name, mutate := range bad {
			_, k := newKey(t, "bad", t0)
			mutate(k)
			err := s.CreateKey(ctx, k)
			assert.Error(t, err, name)
			assert.NotErrorIs(t, err, ErrConflict, name)
		}

		_, dupID := newKey(t, "same id", t0)
		dupID.ID = k.ID
		assert.ErrorIs(t, s.CreateKey(ctx, dupID), ErrConflict)
		_, dupHash := newKey(t, "same secret", t0)
		dupHash.Hash = auth.HashKey(secret)
		assert.ErrorIs(t, s.CreateKey(ctx, dupHash), ErrConflict)

		keys, err := s.ListKeys(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{k.ID}, idsOf(keys))
		assert.Equal(t, seq, maxSeq(t, s), "a refused key changes no Seq")
	}},

	{"get an unknown id", func(t *testing.T, f *fixture) {
		_, err := f.open(t).GetKey(context.Background(), "key_nosuchkey")
		assert.Same(t, auth.ErrNotFound, err)
	}},

	{"list newest first", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		keys, err := s.ListKeys(ctx)
		require.NoError(t, err)
		assert.Empty(t, keys)
		var want []string
		for _, offset := range []time.Duration{2, 0, 3, 1} { // created out of order
			_, k := newKey(t, fmt.Sprintf("key %d", offset), t0.Add(offset*time.Hour))
			require.NoError(t, s.CreateKey(ctx, k))
			want = append(want, k.ID)
		}
		want = []string{want[2], want[0], want[3], want[1]}
		keys, err = s.ListKeys(ctx)
		require.NoError(t, err)
		assert.Equal(t, want, idsOf(keys))
	}},

	{"revoke", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		_, k := newKey(t, "to revoke", t0)
		_, other := newKey(t, "bystander", t0)
		require.NoError(t, s.CreateKey(ctx, k))
		require.NoError(t, s.CreateKey(ctx, other))

		at := t0.Add(time.Hour)
		require.NoError(t, s.RevokeKey(ctx, k.ID, at))
		got, err := s.GetKey(ctx, k.ID)
		require.NoError(t, err)
		assert.True(t, got.RevokedAt.Equal(at.Truncate(time.Microsecond)))
		assert.Equal(t, other.Seq+1, got.Seq, "a revocation takes the next Seq")
		assert.Equal(t, "revoked", got.Status(time.Now()))

		// Revoked again later: the first revocation stands, and nothing changes.
		require.NoError(t, s.RevokeKey(ctx, k.ID, at.Add(time.Hour)))
		again, err := s.GetKey(ctx, k.ID)
		require.NoError(t, err)
		assert.Equal(t, got, again)

		assert.Same(t, auth.ErrNotFound, s.RevokeKey(ctx, "key_nosuchkey", at))

		// A zero time means now.
		before := time.Now().Add(-time.Second)
		require.NoError(t, s.RevokeKey(ctx, other.ID, time.Time{}))
		got, err = s.GetKey(ctx, other.ID)
		require.NoError(t, err)
		assert.True(t, got.RevokedAt.After(before))
	}},

	{"rotate without grace revokes the old key", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		_, old := newKey(t, "deploy", t0)
		old.Models = []string{"m"}
		require.NoError(t, s.CreateKey(ctx, old))
		_, repl := newKey(t, "deploy", time.Time{})
		repl.Models = []string{"m"}

		at := t0.Add(time.Hour)
		ended, err := s.RotateKey(ctx, old.ID, repl, at, 0)
		require.NoError(t, err)
		assert.True(t, ended.RevokedAt.Equal(at.Truncate(time.Microsecond)))
		assert.True(t, ended.ExpiresAt.IsZero())
		assert.Equal(t, repl.ID, ended.ReplacedBy)
		assert.Equal(t, old.Seq+1, repl.Seq, "the replacement first")
		assert.Equal(t, old.Seq+2, ended.Seq, "then the old key")

		stored, err := s.GetKey(ctx, old.ID)
		require.NoError(t, err)
		assert.Equal(t, stored, ended, "RotateKey returns the old key as stored")

		newKey, err := s.GetKey(ctx, repl.ID)
		require.NoError(t, err)
		assert.True(t, newKey.CreatedAt.Equal(at.Truncate(time.Microsecond)), "created at the rotation")
		assert.Equal(t, []string{"m"}, newKey.Models)
		assert.True(t, newKey.Active(time.Now()))
	}},

	{"rotate with grace expires the old key later", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		at := t0.Add(time.Hour)
		for _, tc := range []struct {
			name           string
			expires        time.Time
			grace          time.Duration
			wantExpiration time.Time
		}{
			{"no expiry before", time.Time{}, 24 * time.Hour, at.Add(24 * time.Hour)},
			{"later expiry is brought forward", at.Add(72 * time.Hour), 24 * time.Hour, at.Add(24 * time.Hour)},
			{"earlier expiry is kept", at.Add(10 * time.Minute), 24 * time.Hour, at.Add(10 * time.Minute)},
		} {
			_, old := newKey(t, tc.name, t0)
			old.ExpiresAt = tc.expires
			require.NoError(t, s.CreateKey(ctx, old))
			_, repl := newKey(t, tc.name, time.Time{})
			ended, err := s.RotateKey(ctx, old.ID, repl, at, tc.grace)
			require.NoError(t, err, tc.name)
			assert.True(t, ended.RevokedAt.IsZero(), tc.name)
			assert.True(t, ended.ExpiresAt.Equal(tc.wantExpiration.Truncate(time.Microsecond)),
				"%s: expires %v, want %v", tc.name, ended.ExpiresAt, tc.wantExpiration)
			assert.Equal(t, repl.ID, ended.ReplacedBy, tc.name)
			assert.Equal(t, repl.Seq+1, ended.Seq, tc.name)
		}
	}},

	{"rotate an already revoked key keeps its revocation", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		_, old := newKey(t, "revoked", t0)
		require.NoError(t, s.CreateKey(ctx, old))
		require.NoError(t, s.RevokeKey(ctx, old.ID, t0.Add(time.Minute)))
		_, repl := newKey(t, "reissued", time.Time{})
		ended, err := s.RotateKey(ctx, old.ID, repl, t0.Add(time.Hour), 0)
		require.NoError(t, err)
		assert.True(t, ended.RevokedAt.Equal(t0.Add(time.Minute).Truncate(time.Microsecond)))
		assert.Equal(t, repl.ID, ended.ReplacedBy)
	}},

	{"rotate failures store nothing", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		secret, old := newKey(t, "old", t0)
		require.NoError(t, s.CreateKey(ctx, old))
		seq := maxSeq(t, s)

		_, repl := newKey(t, "new", time.Time{})
		_, err := s.RotateKey(ctx, "key_nosuchkey", repl, t0, 0)
		assert.Same(t, auth.ErrNotFound, err)
		_, err = s.GetKey(ctx, repl.ID)
		assert.Same(t, auth.ErrNotFound, err, "the replacement of an unknown key is not stored")

		_, err = s.RotateKey(ctx, old.ID, repl, t0, -time.Second)
		assert.Error(t, err)

		// The replacement cannot be stored (same secret as the old key): the old key
		// must not be ended either.
		_, clash := newKey(t, "clash", time.Time{})
		clash.Hash = auth.HashKey(secret)
		_, err = s.RotateKey(ctx, old.ID, clash, t0, 0)
		assert.ErrorIs(t, err, ErrConflict)
		got, err := s.GetKey(ctx, old.ID)
		require.NoError(t, err)
		assert.Equal(t, old.Seq, got.Seq)
		assert.True(t, got.RevokedAt.IsZero())
		assert.Empty(t, got.ReplacedBy)
		assert.Equal(t, seq, maxSeq(t, s), "nothing written")

		// Rotating twice would leave two live replacements.
		_, err = s.RotateKey(ctx, old.ID, repl, t0, time.Hour)
		require.NoError(t, err)
		_, second := newKey(t, "second", time.Time{})
		_, err = s.RotateKey(ctx, old.ID, second, t0, 0)
		assert.ErrorIs(t, err, ErrConflict)
		_, err = s.GetKey(ctx, second.ID)
		assert.Same(t, auth.ErrNotFound, err)
	}},

	{"changed since: every change once, in Seq order", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		changed, err := s.ChangedSince(ctx, 0)
		require.NoError(t, err)
		assert.Empty(t, changed)

		var k [5]*auth.Key
		for i := range k {
			_, k[i] = newKey(t, fmt.Sprintf("k%d", i), t0)
			require.NoError(t, s.CreateKey(ctx, k[i]))
			assert.Equal(t, int64(i+1), k[i].Seq)
		}
		require.NoError(t, s.RevokeKey(ctx, k[1].ID, t0)) // seq 6
		_, repl := newKey(t, "k2 replacement", time.Time{})
		_, err = s.RotateKey(ctx, k[2].ID, repl, t0, time.Minute) // seq 7 (repl), 8 (k2)
		require.NoError(t, err)

		all, err := s.ChangedSince(ctx, 0)
		require.NoError(t, err)
		assert.Equal(t, []int64{1, 4, 5, 6, 7, 8}, seqsOf(all))
		assert.Equal(t, []string{k[0].ID, k[3].ID, k[4].ID, k[1].ID, repl.ID, k[2].ID}, idsOf(all))
		assert.False(t, all[3].RevokedAt.IsZero(), "the latest state of a key")

		since5, err := s.ChangedSince(ctx, 5)
		require.NoError(t, err)
		assert.Equal(t, []int64{6, 7, 8}, seqsOf(since5), "strictly greater than the given seq")
		since7, err := s.ChangedSince(ctx, 7)
		require.NoError(t, err)
		assert.Equal(t, []string{k[2].ID}, idsOf(since7))
		none, err := s.ChangedSince(ctx, 8)
		require.NoError(t, err)
		assert.Empty(t, none)
		neg, err := s.ChangedSince(ctx, -1)
		require.NoError(t, err)
		assert.Len(t, neg, 6)
	}},

	{"touch keys records last use without a new Seq", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		_, a := newKey(t, "a", t0)
		_, b := newKey(t, "b", t0)
		require.NoError(t, s.CreateKey(ctx, a))
		require.NoError(t, s.CreateKey(ctx, b))
		seq := maxSeq(t, s)

		used := t0.Add(time.Hour)
		require.NoError(t, s.TouchKeys(ctx, map[string]time.Time{a.ID: used, b.ID: used.Add(time.Second), "key_unknown": used}))
		require.NoError(t, s.TouchKeys(ctx, nil))
		changed, err := s.ChangedSince(ctx, seq)
		require.NoError(t, err)
		assert.Empty(t, changed, "touches wake no gateway")

		got, err := s.GetKey(ctx, a.ID)
		require.NoError(t, err)
		assert.True(t, got.LastUsedAt.Equal(used.Truncate(time.Microsecond)))
		assert.Equal(t, a.Seq, got.Seq)

		// Gateways flush out of order: an older time does not move last use back.
		require.NoError(t, s.TouchKeys(ctx, map[string]time.Time{a.ID: used.Add(-time.Minute)}))
		got, err = s.GetKey(ctx, a.ID)
		require.NoError(t, err)
		assert.True(t, got.LastUsedAt.Equal(used.Truncate(time.Microsecond)))
		require.NoError(t, s.TouchKeys(ctx, map[string]time.Time{a.ID: used.Add(time.Minute)}))
		got, err = s.GetKey(ctx, a.ID)
		require.NoError(t, err)
		assert.True(t, got.LastUsedAt.Equal(used.Add(time.Minute).Truncate(time.Microsecond)))
		assert.Equal(t, seq, maxSeq(t, s))

		// A big batch (more than SQLite's bound-variable limit, were it one statement).
		batch := map[string]time.Time{}
		for i := range 40000 {
			batch[fmt.Sprintf("key_unknown_%d", i)] = used
		}
		batch[b.ID] = used.Add(time.Hour)
		require.NoError(t, s.TouchKeys(ctx, batch))
		got, err = s.GetKey(ctx, b.ID)
		require.NoError(t, err)
		assert.True(t, got.LastUsedAt.Equal(used.Add(time.Hour).Truncate(time.Microsecond)))
	}},

	{"migrations re-run harmlessly", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		ms, err := loadMigrations(f.driver)
		require.NoError(t, err)
		var want []int64
		for _, m := range ms {
			want = append(want, int64(m.version))
		}

		s := f.open(t)
		_, k := newKey(t, "survivor", t0)
		require.NoError(t, s.CreateKey(ctx, k))
		require.NoError(t, s.ref.Load().migrate(ctx, ms), "the same migrations again")
		for range 2 {
			again := f.open(t)
			got, err := again.GetKey(ctx, k.ID)
			require.NoError(t, err)
			assert.Equal(t, k.Seq, got.Seq)
		}
		assert.Equal(t, want, f.appliedMigrations(t))
		assert.Equal(t, k.Seq, maxSeq(t, s))
	}},

	{"concurrent opens of a new database", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		const n = 4
		stores := make([]*Store, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				stores[i], errs[i] = Open(ctx, f.driver, f.dsn)
			})
		}
		close(start)
		wg.Wait()
		for i := range n {
			require.NoError(t, errs[i], "Open %d", i)
			t.Cleanup(func() { _ = stores[i].Close() })
		}
		ms, err := loadMigrations(f.driver)
		require.NoError(t, err)
		assert.Len(t, f.appliedMigrations(t), len(ms), "each migration applied once")
		for i, s := range stores {
			_, k := newKey(t, fmt.Sprintf("from %d", i), t0)
			require.NoError(t, s.CreateKey(ctx, k))
		}
		assert.Equal(t, int64(n), maxSeq(t, stores[0]))
	}},

	{"parallel writers: a poller misses no change", func(t *testing.T, f *fixture) {
		// Gateways write through their own handles while another polls ChangedSince
		// from the last Seq it saw, as auth.Cache does. If numbers were handed out in
		// an order other than commit order, the poller would step over a change.
		ctx := context.Background()
		handles := []*Store{f.open(t), f.open(t)}
		poller := f.open(t)
		const writers, perWriter = 4, 20

		seen := map[string]int64{} // key id → latest Seq seen
		var last int64
		poll := func() {
			changed, err := poller.ChangedSince(ctx, last)
			require.NoError(t, err)
			for _, k := range changed {
				require.Greater(t, k.Seq, last)
				last = k.Seq
				seen[k.ID] = k.Seq
			}
		}
		done := make(chan struct{})
		var wg sync.WaitGroup
		for w := range writers {
			s := handles[w%len(handles)]
			wg.Go(func() {
				for i := range perWriter {
					_, k := newKey(t, fmt.Sprintf("w%d-%d", w, i), t0)
					if !assert.NoError(t, s.CreateKey(ctx, k)) {
						return
					}
					if i%2 == 0 {
						assert.NoError(t, s.RevokeKey(ctx, k.ID, t0))
					}
				}
			})
		}
		go func() { wg.Wait(); close(done) }()
		for polling := true; polling; {
			select {
			case <-done:
				polling = false
			default:
			}
			poll()
		}
		poll()

		keys, err := poller.ListKeys(ctx)
		require.NoError(t, err)
		require.Len(t, keys, writers*perWriter)
		for _, k := range keys {
			assert.Equal(t, k.Seq, seen[k.ID], "key %s: latest change seen", k.Name)
		}
		assert.Equal(t, int64(writers*perWriter*3/2), last, "one Seq per write, no gaps")
	}},
}

func TestKeyStore(t *testing.T) {
	for _, d := range drivers {
		t.Run(d, func(t *testing.T) {
			for _, tc := range keyStoreSuite {
				t.Run(tc.name, func(t *testing.T) { tc.run(t, newFixture(t, d)) })
			}
		})
	}
}

// The poll every gateway makes every 250 ms must stay cheap however many keys there
// are: a range search on the seq index, no table scan, no sort.
func TestChangedSinceUsesTheSeqIndex(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		s := f.open(t)
		bulkCreate(t, s, 5000)
		var plan []string
		switch f.driver {
		case DriverSQLite:
			for _, r := range f.rows(t, `EXPLAIN QUERY PLAN SELECT `+sqliteKeyColumns+` FROM api_keys WHERE seq > ? ORDER BY seq`, 5000) {
				plan = append(plan, fmt.Sprint(r[len(r)-1]))
			}
			assert.Equal(t, []string{"SEARCH api_keys USING INDEX api_keys_by_seq (seq>?)"}, plan)
		case DriverPostgres:
			f.rows(t, `ANALYZE api_keys`)
			for _, r := range f.rows(t, `EXPLAIN SELECT `+pgKeyColumns+` FROM api_keys WHERE seq > 5000 ORDER BY seq`) {
				plan = append(plan, fmt.Sprint(r...))
			}
			require.NotEmpty(t, plan)
			assert.Regexp(t, `^Index Scan using api_keys_by_seq on api_keys`, plan[0], "plan:\n%s", strings.Join(plan, "\n"))
			for _, line := range plan {
				assert.NotContains(t, line, "Sort")
			}
		}
	})
}

func TestMigrationsMatchAcrossDrivers(t *testing.T) {
	names := map[string][]string{}
	for _, d := range drivers {
		ms, err := loadMigrations(d)
		require.NoError(t, err)
		require.NotEmpty(t, ms)
		for i, m := range ms {
			assert.Equal(t, i+1, m.version, "%s: numbered 1, 2, 3... without gaps", d)
			names[d] = append(names[d], m.name)
		}
	}
	assert.Equal(t, names[DriverSQLite], names[DriverPostgres], "one migration per number in each dialect")
}

func TestOpenRefuses(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ driver, dsn string }{
		{"mysql", "x"},
		{DriverSQLite, ""},
		{DriverSQLite, ":memory:"},
		{DriverSQLite, "file:x.db?mode=memory"},
		{DriverSQLite, filepath.Join(t.TempDir(), "a?b.db")},
		{DriverPostgres, ""},
		{DriverPostgres, "postgres://user:hunter2@[::1"},
	} {
		s, err := Open(ctx, tc.driver, tc.dsn)
		if !assert.Error(t, err, "%s %q", tc.driver, tc.dsn) {
			_ = s.Close()
			continue
		}
		assert.NotContains(t, err.Error(), "hunter2", "no password in errors")
	}
}
