package integration

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// processConfig is a Caddyfile for a gateway run as its own process: the gateway site,
// a simulated upstream site, and the admin endpoint, each on a loopback port, with
// Caddy's storage in dir.
type processConfig struct {
	path                       string
	gwPort, simPort, adminPort int
}

// writeProcessConfig writes it for the ports given (gateway, simulator, admin);
// switchyard gives the body of the switchyard option for the simulator's port (store,
// journal, keys, models).
func writeProcessConfig(t *testing.T, dir string, ports []int, switchyard func(simPort int) string) processConfig {
	t.Helper()
	return writeProcessConfigWith(t, dir, ports, processExtras{}, switchyard)
}

// processExtras are lines a test adds to a process's Caddyfile: global options, and
// directives of the gateway site before its switchyard handlers.
type processExtras struct {
	global, site string
}

// writeProcessConfigWith is writeProcessConfig with extra lines.
func writeProcessConfigWith(t *testing.T, dir string, ports []int, extras processExtras, switchyard func(simPort int) string) processConfig {
	t.Helper()
	c := processConfig{path: filepath.Join(dir, "Caddyfile"), gwPort: ports[0], simPort: ports[1], adminPort: ports[2]}
	require.NoError(t, os.WriteFile(c.path, []byte(fmt.Sprintf(`{
	admin 127.0.0.1:%d
	default_bind 127.0.0.1
	storage file_system %s
%s
	switchyard {
%s
	}
}
http://127.0.0.1:%d {
%s
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
`, c.adminPort, filepath.Join(dir, "caddy-data"), extras.global, switchyard(c.simPort), c.gwPort, extras.site, c.simPort)), 0o600))
	return c
}

// processGateway is a gateway running as a process of its own, with its own admin
// port, gateway port, simulated upstream, journal and Caddy storage.
type processGateway struct {
	*gateway
	name   string
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has ended
	log    string
}

// startGatewayProcess starts a gateway process keeping Caddy's files in dir (XDG_DATA_HOME
// and XDG_CONFIG_HOME are dir/xdg, so the key snapshot and a PostgreSQL gateway's
// default journal are there too) and waits until it answers. switchyard gives the body
// of the switchyard option for the simulator's port. A second start in the same dir
// finds what the first left there (journal, key snapshot, SQLite file); each start gets
// new ports and its own log, dir/gateway-<name>.log. The process is killed when the test
// ends; if the test failed, the end of its log is shown.
func startGatewayProcess(t *testing.T, caddy func(args ...string) *exec.Cmd, name, dir string, switchyard func(simPort int) string) *processGateway {
	t.Helper()
	return startGatewayProcessWith(t, caddy, name, dir, processExtras{}, switchyard)
}

// startGatewayProcessWith is startGatewayProcess with extra Caddyfile lines.
func startGatewayProcessWith(t *testing.T, caddy func(args ...string) *exec.Cmd, name, dir string, extras processExtras, switchyard func(simPort int) string) *processGateway {
	t.Helper()
	var p *processGateway
	onFreePorts(t, 3, func(ports []int) error {
		cfg := writeProcessConfigWith(t, dir, ports, extras, switchyard)
		p = &processGateway{
			gateway: &gateway{
				base:  "http://127.0.0.1:" + strconv.Itoa(cfg.gwPort),
				admin: "http://127.0.0.1:" + strconv.Itoa(cfg.adminPort),
			},
			name:   name,
			exited: make(chan struct{}),
			log:    filepath.Join(dir, "gateway-"+name+".log"),
		}
		p.cmd = caddy("run", "--config", cfg.path, "--adapter", "caddyfile")
		p.cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+filepath.Join(dir, "xdg"), "XDG_CONFIG_HOME="+filepath.Join(dir, "xdg"))
		log, err := os.Create(p.log)
		require.NoError(t, err)
		p.cmd.Stdout, p.cmd.Stderr = log, log
		require.NoError(t, p.cmd.Start())
		go func(p *processGateway) {
			_ = p.cmd.Wait()
			close(p.exited)
		}(p)
		t.Cleanup(func() {
			p.kill(t)
			_ = log.Close()
			if t.Failed() {
				p.showLog(t)
			}
		})
		return p.waitUp(t)
	})
	return p
}

// waitUp waits until the gateway answers on its port; it returns an error holding the
// end of the log if the process exited first.
func (p *processGateway) waitUp(t *testing.T) error {
	t.Helper()
	require.Eventually(t, func() bool {
		select {
		case <-p.exited:
			return true
		default:
			return p.answers()
		}
	}, waitLong, pollEvery, "gateway %s did not start", p.name)
	select {
	case <-p.exited:
		b, _ := os.ReadFile(p.log)
		return errors.New("gateway " + p.name + " exited at start: " + string(b[max(0, len(b)-2000):]))
	default:
		return nil
	}
}

// kill ends the gateway with SIGKILL, as a crash would, and waits for it.
func (p *processGateway) kill(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// showLog logs the last lines the gateway wrote.
func (p *processGateway) showLog(t *testing.T) {
	b, err := os.ReadFile(p.log)
	if err != nil {
		t.Logf("gateway %s: %v", p.name, err)
		return
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	t.Logf("gateway %s, end of its log:\n%s", p.name, strings.Join(lines, "\n"))
}

// sharedChatGateway is the switchyard option of a gateway keeping its keys and usage in
// the PostgreSQL database dsn names, its journal in dir/journal, with the static key
// testKey and one model, shared-chat, served by the process's simulator.
func sharedChatGateway(dsn, dir string) func(simPort int) string {
	return func(simPort int) string {
		return fmt.Sprintf(`		store postgres %q
		journal %s
		key static %s
		model shared-chat {
			candidate sim {
				protocol family_a
				url http://127.0.0.1:%d/v1
				upstream_model sim-basic
			}
		}`, dsn, filepath.Join(dir, "journal"), testKey, simPort)
	}
}
