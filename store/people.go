package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/auth"
)

// People, their sessions and API tokens: the tables of migration 0008_people. A change
// that takes an audit entry commits it in the same transaction. Nothing here takes a
// number of the keys' sequence: no gateway caches people, sessions or tokens; the
// console reads them from the store when a call comes in.

var _ access.Store = (*Store)(nil)

// ErrUserDisabled refuses a session for a person who is disabled: checked in the
// session's own transaction, so that a sign-in racing the person's disablement cannot
// leave a live session behind it.
var ErrUserDisabled = errors.New("store: the person is disabled")

// Bounds on what is stored of a person, a session and a token. What the provider says
// of a person (a name, groups) is for display and is cut to fit rather than refused, so
// that a sign-in does not fail over it; what identifies something (an issuer, a
// subject, an e-mail, ids) is refused when it does not fit.
const (
	maxIssuerLen     = 1000 // an URL
	maxSubjectLen    = 255  // OpenID Connect's own bound on "sub"
	maxEmailLen      = 320  // RFC 5321's local part and domain
	maxPersonName    = 200  // characters; longer is cut
	maxStoredGroups  = 256  // groups kept; more are left off
	maxGroupLen      = 256  // bytes; longer is cut
	maxGrants        = 64
	maxGrantProjects = 256
	maxGrantProject  = 200 // bytes of one project id in a grant
	maxAddrLen       = 128 // bytes of an address; longer is cut
	maxRefreshLen    = 16 << 10
	maxWhyLen        = 500 // bytes of why a person was disabled; longer is cut
)

// cutText is s as stored for display: valid UTF-8 without control characters, at most
// max bytes, cut at a character's boundary.
func cutText(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// cutRunes is cutText bounded in characters rather than bytes.
func cutRunes(s string, max int) string {
	s = cutText(s, len(s))
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	return string([]rune(s)[:max])
}

// checkIdent refuses an identifying value that is empty, too long or not printable.
func checkIdent(what, v string, max int) error {
	switch {
	case v == "":
		return fmt.Errorf("store: empty %s", what)
	case len(v) > max:
		return fmt.Errorf("store: %s longer than %d bytes", what, max)
	case !utf8.ValidString(v) || strings.IndexFunc(v, unicode.IsControl) >= 0:
		return fmt.Errorf("store: %s holds characters that are not printable", what)
	}
	return nil
}

// checkGrants refuses grants that are not valid or larger than stored grants may be.
func checkGrants(what string, grants []access.Grant) error {
	if len(grants) > maxGrants {
		return fmt.Errorf("store: %s: more than %d grants", what, maxGrants)
	}
	for _, g := range grants {
		if err := checkGrant(what, g); err != nil {
			return err
		}
	}
	return nil
}

func checkGrant(what string, g access.Grant) error {
	if err := g.Validate(); err != nil {
		return fmt.Errorf("store: %s: %w", what, err)
	}
	if len(g.Projects) > maxGrantProjects {
		return fmt.Errorf("store: %s: a grant names more than %d projects", what, maxGrantProjects)
	}
	for _, p := range g.Projects {
		if len(p) > maxGrantProject {
			return fmt.Errorf("store: %s: a project id longer than %d bytes", what, maxGrantProject)
		}
	}
	return nil
}

// jsonText is v as a JSON column stores it.
func jsonText(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// grantsOrEmpty is grants, never nil: the column holds [] for none.
func grantsOrEmpty(g []access.Grant) []access.Grant {
	if g == nil {
		return []access.Grant{}
	}
	return g
}

// ---- users

const userColumns = `id, issuer, subject, email, name, groups, grants, created_at, last_sign_in, disabled_at, disabled_why`

func scanUser(d *sqlDialect, r resultRows) (*access.User, error) {
	var (
		u              access.User
		groups, grants []byte
	)
	created, getCreated := d.timeCell()
	signIn, getSignIn := d.timeCell()
	disabled, getDisabled := d.timeCell()
	if err := r.Scan(&u.ID, &u.Issuer, &u.Subject, &u.Email, &u.Name, &groups, &grants, created, signIn, disabled, &u.DisabledWhy); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(groups, &u.Groups); err != nil {
		return nil, fmt.Errorf("user %s: groups: %w", u.ID, err)
	}
	if err := json.Unmarshal(grants, &u.Grants); err != nil {
		return nil, fmt.Errorf("user %s: grants: %w", u.ID, err)
	}
	if len(u.Groups) == 0 {
		u.Groups = nil
	}
	u.Grants = grantsOrEmpty(u.Grants)
	u.CreatedAt, u.LastSignIn, u.DisabledAt = getCreated(), getSignIn(), getDisabled()
	return &u, nil
}

// oneUser runs a query for at most one user; none is access.ErrNotFound.
func oneUser(ctx context.Context, d *sqlDialect, r runner, where string, args ...any) (*access.User, error) {
	var u *access.User
	err := r.queryRows(ctx, d.sql(`SELECT `+userColumns+` FROM users WHERE `+where), args, func(row resultRows) (err error) {
		u, err = scanUser(d, row)
		return err
	})
	if err == nil && u == nil {
		err = access.ErrNotFound
	}
	return u, err
}

// SaveUser implements access.Store. It refuses an empty or over-long issuer or
// subject and an e-mail longer than an address can be; it cuts a name, groups and
// their number to what it keeps (see the bounds above). LastSignIn is now when zero, as
// is a new user's CreatedAt.
func (s *Store) SaveUser(ctx context.Context, u *access.User) (*access.User, error) {
	if u == nil {
		return nil, errors.New("store: nil user")
	}
	if err := errors.Join(checkIdent("issuer", u.Issuer, maxIssuerLen), checkIdent("subject", u.Subject, maxSubjectLen)); err != nil {
		return nil, err
	}
	if u.Email != "" {
		if err := checkIdent("e-mail", u.Email, maxEmailLen); err != nil {
			return nil, err
		}
	}
	if err := checkGrants("user's grants", u.Grants); err != nil {
		return nil, err
	}
	groups := make([]string, 0, min(len(u.Groups), maxStoredGroups))
	for _, g := range u.Groups[:min(len(u.Groups), maxStoredGroups)] {
		if g = cutText(g, maxGroupLen); g != "" {
			groups = append(groups, g)
		}
	}
	groupsJSON, err := jsonText(groups)
	if err != nil {
		return nil, err
	}
	grantsJSON, err := jsonText(grantsOrEmpty(u.Grants))
	if err != nil {
		return nil, err
	}
	name := cutRunes(u.Name, maxPersonName)
	signIn := storedTime(orNow(u.LastSignIn))
	d := s.dialect()
	return call(ctx, s, kindWrite, func(b backend) (*access.User, error) {
		var saved *access.User
		err := b.write(ctx, func(w writer) error {
			old, err := oneUser(ctx, d, w, `issuer = $1 AND subject = $2`, u.Issuer, u.Subject)
			switch {
			case errors.Is(err, access.ErrNotFound):
				id := access.NewID("usr_")
				created := storedTime(u.CreatedAt)
				if created.IsZero() {
					created = signIn
				}
				_, err = w.exec(ctx, d.sql(`INSERT INTO users (`+userColumns+`)
					VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7::jsonb, $8, $9, NULL, '')`),
					id, u.Issuer, u.Subject, u.Email, name, groupsJSON, grantsJSON, d.time(created), d.time(signIn))
				if err != nil {
					return err
				}
				saved, err = oneUser(ctx, d, w, `id = $1`, id)
				return err
			case err != nil:
				return err
			}
			if _, err := w.exec(ctx, d.sql(`UPDATE users SET email = $1, name = $2, groups = $3::jsonb, grants = $4::jsonb,
				last_sign_in = $5 WHERE id = $6`), u.Email, name, groupsJSON, grantsJSON, d.time(signIn), old.ID); err != nil {
				return err
			}
			saved, err = oneUser(ctx, d, w, `id = $1`, old.ID)
			return err
		})
		return saved, err
	})
}

// GetUser implements access.Store.
func (s *Store) GetUser(ctx context.Context, id string) (*access.User, error) {
	d := s.dialect()
	return call(ctx, s, kindRead, func(b backend) (*access.User, error) { return oneUser(ctx, d, b, `id = $1`, id) })
}

// ListUsers implements access.Store: every user, by e-mail (then id), byte by byte.
func (s *Store) ListUsers(ctx context.Context) ([]*access.User, error) {
	d := s.dialect()
	return call(ctx, s, kindRead, func(b backend) ([]*access.User, error) {
		var out []*access.User
		err := b.queryRows(ctx, d.sql(`SELECT `+userColumns+` FROM users ORDER BY email`+d.orderText+`, id`+d.orderText), nil,
			func(r resultRows) error {
				u, err := scanUser(d, r)
				out = append(out, u)
				return err
			})
		return out, err
	})
}

// DisableUser implements access.Store: in one transaction it marks the user disabled
// at `at` (now when zero) with why (cut to maxWhyLen bytes), revokes every session of
// theirs not revoked yet, and records e. A user already disabled changes nothing and
// records nothing; an unknown id is access.ErrNotFound.
func (s *Store) DisableUser(ctx context.Context, id, why string, at time.Time, e *auth.AuditEntry) error {
	at = storedTime(orNow(at))
	why = cutText(why, maxWhyLen)
	d := s.dialect()
	return s.peopleChange(ctx, e, func(w writer) (bool, error) {
		u, err := oneUser(ctx, d, w, `id = $1`, id)
		if err != nil || !u.DisabledAt.IsZero() {
			return false, err
		}
		if _, err := w.exec(ctx, d.sql(`UPDATE users SET disabled_at = $1, disabled_why = $2 WHERE id = $3`), d.time(at), why, id); err != nil {
			return false, err
		}
		// A disabled person is signed out everywhere at once, not when their
		// sessions would have ended.
		_, err = w.exec(ctx, d.sql(`UPDATE sessions SET revoked_at = $1 WHERE user_id = $2 AND revoked_at IS NULL`), d.time(at), id)
		return err == nil, err
	})
}

// EnableUser implements access.Store: it lifts a user's disablement (their ended
// sessions stay ended). A user not disabled changes nothing and records nothing; an
// unknown id is access.ErrNotFound.
func (s *Store) EnableUser(ctx context.Context, id string, e *auth.AuditEntry) error {
	d := s.dialect()
	return s.peopleChange(ctx, e, func(w writer) (bool, error) {
		u, err := oneUser(ctx, d, w, `id = $1`, id)
		if err != nil || u.DisabledAt.IsZero() {
			return false, err
		}
		_, err = w.exec(ctx, d.sql(`UPDATE users SET disabled_at = NULL, disabled_why = '' WHERE id = $1`), id)
		return err == nil, err
	})
}

// peopleChange runs change in a write transaction and, when it changed something,
// records e in the same transaction.
func (s *Store) peopleChange(ctx context.Context, e *auth.AuditEntry, change func(writer) (changed bool, err error)) error {
	entry, err := newAuditRow(e)
	if err != nil {
		return err
	}
	var changed bool
	err = call0(ctx, s, kindWrite, func(b backend) error {
		return b.write(ctx, func(w writer) error {
			var err error
			if changed, err = change(w); err != nil || !changed {
				return err
			}
			return appendAuditIn(ctx, w, entry)
		})
	})
	if err == nil && changed {
		auditDone(e, entry)
	}
	return err
}

// ---- sessions

const sessionColumns = `id, hash, user_id, kind, name, grants, addr, created_at, last_seen_at, expires_at, revoked_at, refresh, checked_at`

func scanSession(d *sqlDialect, r resultRows) (*access.Session, error) {
	var (
		ss                   access.Session
		hash, userID, grants []byte
		kind                 string
	)
	created, getCreated := d.timeCell()
	seen, getSeen := d.timeCell()
	expires, getExpires := d.timeCell()
	revoked, getRevoked := d.timeCell()
	checked, getChecked := d.timeCell()
	if err := r.Scan(&ss.ID, &hash, &userID, &kind, &ss.Name, &grants, &ss.Addr, created, seen, expires, revoked,
		&ss.Refresh, checked); err != nil {
		return nil, err
	}
	if len(hash) != len(ss.Hash) {
		return nil, fmt.Errorf("session %s: stored hash has %d bytes", ss.ID, len(hash))
	}
	copy(ss.Hash[:], hash)
	ss.UserID, ss.Kind = string(userID), access.Kind(kind)
	if err := json.Unmarshal(grants, &ss.Grants); err != nil {
		return nil, fmt.Errorf("session %s: grants: %w", ss.ID, err)
	}
	ss.Grants = grantsOrEmpty(ss.Grants)
	if len(ss.Refresh) == 0 {
		ss.Refresh = nil
	}
	ss.CreatedAt, ss.LastSeenAt, ss.ExpiresAt = getCreated(), getSeen(), getExpires()
	ss.RevokedAt, ss.CheckedAt = getRevoked(), getChecked()
	return &ss, nil
}

// oneSession runs a query for at most one session; none is access.ErrNotFound.
func oneSession(ctx context.Context, d *sqlDialect, r runner, where string, args ...any) (*access.Session, error) {
	var ss *access.Session
	err := r.queryRows(ctx, d.sql(`SELECT `+sessionColumns+` FROM sessions WHERE `+where), args, func(row resultRows) (err error) {
		ss, err = scanSession(d, row)
		return err
	})
	if err == nil && ss == nil {
		err = access.ErrNotFound
	}
	return ss, err
}

// CreateSession implements access.Store. A person's session (KindUser) needs a stored
// UserID, a break-glass one (KindBreakGlass) a Name; both need a hash and an
// ExpiresAt. CreatedAt is now when zero, LastSeenAt CreatedAt when zero; Addr is cut to
// maxAddrLen bytes. An id or hash already stored is ErrConflict; an unknown user
// access.ErrNotFound; a disabled one ErrUserDisabled.
func (s *Store) CreateSession(ctx context.Context, ss *access.Session, e *auth.AuditEntry) error {
	if ss == nil {
		return errors.New("store: nil session")
	}
	switch {
	case ss.ID == "" || len(ss.ID) > maxIDLen:
		return fmt.Errorf("store: session id: want 1 to %d bytes", maxIDLen)
	case ss.Hash == access.Secret{}:
		return fmt.Errorf("store: session %s: no hash", ss.ID)
	case ss.ExpiresAt.IsZero():
		return fmt.Errorf("store: session %s: no expiry", ss.ID)
	case len(ss.Refresh) > maxRefreshLen:
		return fmt.Errorf("store: session %s: sealed refresh token longer than %d bytes", ss.ID, maxRefreshLen)
	}
	switch ss.Kind {
	case access.KindUser:
		if ss.UserID == "" {
			return fmt.Errorf("store: session %s: a person's session without their user id", ss.ID)
		}
	case access.KindBreakGlass:
		if err := checkIdent("break-glass user name", ss.Name, maxAuditField); err != nil {
			return err
		}
	default:
		return fmt.Errorf("store: session %s: kind %q has no sessions", ss.ID, ss.Kind)
	}
	if err := checkGrants("session's grants", ss.Grants); err != nil {
		return err
	}
	grantsJSON, err := jsonText(grantsOrEmpty(ss.Grants))
	if err != nil {
		return err
	}
	created := storedTime(orNow(ss.CreatedAt))
	seen := storedTime(ss.LastSeenAt)
	if seen.IsZero() {
		seen = created
	}
	addr := cutText(ss.Addr, maxAddrLen)
	var refresh any
	if len(ss.Refresh) > 0 {
		refresh = ss.Refresh
	}
	d := s.dialect()
	return s.peopleChange(ctx, e, func(w writer) (bool, error) {
		if ss.Kind == access.KindUser {
			u, err := oneUser(ctx, d, w, `id = $1`, ss.UserID)
			if err != nil {
				return false, fmt.Errorf("store: session %s: user %s: %w", ss.ID, ss.UserID, err)
			}
			if !u.DisabledAt.IsZero() {
				return false, fmt.Errorf("%w: no session for user %s", ErrUserDisabled, ss.UserID)
			}
		}
		_, err := w.exec(ctx, d.sql(`INSERT INTO sessions (`+sessionColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10, $11, $12, $13)`),
			ss.ID, ss.Hash[:], nullString(ss.UserID), string(ss.Kind), ss.Name, grantsJSON, addr,
			d.time(created), d.time(seen), d.time(storedTime(ss.ExpiresAt)), d.time(storedTime(ss.RevokedAt)),
			refresh, d.time(storedTime(ss.CheckedAt)))
		if uniqueViolation(err) {
			return false, fmt.Errorf("%w: session %s: id or hash already stored", ErrConflict, ss.ID)
		}
		if err == nil {
			ss.CreatedAt, ss.LastSeenAt, ss.Addr = created, seen, addr
		}
		return err == nil, err
	})
}

// SessionByHash implements access.Store: ended sessions too.
func (s *Store) SessionByHash(ctx context.Context, h access.Secret) (*access.Session, error) {
	d := s.dialect()
	return call(ctx, s, kindRead, func(b backend) (*access.Session, error) {
		return oneSession(ctx, d, b, `hash = $1`, h[:])
	})
}

// TouchSession implements access.Store. The last-seen time never moves backwards (two
// requests of one browser finish in any order). When checked is set, refresh replaces
// the stored sealed refresh token; a nil refresh keeps the one stored (a provider's
// refresh answer need not carry a new one). An unknown id is access.ErrNotFound.
func (s *Store) TouchSession(ctx context.Context, id string, at, checked time.Time, refresh []byte) error {
	if len(refresh) > maxRefreshLen {
		return fmt.Errorf("store: session %s: sealed refresh token longer than %d bytes", id, maxRefreshLen)
	}
	d := s.dialect()
	at = storedTime(orNow(at))
	query, args := `UPDATE sessions SET last_seen_at = GREATEST(last_seen_at, $1) WHERE id = $2`, []any{d.time(at), id}
	if !checked.IsZero() {
		var sealed any
		if len(refresh) > 0 {
			sealed = refresh
		}
		query = `UPDATE sessions SET last_seen_at = GREATEST(last_seen_at, $1), checked_at = $3, refresh = coalesce($4, refresh)
			WHERE id = $2`
		args = append(args, d.time(storedTime(checked)), sealed)
	}
	return call0(ctx, s, kindWrite, func(b backend) error {
		n, err := b.exec(ctx, d.sql(query), args...)
		if err == nil && n == 0 {
			err = access.ErrNotFound
		}
		return err
	})
}

// RevokeSession implements access.Store. Revoking a revoked session changes nothing
// and records nothing; an unknown id is access.ErrNotFound.
func (s *Store) RevokeSession(ctx context.Context, id string, at time.Time, e *auth.AuditEntry) error {
	at = storedTime(orNow(at))
	d := s.dialect()
	return s.peopleChange(ctx, e, func(w writer) (bool, error) {
		ss, err := oneSession(ctx, d, w, `id = $1`, id)
		if err != nil || !ss.RevokedAt.IsZero() {
			return false, err
		}
		_, err = w.exec(ctx, d.sql(`UPDATE sessions SET revoked_at = $1 WHERE id = $2`), d.time(at), id)
		return err == nil, err
	})
}

// ListSessions implements access.Store.
func (s *Store) ListSessions(ctx context.Context, expiresAfter time.Time) ([]*access.Session, error) {
	d := s.dialect()
	return call(ctx, s, kindRead, func(b backend) ([]*access.Session, error) {
		var out []*access.Session
		// A zero expiresAfter is no bound (a comparison with NULL would keep nothing).
		after := storedTime(expiresAfter)
		if after.IsZero() {
			after = time.Unix(0, 0).UTC()
		}
		err := b.queryRows(ctx, d.sql(`SELECT `+sessionColumns+` FROM sessions
			WHERE revoked_at IS NULL AND expires_at > $1 ORDER BY created_at DESC, id`+d.orderText+` DESC`),
			[]any{d.time(after)}, func(r resultRows) error {
				ss, err := scanSession(d, r)
				out = append(out, ss)
				return err
			})
		return out, err
	})
}

// PruneSessions deletes the sessions that ended (revoked, or past their absolute
// expiry) before `before`, and reports how many. Live sessions and recently ended ones,
// which the audit trail and the sessions list may still name, stay.
func (s *Store) PruneSessions(ctx context.Context, before time.Time) (int64, error) {
	d := s.dialect()
	at := storedTime(before)
	var n int64
	err := call0(ctx, s, kindWrite, func(b backend) error {
		var err error
		n, err = b.exec(ctx, d.sql(`DELETE FROM sessions WHERE (revoked_at IS NOT NULL AND revoked_at < $1) OR expires_at < $1`), d.time(at))
		return err
	})
	return n, err
}

// ---- API tokens

const tokenColumns = `id, name, prefix, hash, token_grant, created_by, created_at, expires_at, revoked_at, last_used_at`

func scanToken(d *sqlDialect, r resultRows) (*access.Token, error) {
	var (
		t           access.Token
		hash, grant []byte
	)
	created, getCreated := d.timeCell()
	expires, getExpires := d.timeCell()
	revoked, getRevoked := d.timeCell()
	used, getUsed := d.timeCell()
	if err := r.Scan(&t.ID, &t.Name, &t.Prefix, &hash, &grant, &t.CreatedBy, created, expires, revoked, used); err != nil {
		return nil, err
	}
	if len(hash) != len(t.Hash) {
		return nil, fmt.Errorf("token %s: stored hash has %d bytes", t.ID, len(hash))
	}
	copy(t.Hash[:], hash)
	if err := json.Unmarshal(grant, &t.Grant); err != nil {
		return nil, fmt.Errorf("token %s: grant: %w", t.ID, err)
	}
	t.CreatedAt, t.ExpiresAt, t.RevokedAt, t.LastUsed = getCreated(), getExpires(), getRevoked(), getUsed()
	return &t, nil
}

// oneToken runs a query for at most one token; none is access.ErrNotFound.
func oneToken(ctx context.Context, d *sqlDialect, r runner, where string, args ...any) (*access.Token, error) {
	var t *access.Token
	err := r.queryRows(ctx, d.sql(`SELECT `+tokenColumns+` FROM api_tokens WHERE `+where), args, func(row resultRows) (err error) {
		t, err = scanToken(d, row)
		return err
	})
	if err == nil && t == nil {
		err = access.ErrNotFound
	}
	return t, err
}

// CreateToken implements access.Store. A token needs an id, a name (as a key's), a
// hash, a display prefix that is not the whole secret, a valid grant, who made it, and
// an expiry; CreatedAt is now when zero. An id or hash already stored is ErrConflict.
func (s *Store) CreateToken(ctx context.Context, t *access.Token, e *auth.AuditEntry) error {
	if t == nil {
		return errors.New("store: nil token")
	}
	switch {
	case t.ID == "" || len(t.ID) > maxIDLen:
		return fmt.Errorf("store: token id: want 1 to %d bytes", maxIDLen)
	case t.Hash == access.Secret{}:
		return fmt.Errorf("store: token %s: no hash", t.ID)
	case len(t.Prefix) > maxPrefixLen:
		return fmt.Errorf("store: token %s: display prefix longer than %d bytes", t.ID, maxPrefixLen)
	case t.Prefix != "" && access.HashSecret(t.Prefix) == t.Hash:
		return fmt.Errorf("store: token %s: the display prefix is the secret itself", t.ID)
	case t.ExpiresAt.IsZero():
		return fmt.Errorf("store: token %s: no expiry (every token expires)", t.ID)
	}
	if err := auth.ValidateName(t.Name); err != nil {
		return fmt.Errorf("store: token %s: %w", t.ID, err)
	}
	if err := checkIdent("token's maker", t.CreatedBy, maxAuditActor); err != nil {
		return err
	}
	if err := checkGrant("token's grant", t.Grant); err != nil {
		return err
	}
	grant, err := jsonText(t.Grant)
	if err != nil {
		return err
	}
	created := storedTime(orNow(t.CreatedAt))
	d := s.dialect()
	return s.peopleChange(ctx, e, func(w writer) (bool, error) {
		_, err := w.exec(ctx, d.sql(`INSERT INTO api_tokens (`+tokenColumns+`)
			VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, NULL, NULL)`),
			t.ID, t.Name, t.Prefix, t.Hash[:], grant, t.CreatedBy, d.time(created), d.time(storedTime(t.ExpiresAt)))
		if uniqueViolation(err) {
			return false, fmt.Errorf("%w: token %s: id or hash already stored", ErrConflict, t.ID)
		}
		if err == nil {
			t.CreatedAt = created
		}
		return err == nil, err
	})
}

// TokenByHash implements access.Store: revoked and expired tokens too (the caller
// checks Active).
func (s *Store) TokenByHash(ctx context.Context, h access.Secret) (*access.Token, error) {
	d := s.dialect()
	return call(ctx, s, kindRead, func(b backend) (*access.Token, error) { return oneToken(ctx, d, b, `hash = $1`, h[:]) })
}

// TouchToken implements access.Store: the last-used time never moves backwards. An
// unknown id is access.ErrNotFound.
func (s *Store) TouchToken(ctx context.Context, id string, at time.Time) error {
	d := s.dialect()
	at = storedTime(orNow(at))
	return call0(ctx, s, kindWrite, func(b backend) error {
		n, err := b.exec(ctx, d.sql(`UPDATE api_tokens SET last_used_at = GREATEST(coalesce(last_used_at, $1), $1) WHERE id = $2`),
			d.time(at), id)
		if err == nil && n == 0 {
			err = access.ErrNotFound
		}
		return err
	})
}

// ListTokens implements access.Store: every token, newest first.
func (s *Store) ListTokens(ctx context.Context) ([]*access.Token, error) {
	d := s.dialect()
	return call(ctx, s, kindRead, func(b backend) ([]*access.Token, error) {
		var out []*access.Token
		err := b.queryRows(ctx, d.sql(`SELECT `+tokenColumns+` FROM api_tokens ORDER BY created_at DESC, id`+d.orderText+` DESC`), nil,
			func(r resultRows) error {
				t, err := scanToken(d, r)
				out = append(out, t)
				return err
			})
		return out, err
	})
}

// RevokeToken implements access.Store. Revoking a revoked token changes nothing and
// records nothing; an unknown id is access.ErrNotFound.
func (s *Store) RevokeToken(ctx context.Context, id string, at time.Time, e *auth.AuditEntry) error {
	at = storedTime(orNow(at))
	d := s.dialect()
	return s.peopleChange(ctx, e, func(w writer) (bool, error) {
		t, err := oneToken(ctx, d, w, `id = $1`, id)
		if err != nil || !t.RevokedAt.IsZero() {
			return false, err
		}
		_, err = w.exec(ctx, d.sql(`UPDATE api_tokens SET revoked_at = $1 WHERE id = $2`), d.time(at), id)
		return err == nil, err
	})
}
