package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// processConfig is a Caddyfile for a gateway run as its own process: the gateway site,
// a simulated upstream site, and the admin endpoint, each on a free loopback port, with
// Caddy's storage in dir.
type processConfig struct {
	path                       string
	gwPort, simPort, adminPort int
}

// writeProcessConfig writes it; switchyard gives the body of the switchyard option for
// the simulator's port (store, journal, keys, models).
func writeProcessConfig(t *testing.T, dir string, switchyard func(simPort int) string) processConfig {
	t.Helper()
	c := processConfig{path: filepath.Join(dir, "Caddyfile"), gwPort: freePort(t), simPort: freePort(t), adminPort: freePort(t)}
	require.NoError(t, os.WriteFile(c.path, []byte(fmt.Sprintf(`{
	admin 127.0.0.1:%d
	default_bind 127.0.0.1
	storage file_system %s
	switchyard {
%s
	}
}
http://127.0.0.1:%d {
	switchyard_auth
	switchyard_model
	switchyard_proxy
	handle_errors {
		switchyard_errors
	}
}
http://127.0.0.1:%d {
	switchyard_simulator
}
`, c.adminPort, filepath.Join(dir, "caddy-data"), switchyard(c.simPort), c.gwPort, c.simPort)), 0o600))
	return c
}
