package caddymodule

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
)

func init() {
	caddy.RegisterModule(AdminAPI{})
}

// adminApp finds the switchyard app of the configuration being loaded, or nil when it has
// none. Caddy provisions admin routers with each configuration it loads, before that
// configuration's apps start, so the routes always serve the configuration in force.
func adminApp(ctx caddy.Context) (*App, error) {
	a, err := ctx.AppIfConfigured("switchyard")
	if errors.Is(err, caddy.ErrNotConfigured) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return a.(*App), nil
}

// AdminAPI is Switchyard's part of Caddy's admin endpoint, everything under /switchyard/:
// the candidates' live health (GET /switchyard/health, and
// POST /switchyard/health/{model}/{candidate}/reset to clear it), client set-ups
// (GET /switchyard/connect/{client}), and the console API over the key store: keys,
// projects, audit, models, usage, requests, latency and alerts. It is what
// `caddy switchyard …` talks to. Caddy loads every admin.api module it knows, so no
// configuration names it.
type AdminAPI struct {
	app *App
	// api is the console API, or noStore when the configuration keeps no keys.
	api http.Handler
	// connect answers set-ups and health resets: the console API whenever there is an
	// app, store or not.
	connect http.Handler
}

// CaddyModule returns the Caddy module information.
func (AdminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "admin.api.switchyard", New: func() caddy.Module { return new(AdminAPI) }}
}

// Provision implements caddy.Provisioner: the handlers are built once per configuration.
func (a *AdminAPI) Provision(ctx caddy.Context) error {
	app, err := adminApp(ctx)
	if err != nil {
		return err
	}
	a.serveApp(app)
	return nil
}

// serveApp builds the handlers over app (nil: the configuration has none).
func (a *AdminAPI) serveApp(app *App) {
	a.app, a.api, a.connect = app, noStore, noApp
	if app != nil {
		api := app.consoleAPI("").Handler()
		a.connect = api
		if app.manager != nil {
			a.api = api
		}
	}
}

// noApp answers set-ups when the configuration has no switchyard app.
var noApp = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte(`{"error":"this configuration has no switchyard app"}` + "\n"))
})

// consoleRoutes are the first path segments the console API serves on the admin endpoint.
var consoleRoutes = map[string]bool{
	"keys": true, "models": true, "usage": true, "requests": true, "latency": true, "alerts": true,
	"projects": true, "audit": true, "me": true, "tokens": true, "people": true, "sessions": true, "settings": true,
}

// Routes implements caddy.AdminRouter: one route, dispatched by its first segment.
func (a *AdminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: "/switchyard/", Handler: caddy.AdminHandlerFunc(a.serve)}}
}

func (a *AdminAPI) serve(w http.ResponseWriter, r *http.Request) error {
	rest := strings.TrimPrefix(r.URL.Path, "/switchyard/")
	first, _, nested := strings.Cut(rest, "/")
	switch {
	case rest == "health":
		return a.serveHealth(w, r)
	case first == "connect" && nested, first == "health" && nested:
		// Both serve from the configuration alone, store or not (a reset is audited
		// when there is an audit trail).
		http.StripPrefix("/switchyard", a.connect).ServeHTTP(w, r)
	case consoleRoutes[first]:
		http.StripPrefix("/switchyard", a.api).ServeHTTP(w, r)
	default:
		// Paths no route here serves get the admin endpoint's own not-found.
		http.NotFound(w, r)
	}
	return nil
}

func (a *AdminAPI) serveHealth(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Message: "use GET"}
	}
	rows := []candidateHealth{}
	if a.app != nil {
		rows = a.app.healthRows(time.Now())
	}
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(map[string]any{"candidates": rows})
}

// Interface guards
var (
	_ caddy.AdminRouter = (*AdminAPI)(nil)
	_ caddy.Provisioner = (*AdminAPI)(nil)
)
