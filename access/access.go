// Package access decides who may do what in the console and its API: people signed in
// through the company's OpenID provider (a session), automation with an API token, the
// operator's break-glass password and the operator on Caddy's admin endpoint. It holds
// the roles, the grants a role gives over projects, the mapping from a provider's groups
// to grants, and the one decision every route of the console API asks before it acts.
//
// It knows nothing of Caddy or HTTP routing: the console declares each route's Action
// and the resource it touches, and asks Decide.
package access

import (
	"context"
	"errors"
	"slices"
	"strings"
)

// Role is what a grant lets its holder do; Projects say where.
type Role string

// The roles, from the most to the least.
const (
	// RoleOwner may do everything, including people, sessions, API tokens of any scope
	// and reading the sign-in settings.
	RoleOwner Role = "owner"
	// RoleAdmin may manage keys, projects, limits, models' health and alerts of every
	// project, and API tokens up to its own reach.
	RoleAdmin Role = "admin"
	// RoleProjectAdmin is an admin within its grant's projects.
	RoleProjectAdmin Role = "project_admin"
	// RoleMember makes, rotates and revokes its own keys within its projects, inside the
	// rules the project sets for members' keys, and reads its own usage and requests.
	RoleMember Role = "member"
	// RoleViewer reads, within its projects (or everywhere), and changes nothing.
	RoleViewer Role = "viewer"
)

// Roles lists every role, from the most to the least.
var Roles = []Role{RoleOwner, RoleAdmin, RoleProjectAdmin, RoleMember, RoleViewer}

// Valid reports whether r is one of Roles.
func (r Role) Valid() bool { return slices.Contains(Roles, r) }

// rank orders roles for "may a holder of a give b": higher gives lower or equal.
func (r Role) rank() int {
	switch r {
	case RoleOwner:
		return 5
	case RoleAdmin:
		return 4
	case RoleProjectAdmin:
		return 3
	case RoleMember:
		return 2
	case RoleViewer:
		return 1
	}
	return 0
}

// Global reports whether the role always covers every project (owner and admin); a
// viewer covers every project when its grant names none.
func (r Role) Global() bool { return r == RoleOwner || r == RoleAdmin }

// Grant is a role over projects. Projects empty means every project; that is allowed
// for owner, admin and viewer only: a project admin or a member always has projects.
type Grant struct {
	Role     Role     `json:"role"`
	Projects []string `json:"projects,omitempty"`
}

// everywhere reports whether the grant reaches every project.
func (g Grant) everywhere() bool { return g.Role.Global() || len(g.Projects) == 0 }

// covers reports whether the grant reaches project ("" is a key in no project: only
// grants that reach everywhere reach it).
func (g Grant) covers(project string) bool {
	if g.everywhere() {
		return true
	}
	return project != "" && slices.Contains(g.Projects, project)
}

// Kind is how a principal came in.
type Kind string

// The kinds of principal.
const (
	// KindUser is a person signed in through the OpenID provider (a session).
	KindUser Kind = "user"
	// KindToken is automation with an API token.
	KindToken Kind = "token"
	// KindBreakGlass is the operator's local password (Caddy's basic_auth), an owner.
	KindBreakGlass Kind = "break_glass"
	// KindOperator is a call on Caddy's admin endpoint, the operator's own door, an owner.
	KindOperator Kind = "operator"
)

// Principal is who is calling, with what they may do.
type Principal struct {
	Kind Kind `json:"kind"`
	// ID is the user id (usr_…), the token id (tok_…), the break-glass user name, or
	// empty for the operator.
	ID string `json:"id,omitempty"`
	// Subject and Email are the provider's, for a user.
	Subject string `json:"subject,omitempty"`
	Email   string `json:"email,omitempty"`
	// Name is a display name: the user's name, the token's name.
	Name   string  `json:"name,omitempty"`
	Grants []Grant `json:"grants"`
	// SessionID is the public id of the session the call came with (users and
	// break-glass sign-ins); empty otherwise.
	SessionID string `json:"session_id,omitempty"`
	// Addr is the address the call came from, for the audit trail.
	Addr string `json:"-"`
}

// Operator is the principal of a call on Caddy's admin endpoint.
func Operator() *Principal {
	return &Principal{Kind: KindOperator, Grants: []Grant{{Role: RoleOwner}}}
}

// BreakGlass is the operator who came in through the break-glass password as user,
// from addr: an owner.
func BreakGlass(user, addr string) *Principal {
	return &Principal{Kind: KindBreakGlass, ID: user, Grants: []Grant{{Role: RoleOwner}}, Addr: addr}
}

// Actor names the principal in the audit trail: the person (e-mail and subject), the
// token, or the break-glass user, with the address the call came from.
func (p *Principal) Actor() string {
	if p == nil {
		return "nobody"
	}
	var b strings.Builder
	switch p.Kind {
	case KindUser:
		b.WriteString("user ")
		if p.Email != "" {
			b.WriteString(p.Email)
			b.WriteString(" ")
		}
		b.WriteString("(sub " + p.Subject + ")")
	case KindToken:
		b.WriteString("token " + p.ID)
		if p.Name != "" {
			b.WriteString(" (" + p.Name + ")")
		}
	case KindBreakGlass:
		b.WriteString("break-glass " + p.ID)
	default:
		b.WriteString("admin API")
	}
	if p.Addr != "" {
		b.WriteString(" from " + p.Addr)
	}
	return b.String()
}

// Owner is the key owner a principal's new keys get: the user's id, or empty (a
// service key) for tokens, break-glass and the operator.
func (p *Principal) Owner() string {
	if p != nil && p.Kind == KindUser {
		return p.ID
	}
	return ""
}

// HighestRole is the principal's strongest role ("" without grants), for display.
func (p *Principal) HighestRole() Role {
	var best Role
	for _, g := range p.Grants {
		if g.Role.rank() > best.rank() {
			best = g.Role
		}
	}
	return best
}

// ErrRefused is a credential that was presented and refused: a session ended, idle or
// of a disabled person, a token expired or revoked. Its message says which, to the
// caller.
var ErrRefused = errors.New("your sign-in is no longer valid; sign in again")

type principalKey struct{}

// WithPrincipal returns ctx carrying who is calling.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalOf is the principal WithPrincipal put in ctx, or nil.
func PrincipalOf(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}
