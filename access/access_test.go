package access

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func user(id string, grants ...Grant) *Principal {
	return &Principal{Kind: KindUser, ID: id, Subject: "sub-" + id, Grants: grants}
}

// A member reaches their own keys in their projects and nothing of anyone else's; a
// project admin all keys of their projects; a viewer reads and never writes.
func TestDecisionsFollowRoleAndReach(t *testing.T) {
	member := user("usr_m", Grant{Role: RoleMember, Projects: []string{"a"}})
	lead := user("usr_l", Grant{Role: RoleProjectAdmin, Projects: []string{"a"}})
	viewer := user("usr_v", Grant{Role: RoleViewer, Projects: []string{"a"}})
	auditor := user("usr_x", Grant{Role: RoleViewer})
	own := Resource{Project: "a", Owner: "usr_m"}
	others := Resource{Project: "a", Owner: "usr_z"}
	elsewhere := Resource{Project: "b", Owner: "usr_m"}

	assert.True(t, member.Decide(ActKeysWrite, own))
	assert.False(t, member.Decide(ActKeysWrite, others), "another person's key")
	assert.False(t, member.Decide(ActKeysWrite, elsewhere), "a project the member is not in")
	assert.False(t, member.Decide(ActKeysGovern, own), "a member does not set limits")
	assert.False(t, member.Decide(ActKeysWrite, Resource{Project: "a"}), "a key with no owner is nobody's own")

	assert.True(t, lead.Decide(ActKeysWrite, others))
	assert.True(t, lead.Decide(ActProjectsGovern, Resource{Project: "a"}))
	assert.False(t, lead.Decide(ActKeysRead, elsewhere))
	assert.False(t, lead.Decide(ActHealthReset, Resource{}), "health belongs to no project")
	assert.False(t, lead.Decide(ActProjectsCreate, Resource{}))

	for _, act := range []Action{ActKeysWrite, ActKeysGovern, ActProjectsGovern, ActTokensWrite, ActPeopleWrite, ActHealthReset} {
		assert.False(t, viewer.Can(act), act)
		assert.False(t, auditor.Can(act), act)
	}
	assert.True(t, viewer.Decide(ActUsageRead, others))
	assert.False(t, viewer.Decide(ActUsageRead, Resource{}), "a key in no project is outside a project viewer's reach")
	assert.True(t, auditor.Decide(ActUsageRead, Resource{}))
	assert.True(t, auditor.Decide(ActAlertsRead, Resource{}))
	assert.False(t, viewer.Decide(ActAlertsRead, Resource{}), "alerts are for viewers of every project")

	var nobody *Principal
	assert.False(t, nobody.Decide(ActSelf, Resource{}))
	assert.False(t, nobody.Can(ActModelsRead))
}

// A token never reaches further than whoever made it.
func TestATokenNeverReachesFurtherThanItsMaker(t *testing.T) {
	lead := user("usr_l", Grant{Role: RoleProjectAdmin, Projects: []string{"a", "b"}}, Grant{Role: RoleViewer})
	assert.True(t, lead.MayGive(Grant{Role: RoleProjectAdmin, Projects: []string{"a"}}))
	assert.True(t, lead.MayGive(Grant{Role: RoleMember, Projects: []string{"a", "b"}}))
	assert.True(t, lead.MayGive(Grant{Role: RoleViewer}), "a viewer of every project may give that")
	assert.False(t, lead.MayGive(Grant{Role: RoleProjectAdmin, Projects: []string{"a", "c"}}), "c is not theirs")
	assert.False(t, lead.MayGive(Grant{Role: RoleAdmin}))
	assert.False(t, lead.MayGive(Grant{Role: RoleProjectAdmin}), "no projects means every project")
	admin := user("usr_a", Grant{Role: RoleAdmin})
	assert.True(t, admin.MayGive(Grant{Role: RoleAdmin}))
	assert.False(t, admin.MayGive(Grant{Role: RoleOwner}))
	assert.True(t, Operator().MayGive(Grant{Role: RoleOwner}))
	assert.False(t, admin.MayGive(Grant{Role: "root"}))
}

func TestReachFiltersByProjectAndOwner(t *testing.T) {
	p := user("usr_m", Grant{Role: RoleMember, Projects: []string{"a"}}, Grant{Role: RoleViewer, Projects: []string{"b"}})
	r := p.ReachOf(ActRequestsRead)
	assert.False(t, r.All)
	assert.True(t, r.Admits(Resource{Project: "a", Owner: "usr_m"}))
	assert.False(t, r.Admits(Resource{Project: "a", Owner: "usr_z"}))
	assert.True(t, r.Admits(Resource{Project: "b", Owner: "usr_z"}))
	assert.False(t, r.Admits(Resource{Project: "c", Owner: "usr_m"}))
	assert.False(t, r.Admits(Resource{Owner: "usr_m"}))
	assert.True(t, user("usr_o", Grant{Role: RoleOwner}).ReachOf(ActAuditRead).All)
	assert.True(t, user("usr_q", Grant{Role: RoleMember, Projects: []string{"a"}}).ReachOf(ActAuditRead).Empty())
}

func TestMappingGivesEveryMatchingGrant(t *testing.T) {
	m := Mapping{
		{Group: "leads", Role: RoleProjectAdmin, Projects: []string{"a"}},
		{Group: "eng", Role: RoleMember, Projects: []string{"a", "b"}},
		{Group: "audit", Role: RoleViewer},
	}
	assert.Equal(t, []Grant{{Role: RoleProjectAdmin, Projects: []string{"a"}}, {Role: RoleMember, Projects: []string{"a", "b"}}},
		m.GrantsFor([]string{"eng", "leads", "other"}))
	assert.Empty(t, m.GrantsFor([]string{"Leads"}), "group names are compared exactly")
	assert.Error(t, Rule{Group: "g", Role: RoleMember}.Validate(), "a member without projects")
	assert.Error(t, Rule{Group: "g", Role: RoleAdmin, Projects: []string{"a"}}.Validate())
	assert.Error(t, Rule{Group: "g", Role: "superuser"}.Validate())
	assert.NoError(t, Rule{Group: "g", Role: RoleViewer}.Validate())
}
