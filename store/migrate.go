package store

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// migrationFiles holds the schema, one directory per driver. A migration is a file
// NNNN_description.sql; both directories have the same numbers, and a number's two
// files make the same change in each database's dialect. Migrations are never edited
// once released: a change is a new number.
//
// 0002_usage adds the usage ledger: usage_records, one row per metered request, and
// ledger_journals, how far each gateway's journal has been written (see usage.go). Its
// key_id does not refer to api_keys, though 0001's comments expected it to: keys from
// the configuration ("static:name") are metered too and are not in that table.
//
//go:embed migrations
var migrationFiles embed.FS

// migration is one schema change.
type migration struct {
	version int
	name    string // file name without ".sql"
	sql     string
}

// loadMigrations returns the driver's migrations in version order.
func loadMigrations(driver string) ([]migration, error) {
	dir := path.Join("migrations", driver)
	entries, err := fs.ReadDir(migrationFiles, dir)
	if err != nil {
		return nil, err
	}
	var ms []migration
	seen := map[int]string{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".sql")
		if !ok || e.IsDir() {
			continue
		}
		num, _, _ := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s/%s: the name must start with a positive number", dir, e.Name())
		}
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %s and %s in %s have the same number", other, name, dir)
		}
		seen[v] = name
		body, err := fs.ReadFile(migrationFiles, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: name, sql: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	return ms, nil
}

// pending returns the migrations whose versions are not in applied. A database may
// have versions this binary does not know (a newer gateway migrated it during a
// rolling upgrade): migrations only add, so this one keeps working with what it knows.
func pending(ms []migration, applied map[int]bool) []migration {
	var out []migration
	for _, m := range ms {
		if !applied[m.version] {
			out = append(out, m)
		}
	}
	return out
}
