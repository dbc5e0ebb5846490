package caddymodule

import (
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/switchyard-gw/switchyard/console"
)

func init() {
	caddy.RegisterModule(Console{})
}

// consoleAPI is the keys and models API over this app, for the admin endpoint and the
// console page alike. Changes made through it are recorded as the "admin API"'s unless
// the caller sets the API's Actor (the console handler does: its basic-auth user).
func (a *App) consoleAPI(requireHeader string) *console.API {
	api := &console.API{Keys: a.manager, Models: a.modelInfo, Usage: a.usageReader, Latency: a.latencyReader,
		Requests: a.requestLog, RequireHeader: requireHeader, Standing: a.limitStanding, ResetHealth: a.resetHealth}
	if a.alerts != nil {
		api.Alerts = a.alertsView
	}
	return api
}

// consoleActor names the console's operator in the audit trail: "console:" and the user
// Caddy's authentication handler (basic_auth) let in; "console" when the console is
// served without one.
func consoleActor(r *http.Request) string {
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if repl != nil {
		if user, _ := repl.GetString("http.auth.user.id"); user != "" {
			return "console:" + user
		}
	}
	return "console"
}

// modelInfo lists the models with their candidates' names and live circuit states.
func (a *App) modelInfo() []console.ModelInfo {
	now := time.Now()
	var out []console.ModelInfo
	for _, m := range a.catalog.Models() {
		info := console.ModelInfo{ID: m.ID, DisplayName: m.DisplayName, Protocols: m.ProtocolTokens(), Capabilities: m.CapabilityFlags(),
			ContextWindow: m.ContextWindow, MaxOutputTokens: m.MaxOutputTokens}
		for _, c := range m.Candidates {
			info.Candidates = append(info.Candidates, console.CandidateInfo{
				Name: c.Name, Protocol: c.Protocol.Token(), Priority: c.Priority,
				State: a.upstreams[c].Health.State(now).String(),
			})
		}
		out = append(out, info)
	}
	return out
}

// noStore answers every API call when the configuration has no key store.
var noStore = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte(`{"error":"this gateway has no key store configured (switchyard { store ... })"}` + "\n"))
})

// Console is the `switchyard_console` handler: the web console page and its API. Mount
// it behind authentication with its path stripped, for example:
//
//	handle_path /console/* {
//		basic_auth { admin <hash> }
//		switchyard_console
//	}
type Console struct {
	app     *App
	handler http.Handler // the page and its API, built once
}

// CaddyModule returns the Caddy module information.
func (Console) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.switchyard_console", New: func() caddy.Module { return new(Console) }}
}

// Provision implements caddy.Provisioner.
func (c *Console) Provision(ctx caddy.Context) (err error) {
	if c.app, err = loadApp(ctx); err != nil {
		return err
	}
	api := c.app.consoleAPI(console.ConsoleHeader)
	api.Actor = consoleActor
	c.handler = console.New(api)
	return nil
}

func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	if c.app.manager == nil && strings.HasPrefix(r.URL.Path, "/api/") {
		noStore.ServeHTTP(w, r)
		return nil
	}
	c.handler.ServeHTTP(w, r)
	return nil
}

// UnmarshalCaddyfile reads `switchyard_console` (no options).
func (c *Console) UnmarshalCaddyfile(d *caddyfile.Dispenser) error { return takesNoOptions(d) }

// Interface guards
var (
	_ caddyhttp.MiddlewareHandler = (*Console)(nil)
	_ caddy.Provisioner           = (*Console)(nil)
	_ caddyfile.Unmarshaler       = (*Console)(nil)
)
