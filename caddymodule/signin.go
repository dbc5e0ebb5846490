package caddymodule

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"

	"github.com/switchyard-gw/switchyard/access"
)

// doors are the console's ways in: sign-in through the OpenID provider (its routes
// under auth/), API tokens and sessions (Authenticate), and the operator's break-glass
// password (a user Caddy's basic_auth let in).
type doors struct {
	breakGlass bool
}

func (c *Console) openDoors(_ caddy.Context) (*doors, error) {
	return &doors{breakGlass: c.breakGlass()}, nil
}

// serve answers the sign-in routes (auth/…), reporting whether r was one.
func (d *doors) serve(w http.ResponseWriter, r *http.Request) bool {
	return false
}

// authenticate is who is calling the console's API.
func (d *doors) authenticate(r *http.Request) (*access.Principal, error) {
	if user := basicAuthUser(r); user != "" && d.breakGlass {
		return &access.Principal{Kind: access.KindBreakGlass, ID: user, Grants: []access.Grant{{Role: access.RoleOwner}},
			Addr: clientAddr(r)}, nil
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
// its trusted proxies), for the audit trail.
func clientAddr(r *http.Request) string {
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if repl != nil {
		if ip, _ := repl.GetString("http.vars.client_ip"); ip != "" {
			return ip
		}
	}
	return r.RemoteAddr
}
