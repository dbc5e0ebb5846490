package caddymodule

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/switchyard-gw/switchyard/simulator"
)

func init() {
	caddy.RegisterModule(Simulator{})
}

// Simulator is the `switchyard_simulator` handler: a simulated upstream provider that
// speaks all three generation shapes, for the example config, tests and demos. The
// upstream model name selects its behaviour (see the simulator package).
type Simulator struct {
	// APIKey is the credential the simulator requires. Default: empty, which accepts any.
	APIKey string `json:"api_key,omitempty"`

	handler http.Handler
}

// CaddyModule returns the Caddy module information.
func (Simulator) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.switchyard_simulator", New: func() caddy.Module { return new(Simulator) }}
}

// Provision implements caddy.Provisioner.
func (s *Simulator) Provision(caddy.Context) error {
	s.handler = simulator.New(simulator.Config{APIKey: caddy.NewReplacer().ReplaceKnown(s.APIKey, "")})
	return nil
}

func (s *Simulator) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	s.handler.ServeHTTP(w, r)
	return nil
}

// UnmarshalCaddyfile reads `switchyard_simulator [{ api_key <key> }]`.
func (s *Simulator) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "api_key":
			if !d.Args(&s.APIKey) {
				return d.ArgErr()
			}
		default:
			return d.Errf("switchyard_simulator: unknown option %q", d.Val())
		}
	}
	return nil
}

// Interface guards
var (
	_ caddyhttp.MiddlewareHandler = (*Simulator)(nil)
	_ caddy.Provisioner           = (*Simulator)(nil)
	_ caddyfile.Unmarshaler       = (*Simulator)(nil)
)
