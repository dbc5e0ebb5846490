package caddymodule

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/console"
)

func init() {
	caddy.RegisterModule(Console{})
}

// consoleAPI is the keys and models API over this app, for the admin endpoint and the
// console page alike. On the admin endpoint every call is the operator's; the console
// handler sets who is calling (its Authenticate).
func (a *App) consoleAPI(requireHeader string) *console.API {
	api := &console.API{Keys: a.manager, Models: a.modelInfo, Usage: a.usageReader, Latency: a.latencyReader,
		Requests: a.requestLog, RequireHeader: requireHeader, Standing: a.limitStanding, ResetHealth: a.resetHealth,
		People: a.people}
	if a.alerts != nil {
		api.Alerts = a.alertsView
	}
	return api
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

// Console is the `switchyard_console` handler: the web console page and its API, and
// the sign-in that lets people in. Mount it with its path stripped, for example:
//
//	handle_path /console/* {
//		@break_glass path /auth/break-glass
//		basic_auth @break_glass { admin <hash> }
//		switchyard_console {
//			sign_in { issuer … client_id … client_secret … redirect_url … }
//			role admin group platform-admins
//			role member group eng-a projects team-a
//		}
//	}
//
// Every call of its API needs a principal: a person's session (sign_in), an API token,
// or the operator's break-glass password (a user Caddy's basic_auth let in).
type Console struct {
	// SignIn is the OpenID provider people sign in through; nil: no one signs in
	// through a provider (the break-glass password and API tokens still work).
	SignIn *SignInConfig `json:"sign_in,omitempty"`
	// Roles map the provider's groups to roles over projects.
	Roles []access.Rule `json:"roles,omitempty"`
	// BreakGlass, when false, shuts the operator's password door: a user that Caddy's
	// basic_auth let in is nobody to the console. Default true.
	BreakGlass *bool `json:"break_glass,omitempty"`

	app     *App
	handler http.Handler // the page and its API, built once
	doors   *doors
}

// SignInConfig is the OpenID provider and the sessions it opens.
type SignInConfig struct {
	// Issuer is the provider's issuer URL; its discovery document is read from it.
	Issuer string `json:"issuer"`
	// ClientID and ClientSecret are this console's at the provider (a web application,
	// confidential client). Use a placeholder such as {env.SWITCHYARD_OIDC_SECRET}.
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret,omitempty"`
	// RedirectURL is the console's auth/callback URL, exactly as registered at the
	// provider (never taken from a request's Host).
	RedirectURL string `json:"redirect_url"`
	// Scopes asked for; default openid, email, profile.
	Scopes []string `json:"scopes,omitempty"`
	// GroupsClaim is the ID token claim that lists the person's groups; default
	// "groups".
	GroupsClaim string `json:"groups_claim,omitempty"`
	// SessionIdle ends a session unused this long (default 1h); SessionLifetime ends
	// it this long after sign-in whatever happens (default 12h).
	SessionIdle     caddy.Duration `json:"session_idle,omitempty"`
	SessionLifetime caddy.Duration `json:"session_lifetime,omitempty"`
	// Recheck is how often the provider is asked again (with the refresh token) whether
	// the person still signs in; default 15m, 0 with recheck off.
	Recheck *caddy.Duration `json:"recheck,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (Console) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.switchyard_console", New: func() caddy.Module { return new(Console) }}
}

func (c *Console) breakGlass() bool { return c.BreakGlass == nil || *c.BreakGlass }

// Provision implements caddy.Provisioner.
func (c *Console) Provision(ctx caddy.Context) (err error) {
	if c.app, err = loadApp(ctx); err != nil {
		return err
	}
	for i, rule := range c.Roles {
		if err := rule.Validate(); err != nil {
			return fmt.Errorf("switchyard_console: role %d: %v", i+1, err)
		}
	}
	if c.doors, err = c.openDoors(ctx); err != nil {
		return fmt.Errorf("switchyard_console: %v", err)
	}
	api := c.app.consoleAPI(console.ConsoleHeader)
	api.Authenticate = c.doors.authenticate
	api.SignIn = console.SignInInfo{Provider: c.SignIn != nil, BreakGlass: c.breakGlass()}
	api.Settings = c.settingsView
	c.handler = console.New(api)
	return nil
}

// settingsView is the sign-in settings as an owner sees them: never the client secret.
// A console without a provider still has its settings (the break-glass door, the role
// mapping); the provider's fields are then left out.
func (c *Console) settingsView() any {
	type settings struct {
		*SignInConfig
		Roles      []access.Rule `json:"roles"`
		BreakGlass bool          `json:"break_glass"`
	}
	view := settings{Roles: c.Roles, BreakGlass: c.breakGlass()}
	if c.SignIn != nil {
		s := *c.SignIn
		s.ClientSecret = ""
		view.SignInConfig = &s
	}
	return struct {
		Settings settings `json:"settings"`
	}{view}
}

func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	if c.doors.serve(w, r) {
		return nil
	}
	if c.app.manager == nil && strings.HasPrefix(r.URL.Path, "/api/") {
		noStore.ServeHTTP(w, r)
		return nil
	}
	c.handler.ServeHTTP(w, r)
	return nil
}

// UnmarshalCaddyfile reads
//
//	switchyard_console {
//		sign_in {
//			issuer           <url>
//			client_id        <id>
//			client_secret    <secret>
//			redirect_url     <url>
//			scopes           <scope...>
//			groups_claim     <claim>
//			session_idle     <duration>
//			session_lifetime <duration>
//			recheck          <duration>
//		}
//		role <owner|admin|project_admin|member|viewer> group <group> [projects <id...>]
//		break_glass on|off
//	}
func (c *Console) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "sign_in":
			if d.NextArg() {
				return d.ArgErr()
			}
			if c.SignIn != nil {
				return d.Err("sign_in given twice")
			}
			c.SignIn = new(SignInConfig)
			if err := c.SignIn.unmarshal(d); err != nil {
				return err
			}
		case "role":
			rule, err := parseRoleRule(d)
			if err != nil {
				return err
			}
			c.Roles = append(c.Roles, rule)
		case "break_glass":
			var on string
			if !d.Args(&on) || d.NextArg() {
				return d.ArgErr()
			}
			switch on {
			case "on", "off":
				v := on == "on"
				c.BreakGlass = &v
			default:
				return d.Errf("break_glass: want on or off, not %q", on)
			}
		default:
			return d.Errf("switchyard_console: unknown option %q (want sign_in, role or break_glass)", d.Val())
		}
	}
	return nil
}

// parseRoleRule reads `role <role> group <group> [projects <id...>]`.
func parseRoleRule(d *caddyfile.Dispenser) (access.Rule, error) {
	var rule access.Rule
	var role, word string
	if !d.Args(&role, &word, &rule.Group) || word != "group" {
		return rule, d.Err("role: want role <role> group <group> [projects <id>...]")
	}
	rule.Role = access.Role(role)
	if d.NextArg() {
		if d.Val() != "projects" {
			return rule, d.Errf("role: unexpected %q; want projects <id>...", d.Val())
		}
		rule.Projects = d.RemainingArgs()
		if len(rule.Projects) == 0 {
			return rule, d.Err("role: projects needs at least one project id")
		}
	}
	if err := rule.Validate(); err != nil {
		return rule, d.Errf("role: %v", err)
	}
	return rule, nil
}

func (s *SignInConfig) unmarshal(d *caddyfile.Dispenser) error {
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		one := func(dst *string) error {
			if !d.Args(dst) || d.NextArg() {
				return d.ArgErr()
			}
			return nil
		}
		dur := func(dst *caddy.Duration) error {
			var v string
			if err := one(&v); err != nil {
				return err
			}
			parsed, err := caddy.ParseDuration(v)
			if err != nil || parsed < 0 {
				return d.Errf("sign_in %s: %q is not a duration", opt, v)
			}
			*dst = caddy.Duration(parsed)
			return nil
		}
		var err error
		switch opt {
		case "issuer":
			err = one(&s.Issuer)
		case "client_id":
			err = one(&s.ClientID)
		case "client_secret":
			err = one(&s.ClientSecret)
		case "redirect_url":
			err = one(&s.RedirectURL)
		case "groups_claim":
			err = one(&s.GroupsClaim)
		case "scopes":
			s.Scopes = d.RemainingArgs()
			if len(s.Scopes) == 0 {
				err = d.ArgErr()
			}
		case "session_idle":
			err = dur(&s.SessionIdle)
		case "session_lifetime":
			err = dur(&s.SessionLifetime)
		case "recheck":
			s.Recheck = new(caddy.Duration)
			if d.NextArg() && d.Val() == "off" {
				if d.NextArg() {
					return d.ArgErr()
				}
				break // zero: never asked again
			}
			d.Prev()
			err = dur(s.Recheck)
		default:
			err = d.Errf("sign_in: unknown option %q", opt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Interface guards
var (
	_ caddyhttp.MiddlewareHandler = (*Console)(nil)
	_ caddy.Provisioner           = (*Console)(nil)
	_ caddyfile.Unmarshaler       = (*Console)(nil)
)
