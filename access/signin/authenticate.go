package signin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/oauth2"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/auth"
)

// touchEvery is how stale a session's or token's last-use time may get before a call
// writes it again: the store is written at most once a minute per session or token.
const touchEvery = time.Minute

// maxCredential bounds a bearer token or a session cookie looked at: both are a prefix
// and 52 characters.
const maxCredential = 128

// whyProviderRefused is the reason the recheck gives when it disables someone; a later
// sign-in through the provider lifts exactly this disablement.
const whyProviderRefused = "the provider no longer signs this person in"

// recheckActor names the recheck in the audit trail.
const recheckActor = "sign-in recheck (the provider)"

// Authenticate says who is calling: an API token (Authorization: Bearer syt_…), else
// the session cookie. ErrNoPrincipal (answer 401) when there is no valid credential,
// ErrRefused (403) when its holder is refused; any other error is the store failing
// (answer 503).
func (s *Service) Authenticate(r *http.Request) (*access.Principal, error) {
	ctx := r.Context()
	addr := s.cfg.ClientAddr(r)
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, cred, _ := strings.Cut(h, " ")
		if strings.EqualFold(scheme, "Bearer") {
			return s.tokenPrincipal(ctx, strings.TrimSpace(cred), addr)
		}
	}
	c, err := r.Cookie(cookieName(sessionCookie, r))
	if err != nil {
		return nil, fmt.Errorf("%w: no session or token", ErrNoPrincipal)
	}
	return s.sessionPrincipal(ctx, c.Value, addr)
}

func (s *Service) tokenPrincipal(ctx context.Context, secret, addr string) (*access.Principal, error) {
	if len(secret) > maxCredential || !strings.HasPrefix(secret, access.TokenPrefix) {
		return nil, fmt.Errorf("%w: not an API token", ErrNoPrincipal)
	}
	t, err := s.store.TokenByHash(ctx, access.HashSecret(secret))
	if errors.Is(err, access.ErrNotFound) {
		return nil, fmt.Errorf("%w: unknown API token", ErrNoPrincipal)
	}
	if err != nil {
		return nil, err
	}
	now := s.cfg.Now()
	if !t.Active(now) {
		return nil, fmt.Errorf("%w: the API token was revoked or has expired", ErrNoPrincipal)
	}
	if now.Sub(t.LastUsed) >= touchEvery {
		if err := s.store.TouchToken(ctx, t.ID, now); err != nil {
			s.log.Warn("could not record an API token's use", zap.String("token", t.ID), zap.Error(err))
		}
	}
	return &access.Principal{Kind: access.KindToken, ID: t.ID, Name: t.Name, Grants: []access.Grant{t.Grant}, Addr: addr}, nil
}

// lookupSession finds the session of a cookie's secret (ended ones too).
func (s *Service) lookupSession(ctx context.Context, secret string) (*access.Session, error) {
	if len(secret) > maxCredential || !strings.HasPrefix(secret, sessionSecretPfx) {
		return nil, access.ErrNotFound
	}
	return s.store.SessionByHash(ctx, access.HashSecret(secret))
}

func (s *Service) sessionPrincipal(ctx context.Context, secret, addr string) (*access.Principal, error) {
	sess, err := s.lookupSession(ctx, secret)
	if errors.Is(err, access.ErrNotFound) {
		return nil, fmt.Errorf("%w: unknown session", ErrNoPrincipal)
	}
	if err != nil {
		return nil, err
	}
	now := s.cfg.Now()
	switch {
	case !sess.RevokedAt.IsZero():
		return nil, fmt.Errorf("%w: the session was ended", ErrNoPrincipal)
	case !now.Before(sess.ExpiresAt):
		return nil, fmt.Errorf("%w: the session is past its lifetime", ErrNoPrincipal)
	case now.Sub(sess.LastSeenAt) > s.cfg.SessionIdle:
		return nil, fmt.Errorf("%w: the session was idle too long", ErrNoPrincipal)
	}
	var pr *access.Principal
	switch sess.Kind {
	case access.KindUser:
		u, err := s.store.GetUser(ctx, sess.UserID)
		if errors.Is(err, access.ErrNotFound) {
			return nil, fmt.Errorf("%w: the session's person is gone", ErrNoPrincipal)
		}
		if err != nil {
			return nil, err
		}
		if !u.DisabledAt.IsZero() {
			return nil, fmt.Errorf("%w: the account is disabled", ErrRefused)
		}
		pr = userPrincipal(sess, u)
		if s.recheckDue(sess, now) {
			checked, err := s.recheck(ctx, sess, u, now)
			if err != nil {
				return nil, err
			}
			if checked {
				pr.Addr = addr
				return pr, nil // the recheck recorded the use
			}
		}
	case access.KindBreakGlass:
		if !s.cfg.BreakGlass {
			return nil, fmt.Errorf("%w: the break-glass door is turned off", ErrRefused)
		}
		pr = &access.Principal{Kind: access.KindBreakGlass, ID: sess.Name, Grants: sess.Grants, SessionID: sess.ID}
	default:
		return nil, fmt.Errorf("%w: unknown kind of session", ErrNoPrincipal)
	}
	pr.Addr = addr
	if now.Sub(sess.LastSeenAt) >= touchEvery {
		if err := s.store.TouchSession(ctx, sess.ID, now, time.Time{}, nil); err != nil {
			s.log.Warn("could not record a session's use", zap.String("session", sess.ID), zap.Error(err))
		}
	}
	return pr, nil
}

func (s *Service) recheckDue(sess *access.Session, now time.Time) bool {
	return s.cfg.Recheck > 0 && len(sess.Refresh) > 0 && now.Sub(sess.CheckedAt) >= s.cfg.Recheck
}

// recheck asks the provider, with the session's refresh token, whether it still signs
// the person in. True when it did (the session's use is recorded). The provider
// refusing the token (invalid_grant) disables the person, which ends their sessions,
// and gives ErrRefused; the provider away, or a recheck of the same session already in
// flight, keeps the session as it is (false, no error): an outage of the provider does
// not sign everyone out.
func (s *Service) recheck(ctx context.Context, sess *access.Session, u *access.User, now time.Time) (bool, error) {
	s.recheckMu.Lock()
	if s.rechecking[sess.ID] {
		s.recheckMu.Unlock()
		return false, nil
	}
	s.rechecking[sess.ID] = true
	s.recheckMu.Unlock()
	defer func() {
		s.recheckMu.Lock()
		delete(s.rechecking, sess.ID)
		s.recheckMu.Unlock()
	}()

	refresh, err := unseal(s.refreshSeal, sess.Refresh, []byte(sess.ID))
	if err != nil {
		// Sealed under another client secret: this session cannot be rechecked, and
		// ends at its lifetime.
		s.log.Debug("recheck skipped: the refresh token does not open (client secret changed?)", zap.String("session", sess.ID))
		return false, nil
	}
	p, err := s.discover(ctx, false)
	if err != nil {
		return false, nil
	}
	pctx, cancel := s.providerCtx(ctx)
	defer cancel()
	tok, err := p.oauth.TokenSource(pctx, &oauth2.Token{RefreshToken: string(refresh)}).Token()
	var re *oauth2.RetrieveError
	switch {
	case err == nil:
	case errors.As(err, &re) && re.ErrorCode == "invalid_grant":
		return false, s.providerRefused(ctx, sess, u, now)
	default:
		s.log.Warn("recheck: the provider could not be asked; the session is kept",
			zap.String("session", sess.ID), zap.String("reason", describeProviderError(err)))
		return false, nil
	}
	sealed := sess.Refresh
	if tok.RefreshToken != "" && tok.RefreshToken != string(refresh) {
		sealed = seal(s.refreshSeal, []byte(tok.RefreshToken), []byte(sess.ID))
	}
	if err := s.store.TouchSession(ctx, sess.ID, now, now, sealed); err != nil {
		s.log.Warn("could not record a session's recheck", zap.String("session", sess.ID), zap.Error(err))
	}
	return true, nil
}

// providerRefused disables a person whose refresh token the provider refused, unless
// another gateway rechecked the session meanwhile (its refresh token rotated, so ours
// was spent).
func (s *Service) providerRefused(ctx context.Context, sess *access.Session, u *access.User, now time.Time) error {
	if cur, err := s.store.SessionByHash(ctx, sess.Hash); err == nil &&
		(cur.CheckedAt.After(sess.CheckedAt) || string(cur.Refresh) != string(sess.Refresh)) {
		return nil
	}
	err := s.store.DisableUser(ctx, u.ID, whyProviderRefused, now, &auth.AuditEntry{
		At: now, Actor: recheckActor, Action: auth.ActionUserDisable, Target: u.ID, Detail: whyProviderRefused,
	})
	if err != nil {
		return err
	}
	s.log.Info("recheck: the provider refused the person's refresh token; disabled", zap.String("user", u.ID))
	return fmt.Errorf("%w: %s", ErrRefused, whyProviderRefused)
}
