package caddymodule

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateFixtures = flag.Bool("update", false, "rewrite the expected JSON of testdata/caddyfile_adapt from the adapter's output")

// fixtureSeparator splits an adapt fixture into its Caddyfile and the JSON it adapts to.
const fixtureSeparator = "\n----------\n"

// TestCaddyfileAdaptFixtures adapts every testdata/caddyfile_adapt/*.caddyfiletest (a
// Caddyfile, a line of dashes, the expected JSON) and compares, as Caddy's own adapt
// tests do. There is one fixture per directive (directive_<name>), per block of the
// switchyard global option (option_switchyard_<block>) and per block nested deeper
// (block_<parent>_<block>), so the one to read or extend is found by its name. A warning
// from the adapter (an unformatted Caddyfile, say) fails the fixture too.
// After a deliberate change, `go test ./caddymodule -run Adapt -update` rewrites the
// expected JSON; review the diff before committing it.
func TestCaddyfileAdaptFixtures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "caddyfile_adapt", "*.caddyfiletest"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".caddyfiletest"), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			require.NoError(t, err)
			caddyfileSrc, expected, found := strings.Cut(string(raw), fixtureSeparator)
			require.True(t, found, "a fixture is a Caddyfile, a line of ten dashes, then the JSON")
			adapted, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfileSrc+"\n"), nil)
			require.NoError(t, err)
			assert.Empty(t, warnings)
			var pretty bytes.Buffer
			require.NoError(t, json.Indent(&pretty, adapted, "", "\t"))
			if *updateFixtures {
				require.NoError(t, os.WriteFile(file, []byte(caddyfileSrc+fixtureSeparator+pretty.String()+"\n"), 0o644))
				return
			}
			assert.JSONEq(t, expected, pretty.String())
		})
	}
}
