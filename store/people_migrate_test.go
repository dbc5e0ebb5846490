package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/auth"
)

// A database of a gateway from before people (migrations 1 to 7), holding keys and a
// project, upgraded by Open: every key reads back as it was, without an owner; the
// project has no member rules (members may not make keys there until an admin says
// so); an old key rotates with no owner; and people, sessions, tokens, owned keys and
// member rules can then be stored.
func TestUpgradingADatabaseFromBeforePeople(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		ms, err := loadMigrations(f.driver)
		require.NoError(t, err)
		i := len(ms) - 1
		require.Equal(t, "0008_people", ms[i].name)
		old := f.backend(t)
		require.NoError(t, old.migrate(ctx, ms[:i]))
		secrets, before := legacyKeys(t, f)
		created := map[string]string{DriverSQLite: "?", DriverPostgres: "$1"}[f.driver]
		var at any = t0.UnixMicro()
		if f.driver == DriverPostgres {
			at = t0
		}
		f.exec(t, `INSERT INTO projects (id, name, limits, created_at, seq) VALUES ('platform', 'Platform', NULL, `+created+`, 1000)`, at)
		require.NotContains(t, f.tables(t), "users")
		require.NoError(t, old.close())

		s := f.open(t)
		assert.Equal(t, versionsOf(ms), f.appliedMigrations(t), "every migration applied")
		assert.Subset(t, f.tables(t), []string{"users", "sessions", "api_tokens"})
		after, err := s.ListKeys(ctx)
		require.NoError(t, err)
		assert.Equal(t, before, byID(after), "every key and every field as it was, no owner")
		p, err := s.GetProject(ctx, "platform")
		require.NoError(t, err)
		assert.Nil(t, p.Members)

		cache, err := auth.NewCache(ctx, s)
		require.NoError(t, err)
		id, ok := cache.Verify(secrets["in use"])
		require.True(t, ok)
		assert.Empty(t, id.Owner)

		inUse := before[0]
		for _, k := range before {
			if k.Name == "in use" {
				inUse = k
			}
		}
		_, repl := newKey(t, "in use", t0)
		_, err = s.RotateKey(ctx, inUse.ID, repl, time.Time{}, 0)
		require.NoError(t, err)
		got, err := s.GetKey(ctx, repl.ID)
		require.NoError(t, err)
		assert.Empty(t, got.Owner, "an old key's replacement has no owner either")

		u := signIn(t, s, "sub-1", "ann@example.com", t0)
		newSession(t, s, u.ID, t0, t0.Add(time.Hour))
		newToken(t, s, "ci", t0)
		_, owned := newKey(t, "ann's", t0)
		owned.Owner = u.ID
		require.NoError(t, s.CreateKey(ctx, owned))
		require.NoError(t, s.SetProjectMembers(ctx, "platform", &auth.MemberRules{Departed: "keep"}, nil))
		p, err = s.GetProject(ctx, "platform")
		require.NoError(t, err)
		assert.Equal(t, &auth.MemberRules{Departed: "keep"}, p.Members)
		users, err := s.ListUsers(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{u.ID}, []string{users[0].ID})
		_, err = s.GetUser(ctx, "usr_none")
		assert.ErrorIs(t, err, access.ErrNotFound)
	})
}
