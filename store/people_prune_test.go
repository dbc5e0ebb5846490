package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/access"
)

// Pruning deletes only sessions that ended before the bound: revoked long ago, or past
// their absolute expiry long ago. Live sessions and those that ended since stay.
func TestPruningDeletesOnlyLongEndedSessions(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		now := time.Now().UTC().Truncate(time.Second)
		u, err := s.SaveUser(ctx, &access.User{Issuer: "https://idp.example", Subject: "sub-1", Email: "a@example.com",
			Grants: []access.Grant{{Role: access.RoleViewer}}, LastSignIn: now})
		require.NoError(t, err)
		session := func(name string, created, expires time.Time) *access.Session {
			ss := &access.Session{ID: access.NewID("ses_"), Hash: access.HashSecret(name), UserID: u.ID, Kind: access.KindUser,
				Grants: u.Grants, CreatedAt: created, LastSeenAt: created, ExpiresAt: expires}
			require.NoError(t, s.CreateSession(ctx, ss, nil))
			return ss
		}
		month := 30 * 24 * time.Hour
		live := session("live", now, now.Add(time.Hour))
		oldExpired := session("old-expired", now.Add(-2*month), now.Add(-2*month+time.Hour))
		oldRevoked := session("old-revoked", now.Add(-2*month), now.Add(time.Hour))
		require.NoError(t, s.RevokeSession(ctx, oldRevoked.ID, now.Add(-2*month+time.Minute), nil))
		recentRevoked := session("recent-revoked", now.Add(-time.Hour), now.Add(time.Hour))
		require.NoError(t, s.RevokeSession(ctx, recentRevoked.ID, now.Add(-time.Minute), nil))
		recentExpired := session("recent-expired", now.Add(-2*time.Hour), now.Add(-time.Hour))

		n, err := s.PruneSessions(ctx, now.Add(-month))
		require.NoError(t, err)
		assert.Equal(t, int64(2), n)
		for _, ss := range []*access.Session{live, recentRevoked, recentExpired} {
			_, err := s.SessionByHash(ctx, ss.Hash)
			assert.NoError(t, err, "a session that ended within the bound stays: %s", ss.ID)
		}
		for _, ss := range []*access.Session{oldExpired, oldRevoked} {
			_, err := s.SessionByHash(ctx, ss.Hash)
			assert.ErrorIs(t, err, access.ErrNotFound, ss.ID)
		}
	})
}
