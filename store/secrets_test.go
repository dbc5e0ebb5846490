package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/auth"
)

// No part of a key's secret beyond its display prefix may reach the database: keys
// are created, rotated, used and revoked through the store with known secrets, then
// every column of every row of every table is searched for them, and for SQLite the
// raw bytes of the database and its WAL as well.
func TestNoSecretIsStored(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		var secrets []string
		var prefixes []string
		for i := range 3 {
			secret, k := newKey(t, fmt.Sprintf("key %d", i), time.Time{})
			k.Models = []string{"claude-sonnet"}
			require.NoError(t, s.CreateKey(ctx, k))
			secrets, prefixes = append(secrets, secret), append(prefixes, k.Prefix)
			if i == 1 {
				newSecret, repl := newKey(t, "rotated", time.Time{})
				_, err := s.RotateKey(ctx, k.ID, repl, time.Time{}, time.Hour)
				require.NoError(t, err)
				secrets = append(secrets, newSecret)
			}
			if i == 2 {
				require.NoError(t, s.RevokeKey(ctx, k.ID, time.Time{}))
			}
		}
		c, err := auth.NewCache(ctx, s)
		require.NoError(t, err)
		for _, secret := range secrets {
			c.Verify(secret)
		}
		require.NoError(t, c.FlushTouched(ctx))

		var needles [][]byte
		for _, secret := range secrets {
			body := strings.TrimPrefix(secret, auth.DisplayPrefix(secret)) // never shown anywhere
			needles = append(needles,
				[]byte(secret),
				[]byte(body),
				[]byte(body[len(body)/2:]), // a fragment
				[]byte(hex.EncodeToString([]byte(secret))),
				[]byte(base64.StdEncoding.EncodeToString([]byte(secret))),
				[]byte(base64.RawURLEncoding.EncodeToString([]byte(secret))),
			)
		}
		check := func(where string, data []byte) {
			t.Helper()
			for _, n := range needles {
				if bytes.Contains(bytes.ToLower(data), bytes.ToLower(n)) {
					t.Errorf("%s holds (part of) a secret: %q", where, n)
				}
			}
		}

		// Every table, every column, every row.
		var tablesQuery, columnsQuery string
		switch f.driver {
		case DriverSQLite:
			tablesQuery = `SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name`
			columnsQuery = `SELECT name FROM pragma_table_info(?)`
		case DriverPostgres:
			tablesQuery = `SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1`
			columnsQuery = `SELECT column_name::text FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1`
		}
		var tables []string
		for _, r := range f.rows(t, tablesQuery) {
			tables = append(tables, fmt.Sprint(r[0]))
		}
		assert.Subset(t, tables, []string{"api_keys", "schema_migrations"})
		var all bytes.Buffer // every value, for the positive check below
		for _, table := range tables {
			var cols []string
			for _, r := range f.rows(t, columnsQuery, table) {
				cols = append(cols, fmt.Sprint(r[0]))
			}
			require.NotEmpty(t, cols, table)
			for _, col := range cols {
				for i, r := range f.rows(t, fmt.Sprintf(`SELECT %q FROM %q`, col, table)) {
					var v []byte
					switch x := r[0].(type) {
					case []byte:
						v = x
					case string:
						v = []byte(x)
					default:
						v = fmt.Append(nil, x)
					}
					check(fmt.Sprintf("%s.%s row %d", table, col, i), v)
					all.Write(v)
					all.WriteByte(0)
				}
			}
		}
		// The search does see the rows: the display prefixes and hashes are there.
		for i, p := range prefixes {
			assert.True(t, bytes.Contains(all.Bytes(), []byte(p)), "prefix %d found", i)
		}
		h := auth.HashKey(secrets[0])
		assert.True(t, bytes.Contains(all.Bytes(), h[:]), "hash found")

		if f.driver != DriverSQLite {
			return
		}
		// The file and its write-ahead log, while open; then the file once closed (the
		// log checkpointed into it).
		for _, suffix := range []string{"", "-wal"} {
			data, err := os.ReadFile(f.dsn + suffix)
			require.NoError(t, err)
			check("database file"+suffix, data)
		}
		require.NoError(t, s.Close())
		data, err := os.ReadFile(f.dsn)
		require.NoError(t, err)
		check("database file after close", data)
		assert.True(t, bytes.Contains(data, []byte(prefixes[0])), "the file holds the rows")
	})
}
