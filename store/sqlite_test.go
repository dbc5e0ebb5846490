package store

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/auth"
)

func TestSQLiteFileSettings(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, DriverSQLite)
	s := f.open(t)
	b := s.ref.Load().backend.(*sqliteBackend)

	info, err := os.Stat(f.dsn)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "the database file is private")

	for name, pragma := range map[string]struct{ query, want string }{
		"journal mode":          {"PRAGMA journal_mode", "wal"},
		"foreign keys":          {"PRAGMA foreign_keys", "1"},
		"busy timeout":          {"PRAGMA busy_timeout", strconv.FormatInt(sqliteBusyTimeout.Milliseconds(), 10)},
		"synchronous":           {"PRAGMA synchronous", "2"}, // FULL
		"readers: journal mode": {"PRAGMA journal_mode", "wal"},
	} {
		db := b.w
		if strings.HasPrefix(name, "readers") {
			db = b.r
		}
		var got string
		require.NoError(t, db.QueryRowContext(ctx, pragma.query).Scan(&got), name)
		assert.Equal(t, pragma.want, strings.ToLower(got), name)
	}
	for _, q := range []string{"PRAGMA foreign_keys", "PRAGMA busy_timeout", "PRAGMA query_only"} {
		var got int
		require.NoError(t, b.r.QueryRowContext(ctx, q).Scan(&got))
		assert.NotZero(t, got, "read pool: %s", q)
	}
}

// The helper process: a second gateway process writing to the same SQLite file.
const helperProcessEnv = "SWITCHYARD_STORE_TEST_HELPER"

func runHelperProcess() int {
	path := os.Getenv(helperProcessEnv)
	n, _ := strconv.Atoi(os.Getenv(helperProcessEnv + "_N"))
	ctx := context.Background()
	s, err := Open(ctx, DriverSQLite, path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	defer s.Close()
	for i := range n {
		secret, err := auth.GenerateSecret()
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
		k := &auth.Key{ID: auth.NewKeyID(), Name: fmt.Sprintf("child %d", i), Prefix: auth.DisplayPrefix(secret), Hash: auth.HashKey(secret)}
		if err := s.CreateKey(ctx, k); err != nil {
			fmt.Fprintln(os.Stderr, "helper: create:", err)
			return 1
		}
		if err := s.RevokeKey(ctx, k.ID, time.Time{}); err != nil {
			fmt.Fprintln(os.Stderr, "helper: revoke:", err)
			return 1
		}
		if err := s.TouchKeys(ctx, map[string]time.Time{k.ID: time.Now()}); err != nil {
			fmt.Fprintln(os.Stderr, "helper: touch:", err)
			return 1
		}
	}
	return 0
}

// Two processes share one SQLite file, each opening it (and migrating) at the same
// time and then writing; this one also polls. Every write must be seen once, in order.
func TestSQLiteTwoProcesses(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, DriverSQLite)
	const n = 40

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), helperProcessEnv+"="+f.dsn, helperProcessEnv+"_N="+strconv.Itoa(n))
	var childOut strings.Builder
	child.Stdout, child.Stderr = &childOut, &childOut
	require.NoError(t, child.Start())
	childDone := make(chan error, 1)
	go func() { childDone <- child.Wait() }()

	s := f.open(t)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			_, k := newKey(t, fmt.Sprintf("parent %d", i), time.Time{})
			if !assert.NoError(t, s.CreateKey(ctx, k)) || !assert.NoError(t, s.RevokeKey(ctx, k.ID, time.Time{})) {
				return
			}
		}
	})

	poller := f.open(t)
	var last int64
	seen := map[string]int64{}
	poll := func() {
		changed, err := poller.ChangedSince(ctx, last)
		require.NoError(t, err)
		for _, k := range changed {
			require.Greater(t, k.Seq, last)
			last, seen[k.ID] = k.Seq, k.Seq
		}
	}
	var childErr error
	for waiting := true; waiting; {
		select {
		case childErr = <-childDone:
			waiting = false
		default:
			poll()
			time.Sleep(time.Millisecond)
		}
	}
	require.NoError(t, childErr, "helper process:\n%s", childOut.String())
	wg.Wait()
	poll()

	keys, err := poller.ListKeys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 2*n)
	for _, k := range keys {
		assert.Equal(t, k.Seq, seen[k.ID], "%s: latest change seen", k.Name)
		assert.False(t, k.RevokedAt.IsZero())
	}
	assert.Equal(t, int64(4*n), last, "create and revoke, each one Seq, in both processes")
	ms, err := loadMigrations(DriverSQLite)
	require.NoError(t, err)
	assert.Len(t, f.appliedMigrations(t), len(ms), "each migration applied once")
}
