package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/access/signin"
	"github.com/switchyard-gw/switchyard/console"
)

// doors are the console's ways in: sign-in through the OpenID provider (its routes
// under auth/), sessions and API tokens (package signin), and the operator's
// break-glass password (a user Caddy's basic_auth let in).
type doors struct {
	svc        *signin.Service // nil: this gateway keeps no people (no store)
	breakGlass bool
}

func (c *Console) openDoors(ctx caddy.Context) (*doors, error) {
	d := &doors{breakGlass: c.breakGlass()}
	if c.app.people == nil {
		if c.SignIn != nil {
			return nil, errors.New("sign_in needs a key store for people and sessions (switchyard { store ... })")
		}
		return d, nil
	}
	cfg := signin.Config{Mapping: c.Roles, BreakGlass: d.breakGlass, ClientAddr: clientAddr}
	if s := c.SignIn; s != nil {
		repl := caddy.NewReplacer()
		cfg.Issuer, cfg.ClientID = repl.ReplaceKnown(s.Issuer, ""), repl.ReplaceKnown(s.ClientID, "")
		cfg.ClientSecret, cfg.RedirectURL = repl.ReplaceKnown(s.ClientSecret, ""), repl.ReplaceKnown(s.RedirectURL, "")
		cfg.Scopes, cfg.GroupsClaim = s.Scopes, s.GroupsClaim
		cfg.SessionIdle, cfg.SessionLifetime = time.Duration(s.SessionIdle), time.Duration(s.SessionLifetime)
		if s.Recheck != nil {
			cfg.Recheck = time.Duration(*s.Recheck)
			if cfg.Recheck == 0 {
				cfg.Recheck = signin.RecheckOff
			}
		}
	}
	svc, err := signin.New(ctx, cfg, c.app.people, ctx.Logger().Named("signin"))
	if err != nil {
		return nil, err
	}
	d.svc = svc
	return d, nil
}

// serve answers the sign-in routes (auth/…), reporting whether r was one.
func (d *doors) serve(w http.ResponseWriter, r *http.Request) bool {
	route, ok := strings.CutPrefix(r.URL.Path, "/auth/")
	if !ok {
		return false
	}
	if d.svc == nil {
		http.Error(w, "this gateway keeps no sign-ins: it needs a key store (switchyard { store ... })", http.StatusServiceUnavailable)
		return true
	}
	switch route {
	case "login":
		d.svc.Login(w, r)
	case "callback":
		d.svc.Callback(w, r)
	case "logout":
		// Signing out changes something: the console's header, and this site only.
		if r.Header.Get(console.ConsoleHeader) == "" || console.FromAnotherSite(r) {
			http.Error(w, "sign out from the console", http.StatusForbidden)
			return true
		}
		d.svc.Logout(w, r)
	case "break-glass":
		user := basicAuthUser(r)
		if user == "" {
			http.Error(w, "the break-glass door is not set up: guard auth/break-glass with basic_auth", http.StatusNotFound)
			return true
		}
		d.svc.BreakGlass(w, r, user)
	default:
		http.NotFound(w, r)
	}
	return true
}

// authenticate is who is calling the console's API: a session or an API token, else
// the break-glass user Caddy's basic_auth let in (while the door is open), else no one.
func (d *doors) authenticate(r *http.Request) (*access.Principal, error) {
	if d.svc != nil {
		p, err := d.svc.Authenticate(r)
		switch {
		case err == nil:
			return p, nil
		case errors.Is(err, signin.ErrRefused):
			return nil, fmt.Errorf("%w (%v)", access.ErrRefused, err)
		case !errors.Is(err, signin.ErrNoPrincipal):
			return nil, err
		}
	}
	if user := basicAuthUser(r); user != "" && d.breakGlass {
		return access.BreakGlass(user, clientAddr(r)), nil
	}
	return nil, nil
}

// basicAuthUser is the user Caddy's authentication handler (basic_auth) let in, or "".
func basicAuthUser(r *http.Request) string {
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if repl == nil {
		return ""
	}
	user, _ := repl.GetString("http.auth.user.id")
	return user
}

// clientAddr is the address the call came from as Caddy sees it (the client IP, after
// its trusted proxies), for sessions and the audit trail.
func clientAddr(r *http.Request) string {
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if repl != nil {
		if ip, _ := repl.GetString("http.vars.client_ip"); ip != "" {
			return ip
		}
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// endedSessionsKept is how long an ended session's row is kept (the sessions list and
// the audit trail may still name it) before the upkeep deletes it.
const endedSessionsKept = 30 * 24 * time.Hour

// sessionPruner is a people store that can delete long-ended sessions (*store.Store).
type sessionPruner interface {
	PruneSessions(ctx context.Context, before time.Time) (int64, error)
}

// startDepartureSweep runs the people upkeep every five minutes while the app runs:
// departed people's keys are revoked where their projects say so (access.SweepDeparted),
// and sessions that ended more than endedSessionsKept ago are deleted. Every gateway on
// one store may run it: both are idempotent.
func (a *App) startDepartureSweep() {
	if a.people == nil || a.manager == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.stopSweep = cancel
	log := a.logger.Named("people")
	go func() {
		tick := time.NewTicker(5 * time.Minute)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			n, err := access.SweepDeparted(ctx, a.people, a.manager, time.Now())
			if err != nil {
				log.Warn("revoking departed people's keys failed; tried again in 5 minutes", zap.Error(err))
			} else if n > 0 {
				log.Info("revoked departed people's keys, as their projects say", zap.Int("keys", n))
			}
			if p, ok := a.people.(sessionPruner); ok {
				if _, err := p.PruneSessions(ctx, time.Now().Add(-endedSessionsKept)); err != nil {
					log.Warn("deleting long-ended sessions failed; tried again in 5 minutes", zap.Error(err))
				}
			}
		}
	}()
}
