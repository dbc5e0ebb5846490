package store

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
)

// Fingerprint names the database a driver and DSN lead to, without the password: for
// SQLite the file's absolute path, for PostgreSQL the first host and port, the
// database, the user and the search_path. It is a hash, fit for a file that says which
// store it was taken from (the key snapshot), and is the same for two DSNs that differ
// only in password or pool settings.
func Fingerprint(driver, dsn string) string {
	parts := []string{driver}
	switch driver {
	case DriverSQLite:
		if abs, err := filepath.Abs(dsn); err == nil {
			dsn = abs
		}
		parts = append(parts, dsn)
	case DriverPostgres:
		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil {
			parts = append(parts, "unparsed")
			break
		}
		parts = append(parts, cfg.Host, strconv.Itoa(int(cfg.Port)), cfg.Database, cfg.User, cfg.RuntimeParams["search_path"])
	}
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}
