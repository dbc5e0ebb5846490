package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/auth"
)

const testIssuer = "https://login.example.com"

// signIn saves a sign-in of subject, as the console does after the provider's callback.
func signIn(t *testing.T, s *Store, subject, email string, at time.Time, grants ...access.Grant) *access.User {
	t.Helper()
	u, err := s.SaveUser(context.Background(), &access.User{Issuer: testIssuer, Subject: subject, Email: email,
		Name: "Person " + subject, Groups: []string{"eng-a"}, Grants: grants, LastSignIn: at})
	require.NoError(t, err)
	return u
}

// newSession makes a person's session, stored, with its secret.
func newSession(t *testing.T, s *Store, userID string, created, expires time.Time) (string, *access.Session) {
	t.Helper()
	secret := access.NewSecret("")
	ss := &access.Session{ID: access.NewID("ses_"), Hash: access.HashSecret(secret), UserID: userID, Kind: access.KindUser,
		Grants: []access.Grant{{Role: access.RoleMember, Projects: []string{"team-a"}}}, Addr: "192.0.2.7:51234",
		CreatedAt: created, ExpiresAt: expires}
	require.NoError(t, s.CreateSession(context.Background(), ss, auditOf(auth.ActionSignIn, ss.ID, "signed in")))
	return secret, ss
}

// A person is one user however often they sign in: the provider's (issuer, subject)
// finds them, and each sign-in updates what the provider says of them; another subject
// is another person, even with the same e-mail.
func TestASignInCreatesThenUpdatesOneUser(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		member := access.Grant{Role: access.RoleMember, Projects: []string{"team-a"}}
		first := signIn(t, s, "sub-1", "ann@example.com", t0, member)
		assert.True(t, strings.HasPrefix(first.ID, "usr_"), first.ID)
		assert.Equal(t, storedTime(t0), first.CreatedAt)
		assert.Equal(t, storedTime(t0), first.LastSignIn)
		assert.Equal(t, []access.Grant{member}, first.Grants)
		assert.Equal(t, []string{"eng-a"}, first.Groups)

		later := t0.Add(48 * time.Hour)
		viewer := access.Grant{Role: access.RoleViewer}
		again, err := s.SaveUser(ctx, &access.User{Issuer: testIssuer, Subject: "sub-1", Email: "ann.new@example.com",
			Name: "Ann", Groups: []string{"auditors"}, Grants: []access.Grant{viewer}, LastSignIn: later})
		require.NoError(t, err)
		assert.Equal(t, first.ID, again.ID, "the same person")
		assert.Equal(t, &access.User{ID: first.ID, Issuer: testIssuer, Subject: "sub-1", Email: "ann.new@example.com", Name: "Ann",
			Groups: []string{"auditors"}, Grants: []access.Grant{viewer}, CreatedAt: storedTime(t0), LastSignIn: storedTime(later)}, again)

		other := signIn(t, s, "sub-2", "ann.new@example.com", t0)
		assert.NotEqual(t, first.ID, other.ID, "another subject is another person")
		assert.Equal(t, []access.Grant{}, other.Grants)
		elsewhere, err := s.SaveUser(ctx, &access.User{Issuer: "https://other.example.com", Subject: "sub-1"})
		require.NoError(t, err)
		assert.NotEqual(t, first.ID, elsewhere.ID, "the same subject at another issuer is another person")

		got, err := s.GetUser(ctx, first.ID)
		require.NoError(t, err)
		assert.Equal(t, again, got)
		all, err := s.ListUsers(ctx)
		require.NoError(t, err)
		require.Len(t, all, 3)
		assert.Equal(t, []string{"", "ann.new@example.com", "ann.new@example.com"}, []string{all[0].Email, all[1].Email, all[2].Email}, "by e-mail")
		_, err = s.GetUser(ctx, "usr_nobody")
		assert.ErrorIs(t, err, access.ErrNotFound)

		// What the provider says is bounded: a name and groups are cut, an identifier
		// that does not fit is refused.
		long, err := s.SaveUser(ctx, &access.User{Issuer: testIssuer, Subject: "sub-3", Name: strings.Repeat("é", 500) + "\x07",
			Groups: append(make([]string, 0, 300), slicesOf(300, strings.Repeat("g", 300))...)})
		require.NoError(t, err)
		assert.Equal(t, maxPersonName, len([]rune(long.Name)))
		assert.Len(t, long.Groups, maxStoredGroups)
		assert.Len(t, long.Groups[0], maxGroupLen)
		for _, bad := range []*access.User{
			{Issuer: testIssuer, Subject: ""},
			{Issuer: "", Subject: "x"},
			{Issuer: testIssuer, Subject: strings.Repeat("s", 256)},
			{Issuer: testIssuer, Subject: "x", Email: strings.Repeat("e", 321)},
			{Issuer: testIssuer, Subject: "x", Email: "a\nb@example.com"},
			{Issuer: testIssuer, Subject: "x", Grants: []access.Grant{{Role: "god"}}},
			{Issuer: testIssuer, Subject: "x", Grants: []access.Grant{{Role: access.RoleMember}}},
		} {
			_, err := s.SaveUser(ctx, bad)
			assert.Error(t, err, "%+v", bad)
		}
		all, err = s.ListUsers(ctx)
		require.NoError(t, err)
		assert.Len(t, all, 4, "nothing refused was stored")
	})
}

func slicesOf(n int, v string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// A session is found by its secret's hash, seen later (never earlier), vouched for
// again with a new refresh token, and ended; the list shows only sessions neither
// ended nor expired.
func TestSessionsByHashTouchRevokeAndList(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		ann := signIn(t, s, "sub-ann", "ann@example.com", t0)
		secret, ss := newSession(t, s, ann.ID, t0, t0.Add(12*time.Hour))
		glass := &access.Session{ID: access.NewID("ses_"), Hash: access.HashSecret(access.NewSecret("")), Kind: access.KindBreakGlass,
			Name: "admin", Grants: []access.Grant{{Role: access.RoleOwner}}, Addr: strings.Repeat("9", 500),
			CreatedAt: t0.Add(time.Minute), ExpiresAt: t0.Add(12 * time.Hour)}
		require.NoError(t, s.CreateSession(ctx, glass, nil))
		_, expired := newSession(t, s, ann.ID, t0.Add(2*time.Minute), t0.Add(time.Hour))
		_, ended := newSession(t, s, ann.ID, t0.Add(3*time.Minute), t0.Add(12*time.Hour))

		got, err := s.SessionByHash(ctx, access.HashSecret(secret))
		require.NoError(t, err)
		want := &access.Session{ID: ss.ID, Hash: ss.Hash, UserID: ann.ID, Kind: access.KindUser, Grants: ss.Grants, Addr: ss.Addr,
			CreatedAt: storedTime(t0), LastSeenAt: storedTime(t0), ExpiresAt: storedTime(t0.Add(12 * time.Hour))}
		assert.Equal(t, want, got)
		_, err = s.SessionByHash(ctx, access.HashSecret("not a session"))
		assert.ErrorIs(t, err, access.ErrNotFound)
		bg, err := s.SessionByHash(ctx, glass.Hash)
		require.NoError(t, err)
		assert.Len(t, bg.Addr, maxAddrLen, "an address is cut to its bound")
		assert.Empty(t, bg.UserID)

		seen := t0.Add(30 * time.Minute)
		require.NoError(t, s.TouchSession(ctx, ss.ID, seen, time.Time{}, nil))
		require.NoError(t, s.TouchSession(ctx, ss.ID, t0.Add(10*time.Minute), time.Time{}, nil), "a request that finished late")
		got, err = s.SessionByHash(ctx, ss.Hash)
		require.NoError(t, err)
		assert.Equal(t, storedTime(seen), got.LastSeenAt, "never moves backwards")
		assert.Nil(t, got.Refresh)
		checked := t0.Add(40 * time.Minute)
		require.NoError(t, s.TouchSession(ctx, ss.ID, checked, checked, []byte("sealed refresh")))
		got, err = s.SessionByHash(ctx, ss.Hash)
		require.NoError(t, err)
		assert.Equal(t, storedTime(checked), got.CheckedAt)
		assert.Equal(t, []byte("sealed refresh"), got.Refresh)
		rechecked := t0.Add(50 * time.Minute)
		require.NoError(t, s.TouchSession(ctx, ss.ID, rechecked, rechecked, nil))
		got, err = s.SessionByHash(ctx, ss.Hash)
		require.NoError(t, err)
		assert.Equal(t, storedTime(rechecked), got.CheckedAt)
		assert.Equal(t, []byte("sealed refresh"), got.Refresh, "a refresh answer without a new token keeps the old one")
		assert.ErrorIs(t, s.TouchSession(ctx, "ses_nobody", seen, time.Time{}, nil), access.ErrNotFound)

		before := len(trail(t, s))
		e := auditOf(auth.ActionSessionEnd, ended.ID, "ended by an admin")
		require.NoError(t, s.RevokeSession(ctx, ended.ID, t0.Add(time.Hour), e))
		assert.Positive(t, e.ID)
		require.NoError(t, s.RevokeSession(ctx, ended.ID, t0.Add(2*time.Hour), auditOf(auth.ActionSessionEnd, ended.ID, "again")))
		assert.Len(t, trail(t, s), before+1, "ending an ended session records nothing")
		got, err = s.SessionByHash(ctx, ended.Hash)
		require.NoError(t, err)
		assert.Equal(t, storedTime(t0.Add(time.Hour)), got.RevokedAt, "the first end stays")
		assert.ErrorIs(t, s.RevokeSession(ctx, "ses_nobody", t0, nil), access.ErrNotFound)

		live, err := s.ListSessions(ctx, t0.Add(2*time.Hour))
		require.NoError(t, err)
		assert.Equal(t, []string{glass.ID, ss.ID}, sessionIDs(live), "newest first, without the ended and the expired (%s)", expired.ID)
		all, err := s.ListSessions(ctx, time.Time{})
		require.NoError(t, err)
		assert.Equal(t, []string{expired.ID, glass.ID, ss.ID}, sessionIDs(all), "a zero bound keeps the expired")

		// Refused: a second session with the same secret, a person's session of no
		// stored person, a session of a kind that has none, one without an expiry.
		dup := *ss
		dup.ID = access.NewID("ses_")
		assert.ErrorIs(t, s.CreateSession(ctx, &dup, nil), auth.ErrConflict)
		for _, bad := range []*access.Session{
			{ID: "ses_x", Hash: access.HashSecret("x"), Kind: access.KindUser, UserID: "usr_nobody", ExpiresAt: t0},
			{ID: "ses_y", Hash: access.HashSecret("y"), Kind: access.KindToken, ExpiresAt: t0},
			{ID: "ses_z", Hash: access.HashSecret("z"), Kind: access.KindUser, UserID: ann.ID},
		} {
			assert.Error(t, s.CreateSession(ctx, bad, nil), "%+v", bad)
		}
		all, err = s.ListSessions(ctx, time.Time{})
		require.NoError(t, err)
		assert.Len(t, all, 3)
	})
}

func sessionIDs(ss []*access.Session) []string {
	out := []string{}
	for _, s := range ss {
		out = append(out, s.ID)
	}
	return out
}

// Disabling a person ends every session of theirs at once, and no one else's; it is
// recorded once; disabling again changes nothing. Enabling lets them sign in again but
// does not bring their sessions back.
func TestDisablingAPersonEndsTheirSessions(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		ann := signIn(t, s, "sub-ann", "ann@example.com", t0)
		bob := signIn(t, s, "sub-bob", "bob@example.com", t0)
		_, a1 := newSession(t, s, ann.ID, t0, t0.Add(12*time.Hour))
		_, a2 := newSession(t, s, ann.ID, t0.Add(time.Minute), t0.Add(12*time.Hour))
		_, b1 := newSession(t, s, bob.ID, t0, t0.Add(12*time.Hour))
		before := len(trail(t, s))

		at := t0.Add(time.Hour)
		// The actor names the person who acted by e-mail, subject and address: longer
		// than a key's name.
		e := &auth.AuditEntry{Actor: "user " + strings.Repeat("a", 300) + "@example.com (sub " + strings.Repeat("s", 255) + ") from [2001:db8::1]:443",
			Action: auth.ActionUserDisable, Target: ann.ID, Detail: "left the company"}
		require.NoError(t, s.DisableUser(ctx, ann.ID, "provider account removed", at, e))
		assert.Positive(t, e.ID)
		got, err := s.GetUser(ctx, ann.ID)
		require.NoError(t, err)
		assert.Equal(t, storedTime(at), got.DisabledAt)
		assert.Equal(t, "provider account removed", got.DisabledWhy)
		for _, ss := range []*access.Session{a1, a2} {
			got, err := s.SessionByHash(ctx, ss.Hash)
			require.NoError(t, err)
			assert.Equal(t, storedTime(at), got.RevokedAt, "ann's session %s ended", ss.ID)
		}
		live, err := s.ListSessions(ctx, at)
		require.NoError(t, err)
		assert.Equal(t, []string{b1.ID}, sessionIDs(live), "bob's session lives on")

		require.NoError(t, s.DisableUser(ctx, ann.ID, "again", at.Add(time.Hour), auditOf(auth.ActionUserDisable, ann.ID, "again")))
		got, err = s.GetUser(ctx, ann.ID)
		require.NoError(t, err)
		assert.Equal(t, storedTime(at), got.DisabledAt, "the first disablement stays")
		assert.Len(t, trail(t, s), before+1, "disabling a disabled person records nothing")

		// A sign-in of a disabled person is still found, disabled: the console refuses
		// it, and the store gives them no session (a sign-in that read the person
		// before the disablement cannot leave a live session behind it).
		again := signIn(t, s, "sub-ann", "ann@example.com", at.Add(time.Minute))
		assert.Equal(t, storedTime(at), again.DisabledAt)
		late := &access.Session{ID: access.NewID("ses_"), Hash: access.HashSecret("late"), Kind: access.KindUser, UserID: ann.ID,
			ExpiresAt: at.Add(time.Hour)}
		assert.ErrorIs(t, s.CreateSession(ctx, late, nil), ErrUserDisabled)
		live, err = s.ListSessions(ctx, at)
		require.NoError(t, err)
		assert.Equal(t, []string{b1.ID}, sessionIDs(live))

		require.NoError(t, s.EnableUser(ctx, ann.ID, auditOf(auth.ActionUserEnable, ann.ID, "back")))
		got, err = s.GetUser(ctx, ann.ID)
		require.NoError(t, err)
		assert.Zero(t, got.DisabledAt)
		assert.Empty(t, got.DisabledWhy)
		require.NoError(t, s.EnableUser(ctx, ann.ID, auditOf(auth.ActionUserEnable, ann.ID, "again")))
		assert.Len(t, trail(t, s), before+2, "enabling an enabled person records nothing")
		got1, err := s.SessionByHash(ctx, a1.Hash)
		require.NoError(t, err)
		assert.False(t, got1.RevokedAt.IsZero(), "ended sessions stay ended")

		assert.ErrorIs(t, s.DisableUser(ctx, "usr_nobody", "x", at, nil), access.ErrNotFound)
		assert.ErrorIs(t, s.EnableUser(ctx, "usr_nobody", nil), access.ErrNotFound)
	})
}

// Every change to people, sessions and tokens commits with its audit entry or not at
// all: when the audit trail refuses the entry, the change is rolled back (a disabled
// person's sessions too); when the change fails, no entry is left.
func TestPeopleChangesAndTheirAuditEntriesCommitTogether(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		ann := signIn(t, s, "sub-ann", "ann@example.com", t0)
		disabled := signIn(t, s, "sub-dis", "dis@example.com", t0)
		require.NoError(t, s.DisableUser(ctx, disabled.ID, "gone", t0, nil))
		_, live := newSession(t, s, ann.ID, t0, t0.Add(12*time.Hour))
		tok := newToken(t, s, "ci", t0)

		changes := []struct {
			name  string
			table string // where the change itself is written
			do    func() error
		}{
			{"disable", "users", func() error {
				return s.DisableUser(ctx, ann.ID, "gone", t0.Add(time.Hour), auditOf(auth.ActionUserDisable, ann.ID, "gone"))
			}},
			{"disable (sessions)", "sessions", func() error {
				return s.DisableUser(ctx, ann.ID, "gone", t0.Add(time.Hour), auditOf(auth.ActionUserDisable, ann.ID, "gone"))
			}},
			{"enable", "users", func() error {
				return s.EnableUser(ctx, disabled.ID, auditOf(auth.ActionUserEnable, disabled.ID, "back"))
			}},
			{"session create", "sessions", func() error {
				ss := &access.Session{ID: "ses_new", Hash: access.HashSecret("new"), Kind: access.KindUser, UserID: ann.ID,
					ExpiresAt: t0.Add(time.Hour)}
				return s.CreateSession(ctx, ss, auditOf(auth.ActionSignIn, ss.ID, "signed in"))
			}},
			{"session revoke", "sessions", func() error {
				return s.RevokeSession(ctx, live.ID, t0.Add(time.Hour), auditOf(auth.ActionSessionEnd, live.ID, "ended"))
			}},
			{"token create", "api_tokens", func() error {
				tk := &access.Token{ID: "tok_new", Name: "new", Prefix: "syt_new", Hash: access.HashSecret("syt_new_secret"),
					Grant: access.Grant{Role: access.RoleViewer}, CreatedBy: "ann", ExpiresAt: t0.Add(time.Hour)}
				return s.CreateToken(ctx, tk, auditOf(auth.ActionTokenCreate, tk.ID, "viewer"))
			}},
			{"token revoke", "api_tokens", func() error {
				return s.RevokeToken(ctx, tok.ID, t0.Add(time.Hour), auditOf(auth.ActionTokenRevoke, tok.ID, "revoked"))
			}},
		}
		state := func() [][][]any {
			return [][][]any{
				f.rows(t, `SELECT * FROM users ORDER BY id`),
				f.rows(t, `SELECT * FROM sessions ORDER BY id`),
				f.rows(t, `SELECT * FROM api_tokens ORDER BY id`),
				f.rows(t, `SELECT * FROM audit_log ORDER BY id`),
			}
		}
		for _, ch := range changes {
			t.Run(ch.name, func(t *testing.T) {
				before := state()
				allow := f.refuseWrites(t, "audit_log")
				assert.Error(t, ch.do(), "the audit trail refused the entry")
				allow()
				assert.Equal(t, before, state(), "without its entry, the change was rolled back")

				allow = f.refuseWrites(t, ch.table)
				assert.Error(t, ch.do(), "the change itself was refused")
				allow()
				assert.Equal(t, before, state(), "a change that failed left no entry")
			})
		}
	})
}

// newToken stores an admin token made by "ann", expiring a day after created.
func newToken(t *testing.T, s *Store, name string, created time.Time) *access.Token {
	t.Helper()
	secret := access.NewSecret(access.TokenPrefix)
	tk := &access.Token{ID: access.NewID("tok_"), Name: name, Prefix: secret[:10], Hash: access.HashSecret(secret),
		Grant: access.Grant{Role: access.RoleProjectAdmin, Projects: []string{"team-a"}}, CreatedBy: "user ann@example.com",
		CreatedAt: created, ExpiresAt: created.Add(24 * time.Hour)}
	require.NoError(t, s.CreateToken(context.Background(), tk, auditOf(auth.ActionTokenCreate, tk.ID, "project_admin of team-a")))
	return tk
}

// A token is found by its secret's hash with its grant, used (the last use never moves
// backwards), listed newest first, and revoked once.
func TestTokensAreStoredLookedUpTouchedAndRevoked(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		ci := newToken(t, s, "ci", t0)
		infra := newToken(t, s, "infra", t0.Add(time.Minute))

		got, err := s.TokenByHash(ctx, ci.Hash)
		require.NoError(t, err)
		assert.Equal(t, &access.Token{ID: ci.ID, Name: "ci", Prefix: ci.Prefix, Hash: ci.Hash, Grant: ci.Grant, CreatedBy: ci.CreatedBy,
			CreatedAt: storedTime(t0), ExpiresAt: storedTime(t0.Add(24 * time.Hour))}, got)
		assert.True(t, got.Active(t0.Add(time.Hour)))
		_, err = s.TokenByHash(ctx, access.HashSecret("syt_unknown"))
		assert.ErrorIs(t, err, access.ErrNotFound)

		used := t0.Add(2 * time.Hour)
		require.NoError(t, s.TouchToken(ctx, ci.ID, used))
		require.NoError(t, s.TouchToken(ctx, ci.ID, t0.Add(time.Hour)))
		got, err = s.TokenByHash(ctx, ci.Hash)
		require.NoError(t, err)
		assert.Equal(t, storedTime(used), got.LastUsed, "never moves backwards")
		assert.ErrorIs(t, s.TouchToken(ctx, "tok_nobody", used), access.ErrNotFound)

		list, err := s.ListTokens(ctx)
		require.NoError(t, err)
		require.Len(t, list, 2)
		assert.Equal(t, []string{infra.ID, ci.ID}, []string{list[0].ID, list[1].ID}, "newest first")

		before := len(trail(t, s))
		require.NoError(t, s.RevokeToken(ctx, ci.ID, t0.Add(3*time.Hour), auditOf(auth.ActionTokenRevoke, ci.ID, "revoked")))
		require.NoError(t, s.RevokeToken(ctx, ci.ID, t0.Add(4*time.Hour), auditOf(auth.ActionTokenRevoke, ci.ID, "again")))
		assert.Len(t, trail(t, s), before+1, "revoking a revoked token records nothing")
		got, err = s.TokenByHash(ctx, ci.Hash)
		require.NoError(t, err)
		assert.Equal(t, storedTime(t0.Add(3*time.Hour)), got.RevokedAt)
		assert.False(t, got.Active(t0.Add(3*time.Hour)))
		assert.ErrorIs(t, s.RevokeToken(ctx, "tok_nobody", t0, nil), access.ErrNotFound)

		secret := access.NewSecret(access.TokenPrefix)
		good := access.Token{ID: "tok_x", Name: "x", Prefix: secret[:10], Hash: access.HashSecret(secret),
			Grant: access.Grant{Role: access.RoleViewer}, CreatedBy: "ann", ExpiresAt: t0.Add(time.Hour)}
		for name, edit := range map[string]func(*access.Token){
			"no expiry":           func(tk *access.Token) { tk.ExpiresAt = time.Time{} },
			"prefix is secret":    func(tk *access.Token) { tk.Prefix = "syt_short"; tk.Hash = access.HashSecret("syt_short") },
			"unknown role":        func(tk *access.Token) { tk.Grant.Role = "root" },
			"member everywhere":   func(tk *access.Token) { tk.Grant = access.Grant{Role: access.RoleMember} },
			"no maker":            func(tk *access.Token) { tk.CreatedBy = "" },
			"same secret":         func(tk *access.Token) { tk.Hash = infra.Hash },
			"same id":             func(tk *access.Token) { tk.ID = infra.ID },
			"name with a newline": func(tk *access.Token) { tk.Name = "a\nb" },
		} {
			tk := good
			edit(&tk)
			assert.Error(t, s.CreateToken(ctx, &tk, nil), name)
		}
		list, err = s.ListTokens(ctx)
		require.NoError(t, err)
		assert.Len(t, list, 2, "nothing refused was stored")
	})
}
