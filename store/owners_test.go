package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/limits"
)

// A key's owner is stored, listed, carried to every gateway's cache (the identity
// admission sees), and kept by a rotation whatever the replacement said; an owner that
// is neither a user id nor a service account is refused.
func TestAKeysOwnerSurvivesRotation(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s, gateway := f.open(t), f.open(t)
		_, k := newKey(t, "ann's laptop", t0)
		k.Owner = "usr_ann"
		require.NoError(t, s.CreateKey(ctx, k))
		_, svc := newKey(t, "deploy bot", t0)
		svc.Owner = "svc:deploy"
		require.NoError(t, s.CreateKey(ctx, svc))

		got, err := s.GetKey(ctx, k.ID)
		require.NoError(t, err)
		assert.Equal(t, "usr_ann", got.Owner)
		all, err := s.ListKeys(ctx)
		require.NoError(t, err)
		owners := map[string]string{}
		for _, k := range all {
			owners[k.ID] = k.Owner
		}
		assert.Equal(t, map[string]string{k.ID: "usr_ann", svc.ID: "svc:deploy"}, owners)

		// The replacement says nothing of an owner, as a caller that forgot would.
		secret, repl := newKey(t, "ann's laptop", t0)
		_, err = s.RotateKey(ctx, k.ID, repl, time.Time{}, time.Hour)
		require.NoError(t, err)
		assert.Equal(t, "usr_ann", repl.Owner, "the caller learns the owner kept")
		changed, err := s.ChangedSince(ctx, svc.Seq)
		require.NoError(t, err)
		require.Len(t, changed, 2)
		assert.Equal(t, []string{"usr_ann", "usr_ann"}, []string{changed[0].Owner, changed[1].Owner}, "replacement and old key")

		// Another gateway's cache has the owner in the identity admission sees.
		c, err := auth.NewCache(ctx, gateway)
		require.NoError(t, err)
		id, ok := c.Verify(secret)
		require.True(t, ok)
		assert.Equal(t, "usr_ann", id.Owner)

		// Through the Manager too: a rotation keeps the owner.
		m := &auth.Manager{Store: s, Projects: s, Cache: c}
		made, err := m.Create(ctx, auth.CreateRequest{Name: "bob's", Owner: "usr_bob"})
		require.NoError(t, err)
		rotated, err := m.Rotate(ctx, made.Key.ID, 0)
		require.NoError(t, err)
		assert.Equal(t, "usr_bob", rotated.Key.Owner)

		for _, bad := range []string{"ann", "usr_", "svc:", "usr_" + strings.Repeat("a", maxOwnerLen), "usr_a\nb", "svc:\x00"} {
			_, k := newKey(t, "bad owner", t0)
			k.Owner = bad
			assert.Error(t, s.CreateKey(ctx, k), "%q", bad)
		}
	})
}

// A project's rules for members' keys round-trip through the store, reach every
// gateway's cache with a new Seq, are audited in words, and are refused when they name
// a model the gateway does not have, limits that are not valid, or a departure rule
// that does not hold together. nil takes them away, which is not the same as rules
// that restrict nothing.
func TestMemberRulesRoundTrip(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := auth.WithActor(context.Background(), "alice")
		s, gateway := f.open(t), f.open(t)
		c, err := auth.NewCache(ctx, s)
		require.NoError(t, err)
		models := map[string]bool{"small": true, "big": true}
		m := &auth.Manager{Store: s, Projects: s, Cache: c, ModelExists: func(id string) bool { return models[id] }}
		p, err := m.CreateProject(ctx, auth.ProjectRequest{ID: "team-a"})
		require.NoError(t, err)
		assert.Nil(t, p.Members, "members may not make keys until an admin says so")
		other, err := gateway.GetProject(ctx, "team-a")
		require.NoError(t, err)
		gc, err := auth.NewCache(ctx, gateway)
		require.NoError(t, err)

		rules := &auth.MemberRules{
			Models:      []string{"small", "big"},
			MaxExpiry:   auth.Duration(720 * time.Hour),
			KeyLimits:   &limits.Policy{RPM: 60},
			Limits:      &limits.Policy{Budget: monthly(50), Concurrency: 4},
			Departed:    auth.DepartedRevoke,
			RevokeAfter: auth.Duration(168 * time.Hour),
		}
		got, err := m.SetProjectMembers(ctx, "team-a", rules)
		require.NoError(t, err)
		assert.Equal(t, rules, got.Members)
		stored, err := s.GetProject(ctx, "team-a")
		require.NoError(t, err)
		assert.Equal(t, rules, stored.Members)
		all, err := s.ListProjects(ctx)
		require.NoError(t, err)
		require.Len(t, all, 1)
		assert.Equal(t, rules, all[0].Members)
		changed, err := gateway.ProjectsChangedSince(ctx, other.Seq)
		require.NoError(t, err)
		require.Len(t, changed, 1, "a new Seq: every gateway's cache picks the rules up")
		assert.Equal(t, rules, changed[0].Members)
		require.NoError(t, gc.Refresh(ctx))
		cached, ok := gc.Project("team-a")
		require.True(t, ok)
		assert.Equal(t, rules, cached.Members, "what admission reaches through the identity's project")

		e := trail(t, s)[0]
		assert.Equal(t, auth.ActionProjectMembers, e.Action)
		assert.Equal(t, "alice", e.Actor)
		assert.Equal(t, "team-a", e.Target)
		assert.Equal(t, "models small, big; max expiry 720h0m0s; key limits rpm 60; each member's keys together budget 50/month, "+
			"concurrency 4; departed: revoke after 168h0m0s", e.Detail)

		open, err := m.SetProjectMembers(ctx, "team-a", &auth.MemberRules{})
		require.NoError(t, err)
		assert.Equal(t, &auth.MemberRules{}, open.Members, "rules that restrict nothing are rules, not none")

		before := len(trail(t, s))
		for name, bad := range map[string]*auth.MemberRules{
			"unknown model":               {Models: []string{"huge"}},
			"empty model":                 {Models: []string{" "}},
			"bad limits":                  {KeyLimits: &limits.Policy{RPM: -1}},
			"per-model limit of no model": {Limits: &limits.Policy{Models: map[string]*limits.Policy{"huge": {RPM: 1}}}},
			"unknown departure":           {Departed: "archive"},
			"revoke_after without revoke": {Departed: auth.DepartedKeep, RevokeAfter: auth.Duration(time.Hour)},
			"revoke_after without a rule": {RevokeAfter: auth.Duration(time.Hour)},
			"negative expiry":             {MaxExpiry: auth.Duration(-time.Hour)},
			"negative revoke_after":       {Departed: auth.DepartedRevoke, RevokeAfter: auth.Duration(-time.Hour)},
		} {
			_, err := m.SetProjectMembers(ctx, "team-a", bad)
			assert.True(t, auth.IsInvalid(err), "%s: %v", name, err)
		}
		_, err = m.SetProjectMembers(ctx, "nope", rules)
		assert.ErrorIs(t, err, auth.ErrNotFound)
		assert.Len(t, trail(t, s), before, "nothing refused was recorded")
		stored, err = s.GetProject(ctx, "team-a")
		require.NoError(t, err)
		assert.Equal(t, &auth.MemberRules{}, stored.Members, "nor stored")

		closed, err := m.SetProjectMembers(ctx, "team-a", nil)
		require.NoError(t, err)
		assert.Nil(t, closed.Members)
		assert.Equal(t, "no member rules (members may not make keys)", trail(t, s)[0].Detail)

		// A project's limits change keeps its member rules, and the other way round.
		_, err = m.SetProjectMembers(ctx, "team-a", rules)
		require.NoError(t, err)
		withLimits, err := m.SetProjectLimits(ctx, "team-a", &limits.Policy{RPM: 100})
		require.NoError(t, err)
		assert.Equal(t, rules, withLimits.Members)
		assert.Equal(t, &limits.Policy{RPM: 100}, withLimits.Limits)
	})
}
