package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/limits"
	"github.com/switchyard-gw/switchyard/metering"
)

func monthly(amount int64) *limits.Budget {
	return &limits.Budget{Micros: amount * 1_000_000, Period: limits.PeriodMonth}
}

func auditOf(action, target, detail string) *auth.AuditEntry {
	return &auth.AuditEntry{Actor: "alice", Action: action, Target: target, Detail: detail}
}

// trail lists the whole audit trail, newest first.
func trail(t *testing.T, s *Store) []*auth.AuditEntry {
	t.Helper()
	es, err := s.ListAudit(context.Background(), 1000, 0)
	require.NoError(t, err)
	return es
}

func TestProjectsAreStored(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		policy := &limits.Policy{RPM: 600, Budget: monthly(500),
			Models: map[string]*limits.Policy{"big-model": {Budget: monthly(50)}}}
		p := &auth.Project{ID: "platform", Name: "Platform team", Limits: policy, CreatedAt: t0}
		e := auditOf(auth.ActionProjectCreate, "platform", `name "Platform team"`)
		require.NoError(t, s.CreateProject(ctx, p, e))
		assert.Positive(t, p.Seq)
		assert.Positive(t, e.ID, "the audit entry has its id")
		ci := &auth.Project{ID: "ci", Name: "ci"}
		require.NoError(t, s.CreateProject(ctx, ci, nil))
		assert.Greater(t, ci.Seq, p.Seq)

		got, err := s.GetProject(ctx, "platform")
		require.NoError(t, err)
		assert.Equal(t, &auth.Project{ID: "platform", Name: "Platform team", Limits: policy, CreatedAt: storedTime(t0), Seq: p.Seq}, got)

		all, err := s.ListProjects(ctx)
		require.NoError(t, err)
		require.Len(t, all, 2)
		assert.Equal(t, []string{"ci", "platform"}, []string{all[0].ID, all[1].ID}, "by id")
		assert.Nil(t, all[0].Limits)

		err = s.CreateProject(ctx, &auth.Project{ID: "platform", Name: "again"}, auditOf(auth.ActionProjectCreate, "platform", ""))
		assert.ErrorIs(t, err, auth.ErrConflict)
		assert.Len(t, trail(t, s), 1, "a refused change records nothing")

		_, err = s.GetProject(ctx, "nope")
		assert.ErrorIs(t, err, auth.ErrNotFound)
		assert.Contains(t, err.Error(), `"nope"`, "the error names the project")

		// New limits: a new Seq, seen by ProjectsChangedSince; nil clears them.
		before := ci.Seq
		require.NoError(t, s.SetProjectLimits(ctx, "platform", &limits.Policy{TPM: 1000}, auditOf(auth.ActionProjectLimits, "platform", "tpm 1000")))
		changed, err := s.ProjectsChangedSince(ctx, before)
		require.NoError(t, err)
		require.Len(t, changed, 1)
		assert.Equal(t, &limits.Policy{TPM: 1000}, changed[0].Limits)
		require.NoError(t, s.SetProjectLimits(ctx, "platform", &limits.Policy{}, nil))
		got, err = s.GetProject(ctx, "platform")
		require.NoError(t, err)
		assert.Nil(t, got.Limits, "a policy that limits nothing is none")
		assert.Greater(t, got.Seq, changed[0].Seq)

		err = s.SetProjectLimits(ctx, "nope", &limits.Policy{RPM: 1}, auditOf(auth.ActionProjectLimits, "nope", "rpm 1"))
		assert.ErrorIs(t, err, auth.ErrNotFound)
		err = s.SetProjectLimits(ctx, "platform", &limits.Policy{RPM: -1}, nil)
		assert.Error(t, err, "an invalid policy is refused")
		assert.Len(t, trail(t, s), 2)
	})
}

func TestKeysCarryAProjectAndLimits(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		require.NoError(t, s.CreateProject(ctx, &auth.Project{ID: "platform", Name: "platform"}, nil))
		require.NoError(t, s.CreateProject(ctx, &auth.Project{ID: "ci", Name: "ci"}, nil))

		_, k := newKey(t, "agent", t0)
		k.ProjectID, k.Limits = "platform", &limits.Policy{RPM: 60, Budget: monthly(50)}
		require.NoError(t, s.CreateKey(ctx, k))
		got, err := s.GetKey(ctx, k.ID)
		require.NoError(t, err)
		assert.Equal(t, "platform", got.ProjectID)
		assert.Equal(t, k.Limits, got.Limits)

		_, orphan := newKey(t, "orphan", t0)
		orphan.ProjectID = "nope"
		err = s.CreateKey(ctx, orphan)
		assert.ErrorIs(t, err, auth.ErrNotFound)
		assert.True(t, auth.IsProjectNotFound(err))

		// Limits: a new Seq, so ChangedSince carries the change.
		seq := got.Seq
		require.NoError(t, s.SetKeyLimits(ctx, k.ID, &limits.Policy{Concurrency: 2}, auditOf(auth.ActionKeyLimits, k.ID, "concurrency 2")))
		changed, err := s.ChangedSince(ctx, seq)
		require.NoError(t, err)
		require.Len(t, changed, 1)
		assert.Equal(t, &limits.Policy{Concurrency: 2}, changed[0].Limits)
		assert.Equal(t, "platform", changed[0].ProjectID, "the project stays")

		// Project: moved, then out of any; an unknown project changes nothing.
		require.NoError(t, s.SetKeyProject(ctx, k.ID, "ci", auditOf(auth.ActionKeyProject, k.ID, "project platform → ci")))
		got, _ = s.GetKey(ctx, k.ID)
		assert.Equal(t, "ci", got.ProjectID)
		assert.Equal(t, &limits.Policy{Concurrency: 2}, got.Limits, "the limits stay")
		err = s.SetKeyProject(ctx, k.ID, "nope", auditOf(auth.ActionKeyProject, k.ID, "project ci → nope"))
		assert.True(t, auth.IsProjectNotFound(err))
		assert.Contains(t, err.Error(), `"nope"`)
		require.NoError(t, s.SetKeyProject(ctx, k.ID, "", auditOf(auth.ActionKeyProject, k.ID, "project ci → none")))
		got, _ = s.GetKey(ctx, k.ID)
		assert.Empty(t, got.ProjectID)
		require.NoError(t, s.SetKeyLimits(ctx, k.ID, nil, auditOf(auth.ActionKeyLimits, k.ID, "no limits")))
		got, _ = s.GetKey(ctx, k.ID)
		assert.Nil(t, got.Limits)

		err = s.SetKeyLimits(ctx, "key_nope", &limits.Policy{RPM: 1}, auditOf(auth.ActionKeyLimits, "key_nope", "rpm 1"))
		assert.ErrorIs(t, err, auth.ErrNotFound)
		assert.False(t, auth.IsProjectNotFound(err))

		// Every change that happened is in the trail, in order; refusals are not.
		var details []string
		for _, e := range trail(t, s) {
			details = append(details, e.Detail)
		}
		assert.Equal(t, []string{"no limits", "project ci → none", "project platform → ci", "concurrency 2"}, details)

		// A rotation stores the replacement's project and limits as given.
		_, repl := newKey(t, "agent", t0)
		repl.ProjectID, repl.Limits = "platform", &limits.Policy{RPM: 5}
		_, err = s.RotateKey(ctx, k.ID, repl, time.Time{}, 0)
		require.NoError(t, err)
		got, _ = s.GetKey(ctx, repl.ID)
		assert.Equal(t, "platform", got.ProjectID)
		assert.Equal(t, &limits.Policy{RPM: 5}, got.Limits)
	})
}

func TestTheAuditTrailPagesNewestFirst(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		var ids []int64
		for i := range 7 {
			e := &auth.AuditEntry{At: t0.Add(time.Duration(i) * time.Second), Actor: "admin API", Action: auth.ActionKeyRevoke,
				Target: "key_x", Detail: string(rune('a' + i))}
			require.NoError(t, s.AppendAudit(ctx, e))
			ids = append(ids, e.ID)
		}
		for i := 1; i < len(ids); i++ {
			assert.Greater(t, ids[i], ids[i-1])
		}
		page, err := s.ListAudit(ctx, 3, 0)
		require.NoError(t, err)
		require.Len(t, page, 3)
		assert.Equal(t, []string{"g", "f", "e"}, []string{page[0].Detail, page[1].Detail, page[2].Detail})
		assert.Equal(t, storedTime(t0.Add(6*time.Second)), page[0].At)
		assert.Equal(t, "admin API", page[0].Actor)
		page, err = s.ListAudit(ctx, 3, page[2].ID)
		require.NoError(t, err)
		assert.Equal(t, []string{"d", "c", "b"}, []string{page[0].Detail, page[1].Detail, page[2].Detail})
		page, err = s.ListAudit(ctx, 3, page[2].ID)
		require.NoError(t, err)
		require.Len(t, page, 1)
		assert.Equal(t, "a", page[0].Detail)

		assert.Error(t, s.AppendAudit(ctx, &auth.AuditEntry{Action: "key.create", Target: "k"}), "an entry without an actor")
	})
}

// Spend sums the ledger's cost by key or project, for one model or all, from a time.
func TestSpendSumsTheLedger(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		may := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
		rec := func(id, key, project, model string, at time.Time, cost int64) metering.Record {
			return metering.Record{RequestID: id, KeyID: key, ProjectID: project, Model: model, Status: 200, CostMicros: cost, Time: at}
		}
		require.NoError(t, s.WriteUsage(ctx, "gw", 1, []metering.Record{
			rec("r1", "key_a", "platform", "small", may.Add(-time.Microsecond), 1),  // April
			rec("r2", "key_a", "platform", "small", may, 10),                        // the first instant of May
			rec("r3", "key_a", "platform", "big", may.Add(time.Hour), 100),          //
			rec("r4", "key_b", "platform", "big", may.Add(2*time.Hour), 1_000),      // another key, same project
			rec("r5", "key_c", "", "big", may.Add(3*time.Hour), 10_000),             // no project
			rec("r6", "key_a", "ci", "small", may.Add(4*time.Hour), 100_000),        // key_a after it moved to ci
			rec("r7", "static:ops", "", "small", may.Add(5*time.Hour), 1_000_000),   // a key from the configuration
			rec("r8", "key_a", "platform", "big", may.AddDate(0, 1, 0), 10_000_000), // June
		}))
		spend := func(kind limits.ScopeKind, id, model string, since time.Time) int64 {
			t.Helper()
			v, err := s.Spend(ctx, limits.Scope{Kind: kind, ID: id, Model: model}, since)
			require.NoError(t, err)
			return v
		}
		june := may.AddDate(0, 1, 0)
		assert.Equal(t, int64(10_100_111), spend(limits.ScopeKey, "key_a", "", time.Time{}), "all of key_a's")
		assert.Equal(t, int64(10_100_110), spend(limits.ScopeKey, "key_a", "", may), "from the first instant of May")
		assert.Equal(t, int64(10_000_000), spend(limits.ScopeKey, "key_a", "", june))
		assert.Equal(t, int64(10_000_100), spend(limits.ScopeKey, "key_a", "big", may), "one model")
		assert.Equal(t, int64(10_001_110), spend(limits.ScopeProject, "platform", "", may), "every key of the project")
		assert.Equal(t, int64(10_001_100), spend(limits.ScopeProject, "platform", "big", may))
		assert.Equal(t, int64(100_000), spend(limits.ScopeProject, "ci", "", may), "a record counts for the project it was metered in")
		assert.Equal(t, int64(1_000_000), spend(limits.ScopeKey, "static:ops", "", may))
		assert.Zero(t, spend(limits.ScopeKey, "key_nope", "", time.Time{}))
		assert.Zero(t, spend(limits.ScopeProject, "platform", "small", june))
		// A bound between microseconds: rounded up, as the stored times are whole ones.
		assert.Equal(t, int64(10_100_110), spend(limits.ScopeKey, "key_a", "", may.Add(-time.Nanosecond)))

		_, err := s.Spend(ctx, limits.Scope{Kind: "team", ID: "x"}, may)
		assert.Error(t, err)
	})
}

// A limit set through one store handle (one gateway) reaches the cache of a second
// handle on the same database (another gateway) in its next refresh, and so do a
// project's limits and a key's move between projects.
func TestALimitReachesAnotherGatewaysCache(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		admin, gateway := f.open(t), f.open(t)
		require.NoError(t, admin.CreateProject(ctx, &auth.Project{ID: "platform", Name: "platform"}, nil))
		secret, k := newKey(t, "agent", t0)
		require.NoError(t, admin.CreateKey(ctx, k))
		c, err := auth.NewCache(ctx, gateway)
		require.NoError(t, err)
		id, ok := c.Verify(secret)
		require.True(t, ok)
		assert.Nil(t, id.Limits)
		_, ok = c.Project("platform")
		assert.True(t, ok)

		require.NoError(t, admin.SetKeyLimits(ctx, k.ID, &limits.Policy{Budget: monthly(50), RPM: 60}, nil))
		require.NoError(t, admin.SetKeyProject(ctx, k.ID, "platform", nil))
		require.NoError(t, admin.SetProjectLimits(ctx, "platform", &limits.Policy{Concurrency: 3}, nil))
		require.NoError(t, c.Refresh(ctx), "one refresh")
		id, ok = c.Verify(secret)
		require.True(t, ok)
		assert.Equal(t, &limits.Policy{Budget: monthly(50), RPM: 60}, id.Limits)
		assert.Equal(t, "platform", id.ProjectID)
		p, ok := c.Project(id.ProjectID)
		require.True(t, ok)
		assert.Equal(t, &limits.Policy{Concurrency: 3}, p.Limits)
	})
}

// The Manager on a real store: every operator's change is audited with its actor and
// a detail in words, never the secret; a rotation keeps the project and limits;
// invalid input is refused with how to correct it.
func TestManagerAuditsEveryChange(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := auth.WithActor(context.Background(), "alice")
		s := f.open(t)
		c, err := auth.NewCache(ctx, s)
		require.NoError(t, err)
		models := map[string]bool{"small": true, "big": true}
		m := &auth.Manager{Store: s, Projects: s, Cache: c, ModelExists: func(id string) bool { return models[id] }}

		p, err := m.CreateProject(ctx, auth.ProjectRequest{ID: "platform", Limits: &limits.Policy{Budget: monthly(500)}})
		require.NoError(t, err)
		assert.Equal(t, "platform", p.Name, "the name defaults to the id")
		_, ok := c.Project("platform")
		assert.True(t, ok, "the cache has the project at once")

		created, err := m.Create(ctx, auth.CreateRequest{Name: "ci-bot", ProjectID: "platform",
			Limits: &limits.Policy{RPM: 60, Budget: monthly(50)}})
		require.NoError(t, err)
		id, ok := c.Verify(created.Secret)
		require.True(t, ok)
		assert.Equal(t, "platform", id.ProjectID)
		assert.Equal(t, int64(60), id.Limits.RPM)

		_, err = m.SetKeyLimits(ctx, created.Key.ID, &limits.Policy{TPM: 10_000, Models: map[string]*limits.Policy{"big": {Budget: monthly(5)}}})
		require.NoError(t, err)
		id, _ = c.Verify(created.Secret)
		assert.Equal(t, int64(10_000), id.Limits.TPM, "the cache has the new limits at once")

		rotated, err := m.Rotate(auth.WithActor(context.Background(), "bob"), created.Key.ID, 0)
		require.NoError(t, err)
		assert.Equal(t, "platform", rotated.Key.ProjectID, "the replacement keeps the project")
		assert.Equal(t, int64(10_000), rotated.Key.Limits.TPM, "and the limits")
		id, ok = c.Verify(rotated.Secret)
		require.True(t, ok)
		assert.Equal(t, int64(5_000_000), id.Limits.Models["big"].Budget.Micros)

		_, err = m.CreateProject(ctx, auth.ProjectRequest{ID: "ci", Name: "CI runners"})
		require.NoError(t, err)
		k, err := m.SetKeyProject(ctx, rotated.Key.ID, "ci")
		require.NoError(t, err)
		assert.Equal(t, "ci", k.ProjectID)
		_, err = m.SetProjectLimits(ctx, "ci", &limits.Policy{Concurrency: 8})
		require.NoError(t, err)
		_, err = m.Revoke(context.Background(), rotated.Key.ID)
		require.NoError(t, err)
		_, err = m.Revoke(context.Background(), rotated.Key.ID)
		require.NoError(t, err, "revoking twice is fine, and records nothing")

		entries, err := m.Audit(ctx, 0, 0)
		require.NoError(t, err)
		type line struct{ actor, action, target, detail string }
		var got []line
		for _, e := range entries {
			got = append(got, line{e.Actor, e.Action, e.Target, e.Detail})
			for _, secret := range []string{created.Secret, rotated.Secret} {
				assert.NotContains(t, e.Detail, secret)
				assert.NotContains(t, e.Detail, secret[len(auth.KeyPrefix):len(auth.KeyPrefix)+8])
			}
			assert.False(t, e.At.IsZero())
		}
		oldID, newID := created.Key.ID, rotated.Key.ID
		assert.Equal(t, []line{
			{"admin API", "key.revoke", newID, "revoked"},
			{"alice", "project.limits", "ci", "concurrency 8"},
			{"alice", "key.project", newID, "project platform → ci"},
			{"alice", "project.create", "ci", `name "CI runners"`},
			{"bob", "key.rotate", oldID, "replaced by " + newID + "; the old key is revoked now"},
			{"alice", "key.limits", oldID, "tpm 10000; model big: budget 5/month"},
			{"alice", "key.create", oldID, `name "ci-bot"; project platform; budget 50/month, rpm 60`},
			{"alice", "project.create", "platform", `name "platform"; budget 500/month`},
		}, got)
		page, err := m.Audit(ctx, 2, entries[1].ID)
		require.NoError(t, err)
		require.Len(t, page, 2)
		assert.Equal(t, entries[2].ID, page[0].ID)

		// Refusals: each says how to correct it, and records nothing.
		for name, call := range map[string]func() error{
			"unknown project on create": func() error {
				_, err := m.Create(ctx, auth.CreateRequest{Name: "x", ProjectID: "nope"})
				return err
			},
			"bad project id": func() error {
				_, err := m.CreateProject(ctx, auth.ProjectRequest{ID: "Not A Slug"})
				return err
			},
			"negative rpm": func() error {
				_, err := m.SetProjectLimits(ctx, "ci", &limits.Policy{RPM: -1})
				return err
			},
			"per-model limit of an unknown model": func() error {
				_, err := m.CreateProject(ctx, auth.ProjectRequest{ID: "x", Limits: &limits.Policy{Models: map[string]*limits.Policy{"gpt-9": {RPM: 1}}}})
				return err
			},
			"a revoked key": func() error {
				_, err := m.SetKeyLimits(ctx, newID, &limits.Policy{RPM: 1})
				return err
			},
			"a key from the configuration": func() error {
				_, err := m.SetKeyProject(ctx, "static:ops", "ci")
				return err
			},
		} {
			err := call()
			assert.True(t, auth.IsInvalid(err), "%s: %v", name, err)
		}
		_, err = m.CreateProject(ctx, auth.ProjectRequest{ID: "ci"})
		assert.ErrorIs(t, err, auth.ErrConflict, "a project id is taken once")
		_, err = m.SetKeyLimits(ctx, "key_nope", &limits.Policy{RPM: 1})
		assert.ErrorIs(t, err, auth.ErrNotFound)
		_, err = m.GetProject(ctx, "nope")
		assert.ErrorIs(t, err, auth.ErrNotFound)
		after, err := m.Audit(ctx, 0, 0)
		require.NoError(t, err)
		assert.Len(t, after, len(entries))

		// Without a project store, the calls say so.
		bare := &auth.Manager{Store: s, Cache: c}
		_, err = bare.ListProjects(ctx)
		assert.True(t, auth.IsInvalid(err))
		assert.Contains(t, err.Error(), "keeps no projects")
		assert.False(t, errors.Is(err, auth.ErrNotFound))
	})
}

// Rows written before budgets were one string hold {"micros":…,"period":…}: they still
// load, and are written back in the string form.
func TestLimitsStoredWithTheOldBudgetObjectStillLoad(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		require.NoError(t, s.CreateProject(ctx, &auth.Project{ID: "platform", Name: "platform", Limits: &limits.Policy{RPM: 1}}, nil))
		_, k := newKey(t, "agent", t0)
		k.Limits = &limits.Policy{RPM: 1}
		require.NoError(t, s.CreateKey(ctx, k))
		const old = `{"rpm":60,"budget":{"micros":50000000,"period":"month"},"models":{"m":{"budget":{"micros":2500000,"period":"day"}}}}`
		arg := "?"
		if f.driver == DriverPostgres {
			arg = "$1"
		}
		f.exec(t, `UPDATE projects SET limits = `+arg, old)
		f.exec(t, `UPDATE api_keys SET limits = `+arg, old)
		want := &limits.Policy{RPM: 60, Budget: monthly(50),
			Models: map[string]*limits.Policy{"m": {Budget: &limits.Budget{Micros: 2_500_000, Period: limits.PeriodDay}}}}

		p, err := s.GetProject(ctx, "platform")
		require.NoError(t, err)
		assert.Equal(t, want, p.Limits)
		got, err := s.GetKey(ctx, k.ID)
		require.NoError(t, err)
		assert.Equal(t, want, got.Limits)

		require.NoError(t, s.SetKeyLimits(ctx, k.ID, got.Limits, nil))
		rows := f.rows(t, `SELECT CAST(limits AS TEXT) FROM api_keys`)
		require.Len(t, rows, 1)
		assert.JSONEq(t, `{"rpm":60,"budget":"50/month","models":{"m":{"budget":"2.5/day"}}}`, stringOf(rows[0][0]))
	})
}

func stringOf(v any) string {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	return fmt.Sprint(v)
}

// A member's spend in a project is that of every key the person owns, metered in that
// project: not their keys' spend elsewhere, not another person's.
func TestSpendOfAMemberSumsTheirKeysInTheProject(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		may := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
		owned := func(name, owner string) string {
			_, k := newKey(t, name, may)
			k.Owner = owner
			require.NoError(t, s.CreateKey(ctx, k))
			return k.ID
		}
		a1, a2 := owned("a1", "usr_ann"), owned("a2", "usr_ann")
		b1, none := owned("b1", "usr_bob"), owned("svc", "")
		rec := func(id, key, project string, cost int64) metering.Record {
			return metering.Record{RequestID: id, KeyID: key, ProjectID: project, Model: "m", Status: 200, CostMicros: cost, Time: may.Add(time.Hour)}
		}
		require.NoError(t, s.WriteUsage(ctx, "gw", 1, []metering.Record{
			rec("r1", a1, "team", 1), rec("r2", a2, "team", 10), rec("r3", a2, "other", 100),
			rec("r4", b1, "team", 1_000), rec("r5", none, "team", 10_000),
		}))
		spend := func(id string) int64 {
			t.Helper()
			v, err := s.Spend(ctx, limits.Scope{Kind: limits.ScopeMember, ID: id}, may)
			require.NoError(t, err)
			return v
		}
		assert.Equal(t, int64(11), spend(limits.MemberScopeID("team", "usr_ann")))
		assert.Equal(t, int64(100), spend(limits.MemberScopeID("other", "usr_ann")))
		assert.Equal(t, int64(1_000), spend(limits.MemberScopeID("team", "usr_bob")))
		_, err := s.Spend(ctx, limits.Scope{Kind: limits.ScopeMember, ID: "team"}, may)
		assert.Error(t, err, "a member scope names a project and an owner")
	})
}
