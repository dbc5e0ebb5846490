package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-gw/switchyard/internal/pgtest"
)

// PostgreSQL for the tests: see internal/pgtest. SWITCHYARD_TEST_POSTGRES_DSN names a
// server to use (the tests create and drop their own schemas in it); without it a
// throwaway cluster is started and stopped when the tests end; failing both, the
// PostgreSQL tests are skipped, or fail under CI=true.
const postgresDSNEnv = pgtest.EnvDSN

func TestMain(m *testing.M) {
	if os.Getenv(helperProcessEnv) != "" {
		os.Exit(runHelperProcess())
	}
	code := m.Run()
	pgtest.Stop()
	os.Exit(code)
}

// postgresDSN returns the DSN of the PostgreSQL server the tests use, starting one if
// need be, or skips the test.
func postgresDSN(t testing.TB) string {
	t.Helper()
	return pgtest.DSN(t)
}

// postgresSchemaDSN creates a schema of its own for the test (dropped at its end) and
// returns a DSN whose search_path selects it: a fresh, empty database as far as the
// store can tell.
func postgresSchemaDSN(t testing.TB) string {
	t.Helper()
	base := postgresDSN(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "sy_test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("PostgreSQL: connect to %s: %v", postgresDSNEnv, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("PostgreSQL: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("PostgreSQL: drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("PostgreSQL: drop schema %s: %v", schema, err)
		}
	})
	return withSearchPath(base, schema)
}

// withSearchPath adds search_path to a URL or key=value DSN.
func withSearchPath(dsn, schema string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err == nil {
			q := u.Query()
			q.Set("search_path", schema)
			u.RawQuery = q.Encode()
			return u.String()
		}
	}
	return dsn + " search_path=" + schema
}
