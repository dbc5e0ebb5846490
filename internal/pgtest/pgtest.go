// Package pgtest gives tests a PostgreSQL server.
//
// SWITCHYARD_TEST_POSTGRES_DSN names a server to use; tests that need a database of
// their own get a fresh schema in it (SchemaDSN), dropped when they end. Without it, a
// throwaway cluster is started from Debian's binaries (/usr/lib/postgresql/*/bin) on a
// free 127.0.0.1 port, with its unix socket in /tmp, and runs until Stop. When neither
// is possible the test is skipped, except under CI=true, where it fails: CI installs
// PostgreSQL so that these tests run for real.
//
// It is only for tests: nothing outside _test.go files should import it.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-gw/switchyard/internal/loopback"

	"github.com/jackc/pgx/v5"
)

// EnvDSN is the environment variable naming a PostgreSQL server for the tests.
const EnvDSN = "SWITCHYARD_TEST_POSTGRES_DSN"

// The server of this test process: found or started by the first DSN call, forgotten
// by Stop.
var server struct {
	mu      sync.Mutex
	ready   bool   // the fields below are set
	dsn     string // empty when there is no server
	skip    string // why there is no server, when none could be started
	err     error  // starting the throwaway cluster failed
	cluster *cluster
}

// DSN returns the DSN of the PostgreSQL server the tests use, starting a throwaway
// cluster on the first call if SWITCHYARD_TEST_POSTGRES_DSN is not set. It skips the
// test when there is no server to be had (fails it under CI=true), and fails it when
// starting the cluster failed. Tests that create tables should use SchemaDSN.
func DSN(t testing.TB) string {
	t.Helper()
	server.mu.Lock()
	if !server.ready {
		server.ready = true
		if dsn := os.Getenv(EnvDSN); dsn != "" {
			server.dsn = dsn
		} else {
			server.cluster, server.skip, server.err = startCluster()
			if server.cluster != nil {
				server.dsn = server.cluster.dsn
			}
		}
	}
	dsn, skip, err := server.dsn, server.skip, server.err
	server.mu.Unlock()
	switch {
	case err != nil:
		t.Fatalf("PostgreSQL: starting a throwaway cluster: %v", err)
	case dsn == "":
		msg := "no PostgreSQL for the tests: " + skip + "; set " + EnvDSN +
			" to a server's DSN, or install PostgreSQL (Debian: apt-get install postgresql) to have the tests start one"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (failing, not skipping: CI=true, and CI must run these tests)")
		}
		t.Skip("skipped, " + msg)
	}
	return dsn
}

// Stop stops the throwaway cluster DSN started, if it did, and forgets the server: a
// later DSN call starts a new one. Call it from TestMain after m.Run, or register it
// with t.Cleanup in a package without a TestMain. It must not run while a test is
// still using the server.
func Stop() {
	server.mu.Lock()
	defer server.mu.Unlock()
	if server.cluster != nil {
		server.cluster.stop()
	}
	server.ready, server.dsn, server.skip, server.err, server.cluster = false, "", "", nil, nil
}

// SchemaDSN creates a schema for the test in the server DSN returns (dropped when the
// test ends) and returns a DSN whose search_path selects it: to the code under test, a
// fresh and empty database.
func SchemaDSN(t testing.TB) string {
	t.Helper()
	base := DSN(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "sy_test_" + hex.EncodeToString(b[:])
	if err := exec1(base, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("PostgreSQL: create schema: %v", err)
	}
	t.Cleanup(func() {
		if err := exec1(base, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("PostgreSQL: drop schema %s: %v", schema, err)
		}
	})
	return WithSearchPath(base, schema)
}

// exec1 runs one statement on a connection of its own.
func exec1(dsn, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// WithSearchPath adds search_path to a URL or key=value DSN.
func WithSearchPath(dsn, schema string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		if u, err := url.Parse(dsn); err == nil {
			q := u.Query()
			q.Set("search_path", schema)
			u.RawQuery = q.Encode()
			return u.String()
		}
	}
	return dsn + " search_path=" + schema
}

// cluster is a PostgreSQL cluster started for the tests.
type cluster struct {
	bin  string // the directory holding initdb and pg_ctl
	root string // a temporary directory: data/, the unix socket, the server's log
	dsn  string
	port int  // 0 until first started
	asPG bool // run the binaries as the postgres user, since we are root
}

// startCluster starts a throwaway cluster, or says why it cannot (skip) or why it
// failed (err).
func startCluster() (c *cluster, skip string, err error) {
	c, skip, err = newCluster()
	if c == nil {
		return nil, skip, err
	}
	if err := c.start(); err != nil {
		c.removeRoot()
		return nil, "", err
	}
	return c, "", nil
}

// newCluster makes a cluster's data directory (initdb), without starting it.
func newCluster() (c *cluster, skip string, err error) {
	initdbs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(initdbs) == 0 {
		return nil, "no " + EnvDSN + " and no PostgreSQL binaries in /usr/lib/postgresql/*/bin", nil
	}
	// Take the newest major version.
	sort.Slice(initdbs, func(i, j int) bool { return pgMajor(initdbs[i]) > pgMajor(initdbs[j]) })
	c = &cluster{bin: filepath.Dir(initdbs[0])}
	if _, err := os.Stat(filepath.Join(c.bin, "pg_ctl")); err != nil {
		return nil, "no pg_ctl beside " + initdbs[0], nil
	}
	// The server will not run as root; as root, run everything as "postgres".
	var pgUser *user.User
	if os.Geteuid() == 0 {
		if pgUser, err = user.Lookup("postgres"); err != nil {
			return nil, "running as root and there is no postgres user to run the server as", nil
		}
		if _, err := exec.LookPath("runuser"); err != nil {
			return nil, "running as root and runuser is missing", nil
		}
		c.asPG = true
	}
	// A short path in /tmp: a unix socket's path must fit in 107 bytes.
	if c.root, err = os.MkdirTemp("/tmp", "sy-pg-"); err != nil {
		return nil, "", err
	}
	if pgUser != nil {
		uid, _ := strconv.Atoi(pgUser.Uid)
		gid, _ := strconv.Atoi(pgUser.Gid)
		if err := os.Chown(c.root, uid, gid); err != nil {
			c.removeRoot()
			return nil, "", err
		}
	}
	if out, err := c.run("initdb", "-D", c.data(), "-U", "postgres", "-A", "trust", "-E", "UTF8",
		"--locale=C", "--no-sync"); err != nil {
		c.removeRoot()
		return nil, "", fmt.Errorf("initdb: %v\n%s", err, out)
	}
	return c, "", nil
}

func (c *cluster) data() string { return filepath.Join(c.root, "data") }

// start starts the server: on a free port the first time, on the same port after.
func (c *cluster) start() error {
	// A port found free can be taken before the server binds it: try a few.
	for attempt := 0; ; attempt++ {
		port := c.port
		if port == 0 {
			var err error
			if port, err = loopback.FreePort(); err != nil {
				return err
			}
		}
		opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off", port, c.root)
		out, err := c.run("pg_ctl", "-D", c.data(), "-l", filepath.Join(c.root, "log"), "-w", "-t", "60", "-o", opts, "start")
		if err == nil {
			c.port = port
			c.dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
			return nil
		}
		if attempt == 2 || c.port != 0 {
			logs, _ := os.ReadFile(filepath.Join(c.root, "log"))
			return fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, logs)
		}
	}
}

// Cluster is a PostgreSQL server of one test's own, which the test may stop and start
// again, on the same port, to see what its clients do through an outage.
type Cluster struct {
	c *cluster
}

// NewCluster starts a cluster for the test from Debian's binaries, removed when the
// test ends. It skips the test when there are no binaries (fails it under CI=true);
// SWITCHYARD_TEST_POSTGRES_DSN does not help here, since a server the tests did not
// start cannot be stopped by them.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	c, skip, err := newCluster()
	switch {
	case err != nil:
		t.Fatalf("PostgreSQL: making a throwaway cluster: %v", err)
	case c == nil:
		msg := "no PostgreSQL server binaries for a test that stops and starts its own server: " + skip +
			"; install PostgreSQL (Debian: apt-get install postgresql)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (failing, not skipping: CI=true, and CI must run these tests)")
		}
		t.Skip("skipped, " + msg)
	}
	if err := c.start(); err != nil {
		c.removeRoot()
		t.Fatalf("PostgreSQL: %v", err)
	}
	t.Cleanup(c.stop)
	return &Cluster{c: c}
}

// DSN is the server's connection string (the same after a restart).
func (c *Cluster) DSN() string { return c.c.dsn }

// Stop shuts the server down the way an operator's restart does (pg_ctl stop -m fast:
// clients are disconnected) and waits until it is down.
func (c *Cluster) Stop(t testing.TB) {
	t.Helper()
	if out, err := c.c.run("pg_ctl", "-D", c.c.data(), "-m", "fast", "-w", "stop"); err != nil {
		t.Fatalf("PostgreSQL: pg_ctl stop: %v\n%s", err, out)
	}
}

// Start starts the server again on its port and waits until it takes connections.
func (c *Cluster) Start(t testing.TB) {
	t.Helper()
	if err := c.c.start(); err != nil {
		t.Fatalf("PostgreSQL: %v", err)
	}
}

func (c *cluster) run(tool string, args ...string) ([]byte, error) {
	path := filepath.Join(c.bin, tool)
	var cmd *exec.Cmd
	if c.asPG {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = c.root
	return cmd.CombinedOutput()
}

func (c *cluster) stop() {
	if out, err := c.run("pg_ctl", "-D", c.data(), "-m", "immediate", "-w", "stop"); err != nil && !strings.Contains(string(out), "Is server running?") {
		fmt.Fprintf(os.Stderr, "pgtest: stopping the PostgreSQL cluster: %v\n%s\n", err, out)
	}
	c.removeRoot()
}

func (c *cluster) removeRoot() {
	if err := os.RemoveAll(c.root); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
	}
}

// pgMajor reads the major version from /usr/lib/postgresql/<major>/bin/initdb.
func pgMajor(initdb string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return v
}
