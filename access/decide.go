package access

// Action is what a route of the console API does. Every route declares one; the
// decision is made on it and the resource the route touches.
type Action string

// The actions.
const (
	// ActSelf: reading who one is, signing out. Anyone signed in.
	ActSelf Action = "self"
	// ActModelsRead: the models, their candidates' names and live health, latency.
	ActModelsRead Action = "models.read"
	// ActConnectRead: a client's set-up (the gateway's address, never a secret).
	ActConnectRead Action = "connect.read"
	// ActKeysRead: listing and showing keys.
	ActKeysRead Action = "keys.read"
	// ActKeysWrite: creating, rotating and revoking keys.
	ActKeysWrite Action = "keys.write"
	// ActKeysGovern: a key's limits and its project.
	ActKeysGovern Action = "keys.govern"
	// ActProjectsRead: listing and showing projects.
	ActProjectsRead Action = "projects.read"
	// ActProjectsCreate: making a project.
	ActProjectsCreate Action = "projects.create"
	// ActProjectsGovern: a project's limits and its rules for members' keys.
	ActProjectsGovern Action = "projects.govern"
	// ActUsageRead: usage and spend.
	ActUsageRead Action = "usage.read"
	// ActRequestsRead: the request log.
	ActRequestsRead Action = "requests.read"
	// ActAuditRead: the audit trail.
	ActAuditRead Action = "audit.read"
	// ActHealthReset: clearing a candidate's live health.
	ActHealthReset Action = "health.reset"
	// ActAlertsRead: the alert webhooks and their deliveries.
	ActAlertsRead Action = "alerts.read"
	// ActTokensRead and ActTokensWrite: API tokens (a token never reaches further than
	// whoever made it).
	ActTokensRead  Action = "tokens.read"
	ActTokensWrite Action = "tokens.write"
	// ActPeopleRead: the people who signed in and their sessions.
	ActPeopleRead Action = "people.read"
	// ActPeopleWrite: disabling a person, ending their sessions.
	ActPeopleWrite Action = "people.write"
	// ActSettingsRead: the sign-in settings and the role mapping.
	ActSettingsRead Action = "settings.read"
)

// Actions lists every action, in the order the docs' table shows them.
var Actions = []Action{
	ActSelf, ActModelsRead, ActConnectRead,
	ActKeysRead, ActKeysWrite, ActKeysGovern,
	ActProjectsRead, ActProjectsCreate, ActProjectsGovern,
	ActUsageRead, ActRequestsRead, ActAuditRead,
	ActHealthReset, ActAlertsRead,
	ActTokensRead, ActTokensWrite,
	ActPeopleRead, ActPeopleWrite, ActSettingsRead,
}

// reach is how far a role takes an action.
type reach int

const (
	none reach = iota
	// own: within the grant's projects, only what the principal owns (a member's keys,
	// usage and requests).
	own
	// scoped: within the grant's projects (or every project when it names none).
	scoped
	// global: the action touches no project (alerts, health, people, settings): only a
	// grant that reaches every project may take it.
	global
)

// matrix is the one table of who may do what. A role missing from an action's row may
// not take it.
var matrix = map[Action]map[Role]reach{
	ActSelf:           {RoleOwner: scoped, RoleAdmin: scoped, RoleProjectAdmin: scoped, RoleMember: scoped, RoleViewer: scoped},
	ActModelsRead:     {RoleOwner: scoped, RoleAdmin: scoped, RoleProjectAdmin: scoped, RoleMember: scoped, RoleViewer: scoped},
	ActConnectRead:    {RoleOwner: scoped, RoleAdmin: scoped, RoleProjectAdmin: scoped, RoleMember: scoped, RoleViewer: scoped},
	ActKeysRead:       {RoleOwner: scoped, RoleAdmin: scoped, RoleProjectAdmin: scoped, RoleMember: own, RoleViewer: scoped},
	ActKeysWrite:      {RoleOwner: scoped, RoleAdmin: scoped, RoleProjectAdmin: scoped, RoleMember: own},
	ActKeysGovern:     {RoleOwner: scoped, RoleAdmin: scoped, RoleProjectAdmin: scoped},
	ActProjectsRead:   {RoleOwner: scoped, RoleAdmin: scoped, RoleProjectAdmin: scoped, RoleMember: scoped, RoleViewer: scoped},
	ActProjectsCreate: {RoleOwner: global, RoleAdmin: global},
	ActProjectsGovern: {RoleOwner: scoped, RoleAdmin: scoped, RoleProjectAdmin: scoped},
	ActUsageRead:      {RoleOwner: scoped, RoleAdmin: scoped, RoleProjectAdmin: scoped, RoleMember: own, RoleViewer: scoped},
	ActRequestsRead:   {RoleOwner: scoped, RoleAdmin: scoped, RoleProjectAdmin: scoped, RoleMember: own, RoleViewer: scoped},
	ActAuditRead:      {RoleOwner: scoped, RoleAdmin: scoped, RoleProjectAdmin: scoped, RoleViewer: scoped},
	ActHealthReset:    {RoleOwner: global, RoleAdmin: global},
	ActAlertsRead:     {RoleOwner: global, RoleAdmin: global, RoleViewer: global},
	ActTokensRead:     {RoleOwner: scoped, RoleAdmin: scoped, RoleProjectAdmin: scoped},
	ActTokensWrite:    {RoleOwner: scoped, RoleAdmin: scoped, RoleProjectAdmin: scoped},
	ActPeopleRead:     {RoleOwner: global, RoleAdmin: global},
	ActPeopleWrite:    {RoleOwner: global},
	ActSettingsRead:   {RoleOwner: global},
}

// Resource is what a call touches: a project ("" for a key in none, or for something
// that belongs to no project) and, for keys, usage and requests, the key's owner.
type Resource struct {
	Project string
	Owner   string
}

// allows reports whether grant g lets principal p take action on res.
func (p *Principal) allows(g Grant, action Action, res Resource) bool {
	switch matrix[action][g.Role] {
	case global:
		return g.everywhere()
	case scoped:
		return g.covers(res.Project)
	case own:
		return g.covers(res.Project) && res.Owner != "" && res.Owner == p.Owner()
	}
	return false
}

// Decide reports whether p may take action on res. A nil principal (no one signed in)
// may do nothing.
func (p *Principal) Decide(action Action, res Resource) bool {
	if p == nil {
		return false
	}
	for _, g := range p.Grants {
		if p.allows(g, action, res) {
			return true
		}
	}
	return false
}

// Can reports whether p may take action anywhere at all: the gate in front of a route,
// and what the console shows. Each resource is then decided with Decide.
func (p *Principal) Can(action Action) bool {
	if p == nil {
		return false
	}
	for _, g := range p.Grants {
		if matrix[action][g.Role] != none {
			return true
		}
	}
	return false
}

// Global reports whether action touches no project (alerts, health, people,
// settings): only grants that reach every project take it, which Decide on an empty
// Resource tells.
func Global(action Action) bool {
	for _, r := range matrix[action] {
		if r != global {
			return false
		}
	}
	return len(matrix[action]) > 0
}

// Reach is where an action is allowed, for filtering lists and queries: everywhere, or
// in some projects, or only what the principal owns in some projects.
type Reach struct {
	// All: every project, and keys in none.
	All bool
	// Projects are reached in full.
	Projects []string
	// OwnIn are projects where only the principal's own things are reached.
	OwnIn []string
	// Owner is the principal's owner id, for OwnIn.
	Owner string
}

// ReachOf is where p may take action.
func (p *Principal) ReachOf(action Action) Reach {
	r := Reach{Owner: p.Owner()}
	if p == nil {
		return r
	}
	for _, g := range p.Grants {
		switch matrix[action][g.Role] {
		case global, scoped:
			if g.everywhere() {
				return Reach{All: true, Owner: r.Owner}
			}
			r.Projects = appendNew(r.Projects, g.Projects...)
		case own:
			if r.Owner != "" {
				r.OwnIn = appendNew(r.OwnIn, g.Projects...)
			}
		}
	}
	return r
}

// Admits reports whether the reach covers res.
func (r Reach) Admits(res Resource) bool {
	if r.All {
		return true
	}
	if res.Project == "" {
		return false
	}
	for _, p := range r.Projects {
		if p == res.Project {
			return true
		}
	}
	if res.Owner == "" || res.Owner != r.Owner {
		return false
	}
	for _, p := range r.OwnIn {
		if p == res.Project {
			return true
		}
	}
	return false
}

// Empty reports whether the reach covers nothing.
func (r Reach) Empty() bool { return !r.All && len(r.Projects) == 0 && len(r.OwnIn) == 0 }

func appendNew(list []string, items ...string) []string {
	for _, it := range items {
		found := false
		for _, have := range list {
			if have == it {
				found = true
				break
			}
		}
		if !found {
			list = append(list, it)
		}
	}
	return list
}

// MayGive reports whether p may hand grant g to an API token: a token never reaches
// further than whoever made it. Every project g names (or every project, when it names
// none) must be one where p holds a role at least as strong.
func (p *Principal) MayGive(g Grant) bool {
	if p == nil || !g.Role.Valid() {
		return false
	}
	if g.everywhere() {
		for _, mine := range p.Grants {
			if mine.everywhere() && mine.Role.rank() >= g.Role.rank() {
				return true
			}
		}
		return false
	}
	for _, project := range g.Projects {
		ok := false
		for _, mine := range p.Grants {
			if mine.covers(project) && mine.Role.rank() >= g.Role.rank() {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// Allowed reports what a role reaches for an action, in words, for the docs' table and
// the console: "yes", "own", "their projects" or "".
func Allowed(role Role, action Action) string {
	switch matrix[action][role] {
	case global:
		return "yes"
	case scoped:
		if role == RoleProjectAdmin {
			return "their projects"
		}
		if role == RoleViewer || role == RoleMember {
			return "their scope"
		}
		return "yes"
	case own:
		return "own"
	}
	return ""
}
