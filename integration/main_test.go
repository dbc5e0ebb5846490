package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// runDir is this test process's own directory, removed when the tests end: what a test
// builds once for the whole run (the OpenID provider) goes there.
var runDir string

// TestMain gives the in-process Caddy (and every process started without its own
// directories) a configuration and data directory of this run's own: Caddy would
// otherwise autosave each loaded configuration into the user's ~/.config/caddy and keep
// its storage, instance id, key snapshots and journals in ~/.local/share/caddy.
//
// Caddy computes its autosave path and default storage when its package initialises,
// before TestMain runs, so both are set here as well as the variables they came from.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "switchyard-integration-")
	runDir = dir
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration: a directory for Caddy's files:", err)
		os.Exit(2)
	}
	config, data := filepath.Join(dir, "config"), filepath.Join(dir, "data")
	_ = os.Setenv("XDG_CONFIG_HOME", config)
	_ = os.Setenv("XDG_DATA_HOME", data)
	caddy.ConfigAutosavePath = filepath.Join(caddy.AppConfigDir(), "autosave.json")
	caddy.DefaultStorage.Path = caddy.AppDataDir()
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
