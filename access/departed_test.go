package access

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/auth"
)

type usersOnly struct {
	Store // only ListUsers is called
	users []*User
}

func (u usersOnly) ListUsers(context.Context) ([]*User, error) { return u.users, nil }

type keyBox struct {
	projects []*auth.Project
	keys     []*auth.Key
	actors   []string
}

func (b *keyBox) List(context.Context) ([]*auth.Key, error)             { return b.keys, nil }
func (b *keyBox) ListProjects(context.Context) ([]*auth.Project, error) { return b.projects, nil }
func (b *keyBox) Revoke(ctx context.Context, id string) (*auth.Key, error) {
	for _, k := range b.keys {
		if k.ID == id {
			k.RevokedAt = time.Now()
			b.actors = append(b.actors, auth.ActorOf(ctx))
			return k, nil
		}
	}
	return nil, auth.ErrNotFound
}

// A departed person's keys are revoked where the project says so, once its wait has
// passed; kept where it says keep; and the keys of people still here are never touched.
func TestDepartedPeoplesKeysFollowTheirProjectsRule(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	people := usersOnly{users: []*User{
		{ID: "usr_gone", Email: "gone@example.com", DisabledAt: now.Add(-48 * time.Hour)},
		{ID: "usr_late", Email: "late@example.com", DisabledAt: now.Add(-time.Hour)},
		{ID: "usr_here", Email: "here@example.com"},
	}}
	box := &keyBox{
		projects: []*auth.Project{
			{ID: "strict", Members: &auth.MemberRules{Departed: "revoke", RevokeAfter: auth.Duration(24 * time.Hour)}},
			{ID: "lenient", Members: &auth.MemberRules{Departed: "keep"}},
			{ID: "plain"},
		},
		keys: []*auth.Key{
			{ID: "k1", ProjectID: "strict", Owner: "usr_gone"},
			{ID: "k2", ProjectID: "lenient", Owner: "usr_gone"},
			{ID: "k3", ProjectID: "plain", Owner: "usr_gone"},
			{ID: "k4", ProjectID: "strict", Owner: "usr_late"}, // disabled an hour ago: 23h left
			{ID: "k5", ProjectID: "strict", Owner: "usr_here"},
			{ID: "k6", ProjectID: "strict"},
		},
	}
	n, err := SweepDeparted(context.Background(), people, box, now)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	for _, k := range box.keys {
		assert.Equal(t, k.ID == "k1", !k.RevokedAt.IsZero(), k.ID)
	}
	assert.Equal(t, []string{"departure of gone@example.com"}, box.actors)

	n, err = SweepDeparted(context.Background(), people, box, now.Add(24*time.Hour))
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the late one's wait has passed")
	assert.False(t, box.keys[3].RevokedAt.IsZero())
}
