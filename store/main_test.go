package store

import (
	"os"
	"testing"

	"github.com/switchyard-gw/switchyard/internal/pgtest"
)

// PostgreSQL for the tests comes from internal/pgtest only: pgtest.SchemaDSN gives a
// test a fresh schema, pgtest.DSN the server, pgtest.NewCluster a server of its own to
// stop and start. SWITCHYARD_TEST_POSTGRES_DSN names a server to use; without it a
// throwaway cluster is started, and stopped here when the tests end; failing both, the
// PostgreSQL tests are skipped, or fail under CI=true.
func TestMain(m *testing.M) {
	if os.Getenv(helperProcessEnv) != "" {
		os.Exit(runHelperProcess())
	}
	code := m.Run()
	pgtest.Stop()
	os.Exit(code)
}
