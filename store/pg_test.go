package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
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

	"github.com/jackc/pgx/v5"
)

// PostgreSQL for the tests. SWITCHYARD_TEST_POSTGRES_DSN names a server to use (the
// tests create and drop their own schemas in it). Without it, a throwaway cluster is
// started from Debian's binaries (/usr/lib/postgresql/*/bin) when they are installed,
// and stopped when the tests end. Otherwise the PostgreSQL tests are skipped — except
// under CI=true, where they fail: CI installs PostgreSQL so that they run for real.
const postgresDSNEnv = "SWITCHYARD_TEST_POSTGRES_DSN"

var testPG struct {
	once    sync.Once
	dsn     string
	skip    string // why there is no PostgreSQL, when there is none to start
	err     error  // starting the throwaway cluster failed
	cluster *pgCluster
}

func TestMain(m *testing.M) {
	if os.Getenv(helperProcessEnv) != "" {
		os.Exit(runHelperProcess())
	}
	code := m.Run()
	if c := testPG.cluster; c != nil {
		c.stop()
	}
	os.Exit(code)
}

// postgresDSN returns the DSN of the PostgreSQL server the tests use, starting one if
// need be, or skips the test.
func postgresDSN(t testing.TB) string {
	t.Helper()
	testPG.once.Do(func() {
		if dsn := os.Getenv(postgresDSNEnv); dsn != "" {
			testPG.dsn = dsn
			return
		}
		testPG.cluster, testPG.skip, testPG.err = startCluster()
		if testPG.cluster != nil {
			testPG.dsn = testPG.cluster.dsn
		}
	})
	switch {
	case testPG.err != nil:
		t.Fatalf("PostgreSQL: starting a throwaway cluster: %v", testPG.err)
	case testPG.dsn == "":
		msg := "no PostgreSQL for the tests: " + testPG.skip + "; set " + postgresDSNEnv +
			" to a server's DSN, or install PostgreSQL (Debian: apt-get install postgresql) to have the tests start one"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (failing, not skipping: CI=true, and CI must run these tests)")
		}
		t.Skip("skipped, " + msg)
	}
	return testPG.dsn
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

// pgCluster is a PostgreSQL cluster started for the tests.
type pgCluster struct {
	bin  string // directory of initdb, pg_ctl
	root string // temporary directory: data/, the unix socket, the log
	dsn  string
	asPG bool // run the binaries as the postgres user (we are root)
}

// startCluster starts a throwaway cluster, or says why it cannot (skip) or why it
// failed (err).
func startCluster() (c *pgCluster, skip string, err error) {
	initdbs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(initdbs) == 0 {
		return nil, "no " + postgresDSNEnv + " and no PostgreSQL binaries in /usr/lib/postgresql/*/bin", nil
	}
	// The newest major version.
	sort.Slice(initdbs, func(i, j int) bool { return pgMajor(initdbs[i]) > pgMajor(initdbs[j]) })
	c = &pgCluster{bin: filepath.Dir(initdbs[0])}
	if _, err := os.Stat(filepath.Join(c.bin, "pg_ctl")); err != nil {
		return nil, "no pg_ctl beside " + initdbs[0], nil
	}
	// The server refuses to run as root; as root, run everything as "postgres".
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
	// A short path in /tmp: the unix socket's path must fit in 107 bytes.
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
	data := filepath.Join(c.root, "data")
	if out, err := c.run("initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
		"--locale=C", "--no-sync"); err != nil {
		c.removeRoot()
		return nil, "", fmt.Errorf("initdb: %v\n%s", err, out)
	}
	// A port found free may be taken before the server binds it: try a few.
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			c.removeRoot()
			return nil, "", err
		}
		opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off", port, c.root)
		out, err := c.run("pg_ctl", "-D", data, "-l", filepath.Join(c.root, "log"), "-w", "-t", "60", "-o", opts, "start")
		if err == nil {
			c.dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
			return c, "", nil
		}
		if attempt == 2 {
			logs, _ := os.ReadFile(filepath.Join(c.root, "log"))
			c.removeRoot()
			return nil, "", fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, logs)
		}
	}
}

func (c *pgCluster) run(tool string, args ...string) ([]byte, error) {
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

func (c *pgCluster) stop() {
	if out, err := c.run("pg_ctl", "-D", filepath.Join(c.root, "data"), "-m", "immediate", "-w", "stop"); err != nil {
		fmt.Fprintf(os.Stderr, "store tests: stopping the PostgreSQL cluster: %v\n%s\n", err, out)
	}
	c.removeRoot()
}

func (c *pgCluster) removeRoot() {
	if err := os.RemoveAll(c.root); err != nil {
		fmt.Fprintf(os.Stderr, "store tests: %v\n", err)
	}
}

func pgMajor(initdb string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return v
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("not a TCP address")
	}
	return addr.Port, nil
}
