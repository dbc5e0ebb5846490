package caddymodule

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
)

func init() {
	caddy.RegisterModule(HealthAPI{})
	caddy.RegisterModule(KeysAPI{})
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

// HealthAPI serves the candidates' live health on Caddy's admin endpoint:
// GET /switchyard/health.
type HealthAPI struct {
	app *App
}

// CaddyModule returns the Caddy module information.
func (HealthAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "admin.api.switchyard_health", New: func() caddy.Module { return new(HealthAPI) }}
}

// Provision implements caddy.Provisioner.
func (h *HealthAPI) Provision(ctx caddy.Context) (err error) {
	h.app, err = adminApp(ctx)
	return err
}

// Routes implements caddy.AdminRouter.
func (h *HealthAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: "/switchyard/health", Handler: caddy.AdminHandlerFunc(h.serve)}}
}

func (h *HealthAPI) serve(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Message: "use GET"}
	}
	rows := []candidateHealth{}
	if h.app != nil {
		rows = h.app.healthRows(time.Now())
	}
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(map[string]any{"candidates": rows})
}

// KeysAPI serves the keys and models API on Caddy's admin endpoint, under /switchyard/:
// what `caddy switchyard keys …` talks to.
type KeysAPI struct {
	api http.Handler
}

// CaddyModule returns the Caddy module information.
func (KeysAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "admin.api.switchyard_keys", New: func() caddy.Module { return new(KeysAPI) }}
}

// Provision implements caddy.Provisioner: the API is built once per configuration.
func (k *KeysAPI) Provision(ctx caddy.Context) error {
	app, err := adminApp(ctx)
	if err != nil {
		return err
	}
	k.api = noStore
	if app != nil && app.manager != nil {
		k.api = app.consoleAPI("").Handler()
	}
	return nil
}

// Routes implements caddy.AdminRouter.
func (k *KeysAPI) Routes() []caddy.AdminRoute {
	h := caddy.AdminHandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		http.StripPrefix("/switchyard", k.api).ServeHTTP(w, r)
		return nil
	})
	return []caddy.AdminRoute{
		{Pattern: "/switchyard/keys", Handler: h},
		{Pattern: "/switchyard/keys/", Handler: h},
		{Pattern: "/switchyard/models", Handler: h},
		{Pattern: "/switchyard/usage", Handler: h},
		{Pattern: "/switchyard/requests", Handler: h},
		{Pattern: "/switchyard/latency", Handler: h},
		{Pattern: "/switchyard/alerts", Handler: h},
	}
}

// Interface guards
var (
	_ caddy.AdminRouter = (*HealthAPI)(nil)
	_ caddy.Provisioner = (*HealthAPI)(nil)
	_ caddy.AdminRouter = (*KeysAPI)(nil)
	_ caddy.Provisioner = (*KeysAPI)(nil)
)
