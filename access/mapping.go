package access

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// Rule gives a role to everyone in a provider group, over projects (none: every
// project; owner and admin always reach every project). The Caddyfile writes it
// `role <role> group <group> [projects <id>...]`.
type Rule struct {
	Group    string   `json:"group"`
	Role     Role     `json:"role"`
	Projects []string `json:"projects,omitempty"`
}

// Validate says what is wrong with a rule.
func (r Rule) Validate() error {
	if r.Group == "" {
		return errors.New("role mapping: empty group")
	}
	return Grant{Role: r.Role, Projects: r.Projects}.Validate()
}

// Validate says what is wrong with a grant: an unknown role, or a project admin or
// member without projects (they are project roles), or owner or admin with projects
// (they reach every project; a project admin is what is meant).
func (g Grant) Validate() error {
	if !g.Role.Valid() {
		return fmt.Errorf("unknown role %s (want owner, admin, project_admin, member or viewer)", strconv.QuoteToGraphic(string(g.Role)))
	}
	if (g.Role == RoleProjectAdmin || g.Role == RoleMember) && len(g.Projects) == 0 {
		return fmt.Errorf("role %s needs the projects it is for", g.Role)
	}
	if g.Role.Global() && len(g.Projects) > 0 {
		return fmt.Errorf("role %s reaches every project; for some projects use project_admin", g.Role)
	}
	for _, p := range g.Projects {
		if p == "" {
			return errors.New("empty project id in a grant")
		}
	}
	return nil
}

// Mapping is the ordered list of rules; a person gets every grant whose group they are
// in.
type Mapping []Rule

// maxGroups bounds how many groups of a provider's claim are looked at: a token is the
// provider's word, but a claim of a million groups is no one's.
const maxGroups = 1000

// GrantsFor is the grants of someone in groups. A person in no mapped group gets none,
// and may not sign in.
func (m Mapping) GrantsFor(groups []string) []Grant {
	if len(groups) > maxGroups {
		groups = groups[:maxGroups]
	}
	var out []Grant
	for _, r := range m {
		if slices.Contains(groups, r.Group) {
			out = append(out, Grant{Role: r.Role, Projects: slices.Clone(r.Projects)})
		}
	}
	return out
}
