package signin

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/coreos/go-oidc/v3/oidc"
	"go.uber.org/zap"
	"golang.org/x/oauth2"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/auth"
)

// Cookie names. On TLS the __Host- prefix makes the browser refuse a cookie of that
// name set by any other host or with a Domain or another Path, so a sibling subdomain
// cannot plant one.
const (
	sessionCookie    = "switchyard_session"
	stateCookie      = "switchyard_signin"
	hostPrefix       = "__Host-"
	sessionSecretPfx = "sys_"
)

// stateLifetime is how long a sign-in may take at the provider.
const stateLifetime = 10 * time.Minute

// Bounds on what a browser sends.
const (
	maxReturn      = 2048
	maxStateCookie = 4096
	maxCode        = 4096
	maxBreakGlass  = 128
)

func cookieName(base string, r *http.Request) string {
	if r.TLS != nil {
		return hostPrefix + base
	}
	return base
}

// pending is a sign-in in progress, sealed in the state cookie.
type pending struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	Return   string `json:"r"`
	Expires  int64  `json:"e"`
}

// stateCookieContext binds a sealed state cookie to its purpose.
var stateCookieContext = []byte("state cookie")

func randomString() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Login (GET auth/login?return=<console path>) sends the browser to the provider, with
// a fresh state, nonce and PKCE verifier kept in the sealed state cookie.
func (s *Service) Login(w http.ResponseWriter, r *http.Request) {
	noStore(w)
	if !s.cfg.hasProvider() {
		s.page(w, http.StatusNotFound, "No sign-in here", "This console has no identity provider configured; use an API token or the operator's break-glass door.")
		return
	}
	p, err := s.discover(r.Context(), true)
	if err != nil {
		s.page(w, http.StatusServiceUnavailable, "The sign-in provider cannot be reached",
			"Switchyard could not reach the company's sign-in provider. Try again in a minute; if it lasts, tell whoever runs Switchyard.")
		return
	}
	now := s.cfg.Now()
	pend := pending{
		State:    randomString(),
		Nonce:    randomString(),
		Verifier: oauth2.GenerateVerifier(),
		Return:   safeReturn(r.URL.Query().Get("return")),
		Expires:  now.Add(stateLifetime).Unix(),
	}
	plain, _ := json.Marshal(pend)
	http.SetCookie(w, &http.Cookie{
		Name:     cookieName(stateCookie, r),
		Value:    base64.RawURLEncoding.EncodeToString(seal(s.stateSeal, plain, stateCookieContext)),
		Path:     "/",
		MaxAge:   int(stateLifetime / time.Second),
		HttpOnly: true,
		Secure:   r.TLS != nil,
		// Lax: the provider's redirect back is a top-level GET from another site, which
		// must carry this cookie.
		SameSite: http.SameSiteLaxMode,
	})
	to := p.oauth.AuthCodeURL(pend.State, oidc.Nonce(pend.Nonce), oauth2.S256ChallengeOption(pend.Verifier))
	http.Redirect(w, r, to, http.StatusFound)
}

// safeReturn keeps a return address only when it is a path inside the console: it
// starts with one "/", has no scheme, host, backslash or control character. Anything
// else is the console's root, so a link cannot make the sign-in send the browser to
// another site.
func safeReturn(raw string) string {
	if raw == "" || len(raw) > maxReturn || raw[0] != '/' || strings.HasPrefix(raw, "//") ||
		strings.ContainsRune(raw, '\\') || !utf8.ValidString(raw) {
		return "/"
	}
	for _, c := range raw {
		if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) {
			return "/"
		}
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return "/"
	}
	// Clean the decoded path (an encoded "/%2F" or dot segment stays inside the console)
	// and write it back encoded.
	clean := path.Clean(u.Path)
	if !strings.HasPrefix(clean, "/") || strings.HasPrefix(clean, "//") {
		return "/"
	}
	if strings.HasSuffix(u.Path, "/") && clean != "/" {
		clean += "/"
	}
	// The fragment is kept: the console may route by it, and it cannot name a host.
	out := (&url.URL{Path: clean, RawQuery: u.RawQuery, Fragment: u.Fragment}).String()
	if !strings.HasPrefix(out, "/") || strings.HasPrefix(out, "//") {
		return "/"
	}
	return out
}

// consoleLocation is the Location, relative to a page under auth/, of a console path:
// the console is mounted with its prefix stripped, so only a relative address reaches
// it wherever it is mounted ("../" climbs from auth/ to the console's root). http.Redirect
// is not used: it would resolve the address against the stripped path.
func consoleLocation(ret string) string {
	return "../" + strings.TrimPrefix(ret, "/")
}

func redirectInConsole(w http.ResponseWriter, ret string) {
	w.Header().Set("Location", consoleLocation(ret))
	w.WriteHeader(http.StatusFound)
}

// readPending opens the browser's state cookie; false when it is missing, does not
// open or has expired.
func (s *Service) readPending(r *http.Request) (pending, bool) {
	var p pending
	c, err := r.Cookie(cookieName(stateCookie, r))
	if err != nil || len(c.Value) > maxStateCookie {
		return p, false
	}
	sealed, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil {
		return p, false
	}
	plain, err := unseal(s.stateSeal, sealed, stateCookieContext)
	if err != nil || json.Unmarshal(plain, &p) != nil || p.State == "" || p.Nonce == "" || p.Verifier == "" {
		return pending{}, false
	}
	if !s.cfg.Now().Before(time.Unix(p.Expires, 0)) {
		return pending{}, false
	}
	p.Return = safeReturn(p.Return)
	return p, true
}

func clearCookie(w http.ResponseWriter, r *http.Request, base string, sameSite http.SameSite) {
	http.SetCookie(w, &http.Cookie{
		Name: cookieName(base, r), Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: sameSite,
	})
}

// Callback (GET auth/callback?code=&state=) finishes a sign-in: the state against the
// browser's cookie, once; the code exchanged with the PKCE verifier; the ID token
// checked (signature, issuer, audience, expiry by go-oidc; the nonce here); the groups
// mapped to roles. It stores the person and a new session, sets the session cookie and
// sends the browser to where the sign-in started.
func (s *Service) Callback(w http.ResponseWriter, r *http.Request) {
	noStore(w)
	if !s.cfg.hasProvider() {
		s.page(w, http.StatusNotFound, "No sign-in here", "This console has no identity provider configured.")
		return
	}
	w.Header().Set("Referrer-Policy", "no-referrer")
	ctx := r.Context()
	q := r.URL.Query()
	pend, ok := s.readPending(r)
	clearCookie(w, r, stateCookie, http.SameSiteLaxMode)
	if !ok {
		s.refuse(w, http.StatusBadRequest, "no sign-in in progress in this browser", "This sign-in has no record in this browser",
			"It took longer than ten minutes, was finished already, or was started in another browser. Start again.")
		return
	}
	state := q.Get("state")
	if subtle.ConstantTimeCompare([]byte(state), []byte(pend.State)) != 1 {
		s.refuse(w, http.StatusBadRequest, "state does not match the browser's", "This sign-in does not belong to this browser",
			"The answer from the provider is not for the sign-in this browser started (perhaps another tab started a newer one). Start again.")
		return
	}
	if !s.used.claim(state, s.cfg.Now(), time.Unix(pend.Expires, 0)) {
		s.refuse(w, http.StatusBadRequest, "callback replayed", "This sign-in was finished already",
			"Each sign-in may be completed once. Start again.")
		return
	}
	if e := q.Get("error"); e != "" {
		code := e
		if !plainCode(code) {
			code = "unknown"
		}
		s.log.Info("sign-in refused: the provider did not sign the person in", zap.String("error", code))
		msg := "The provider did not sign you in. Start again, or ask whoever runs the company's sign-in."
		if code == "access_denied" {
			msg = "The sign-in was declined at the provider (by you, or by its rules for this application)."
		}
		s.page(w, http.StatusForbidden, "Not signed in", msg)
		return
	}
	code := q.Get("code")
	if code == "" || len(code) > maxCode {
		s.refuse(w, http.StatusBadRequest, "callback without a code", "This sign-in has no answer from the provider", "Start again.")
		return
	}
	p, err := s.discover(ctx, true)
	if err != nil {
		s.page(w, http.StatusServiceUnavailable, "The sign-in provider cannot be reached",
			"Switchyard could not reach the company's sign-in provider. Try again in a minute.")
		return
	}
	pctx, cancel := s.providerCtx(ctx)
	defer cancel()
	tok, err := p.oauth.Exchange(pctx, code, oauth2.VerifierOption(pend.Verifier))
	if err != nil {
		s.log.Warn("sign-in refused: the code exchange failed", zap.String("reason", describeProviderError(err)))
		s.page(w, http.StatusBadGateway, "The sign-in could not be completed",
			"The provider did not complete the sign-in. Start again; if it lasts, tell whoever runs Switchyard.")
		return
	}
	rawID, _ := tok.Extra("id_token").(string)
	if rawID == "" {
		s.refuse(w, http.StatusBadGateway, "the provider sent no ID token", "The sign-in could not be completed",
			"The provider answered without an ID token; check that the openid scope is allowed for this client.")
		return
	}
	idt, err := p.verifier.Verify(pctx, rawID)
	if err != nil {
		s.log.Warn("sign-in refused: the ID token did not pass its checks", zap.String("reason", describeIDTokenError(err)))
		s.page(w, http.StatusForbidden, "The sign-in could not be verified",
			"The provider's answer did not pass Switchyard's checks (signature, issuer, audience or expiry). Start again; if it lasts, tell whoever runs Switchyard.")
		return
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(pend.Nonce)) != 1 {
		s.refuse(w, http.StatusForbidden, "the ID token's nonce does not match the sign-in's", "The sign-in could not be verified",
			"The provider's answer was not made for this sign-in. Start again.")
		return
	}
	id, err := readClaims(idt, s.cfg.ClientID, s.cfg.GroupsClaim)
	if err != nil {
		s.refuse(w, http.StatusForbidden, err.Error(), "The sign-in could not be verified",
			"The provider's answer was incomplete. Start again; if it lasts, tell whoever runs Switchyard.")
		return
	}
	grants := s.cfg.Mapping.GrantsFor(id.groups)
	if len(grants) == 0 {
		s.log.Info("sign-in refused: the person is in no mapped group", zap.Int("groups", len(id.groups)))
		who := "Your account"
		if id.email != "" {
			who = "Your account (" + id.email + ")"
		}
		s.page(w, http.StatusForbidden, "You have no role here",
			who+" signed in, but is in none of the groups that give a role in this Switchyard. Ask an owner of this Switchyard, or whoever manages your company's groups, to add you to one.")
		return
	}
	now := s.cfg.Now()
	user, err := s.store.SaveUser(ctx, &access.User{
		Issuer: idt.Issuer, Subject: idt.Subject, Email: id.email, Name: id.name,
		Groups: mappedGroups(s.cfg.Mapping, id.groups), Grants: grants, LastSignIn: now,
	})
	if err != nil {
		s.storeFailed(w, "saving the person", err)
		return
	}
	if !user.DisabledAt.IsZero() && user.DisabledWhy == whyProviderRefused {
		// The recheck disabled this person because the provider refused their refresh
		// token; the provider signing them in again is its word that they are back.
		err := s.store.EnableUser(ctx, user.ID, &auth.AuditEntry{
			At: now, Actor: recheckActor, Action: auth.ActionUserEnable, Target: user.ID,
			Detail: "the provider signed this person in again",
		})
		if err != nil {
			s.storeFailed(w, "enabling the person", err)
			return
		}
		user.DisabledAt, user.DisabledWhy = time.Time{}, ""
	}
	if !user.DisabledAt.IsZero() {
		s.log.Info("sign-in refused: the person is disabled", zap.String("user", user.ID))
		s.page(w, http.StatusForbidden, "Your account is disabled here",
			"An owner of this Switchyard turned your account off. Ask them to turn it on again.")
		return
	}
	sess := &access.Session{
		ID: access.NewID("ses_"), UserID: user.ID, Kind: access.KindUser, Grants: grants,
		Addr: s.cfg.ClientAddr(r), CreatedAt: now, LastSeenAt: now, CheckedAt: now,
		ExpiresAt: now.Add(s.cfg.SessionLifetime),
	}
	if tok.RefreshToken != "" {
		sess.Refresh = seal(s.refreshSeal, []byte(tok.RefreshToken), []byte(sess.ID))
	}
	pr := userPrincipal(sess, user)
	if !s.startSession(ctx, w, r, sess, pr) {
		return
	}
	s.log.Info("signed in", zap.String("user", user.ID), zap.String("session", sess.ID))
	redirectInConsole(w, pend.Return)
}

// startSession stores sess with a new secret, audited, and sets the session cookie.
func (s *Service) startSession(ctx context.Context, w http.ResponseWriter, r *http.Request, sess *access.Session, pr *access.Principal) bool {
	secret := access.NewSecret(sessionSecretPfx)
	sess.Hash = access.HashSecret(secret)
	err := s.store.CreateSession(ctx, sess, &auth.AuditEntry{
		At: sess.CreatedAt, Actor: pr.Actor(), Action: auth.ActionSignIn, Target: sess.ID,
		Detail: "signed in as " + describeGrants(sess.Grants),
	})
	if err != nil {
		s.storeFailed(w, "starting the session", err)
		return false
	}
	http.SetCookie(w, &http.Cookie{
		Name:     cookieName(sessionCookie, r),
		Value:    secret,
		Path:     "/",
		HttpOnly: true,
		Secure:   r.TLS != nil,
		// Strict: no other site's page or link makes the browser send it; the console's
		// own calls are same-site.
		SameSite: http.SameSiteStrictMode,
		// No Max-Age: the browser forgets it when closed; the store ends it earlier.
	})
	return true
}

func describeGrants(gs []access.Grant) string {
	parts := make([]string, 0, len(gs))
	for _, g := range gs {
		p := string(g.Role)
		if len(g.Projects) > 0 {
			p += " of " + strings.Join(g.Projects, ", ")
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

func userPrincipal(sess *access.Session, u *access.User) *access.Principal {
	return &access.Principal{
		Kind: access.KindUser, ID: u.ID, Subject: u.Subject, Email: u.Email, Name: u.Name,
		Grants: sess.Grants, SessionID: sess.ID, Addr: sess.Addr,
	}
}

// Logout (POST auth/logout) ends the browser's session, audited, and clears its cookie.
func (s *Service) Logout(w http.ResponseWriter, r *http.Request) {
	noStore(w)
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "sign out with POST", http.StatusMethodNotAllowed)
		return
	}
	ctx := r.Context()
	if c, err := r.Cookie(cookieName(sessionCookie, r)); err == nil {
		if sess, err := s.lookupSession(ctx, c.Value); err == nil && sess.RevokedAt.IsZero() {
			pr := &access.Principal{Kind: sess.Kind, ID: sess.Name, SessionID: sess.ID, Addr: s.cfg.ClientAddr(r)}
			if sess.Kind == access.KindUser {
				if u, err := s.store.GetUser(ctx, sess.UserID); err == nil {
					pr = userPrincipal(sess, u)
					pr.Addr = s.cfg.ClientAddr(r)
				}
			}
			now := s.cfg.Now()
			err := s.store.RevokeSession(ctx, sess.ID, now, &auth.AuditEntry{
				At: now, Actor: pr.Actor(), Action: auth.ActionSignOut, Target: sess.ID, Detail: "signed out",
			})
			if err != nil {
				s.storeFailed(w, "ending the session", err)
				return
			}
		}
	}
	clearCookie(w, r, sessionCookie, http.SameSiteStrictMode)
	w.WriteHeader(http.StatusNoContent)
}

// BreakGlass (GET auth/break-glass, behind Caddy's basic_auth) turns the operator's
// password into an owner session named after the basic-auth user, audited, and sends
// the browser to the console's root. Refused when the door is off.
func (s *Service) BreakGlass(w http.ResponseWriter, r *http.Request, user string) {
	noStore(w)
	if !s.cfg.BreakGlass {
		s.refuse(w, http.StatusForbidden, "break-glass is off", "The break-glass door is turned off",
			"Sign in through the company's provider.")
		return
	}
	if user == "" || len(user) > maxBreakGlass || !printable(user) {
		s.refuse(w, http.StatusForbidden, "break-glass without a usable user name", "No break-glass user", "The password door gave no usable user name.")
		return
	}
	now := s.cfg.Now()
	sess := &access.Session{
		ID: access.NewID("ses_"), Kind: access.KindBreakGlass, Name: user,
		Grants: []access.Grant{{Role: access.RoleOwner}}, Addr: s.cfg.ClientAddr(r),
		CreatedAt: now, LastSeenAt: now, ExpiresAt: now.Add(s.cfg.SessionLifetime),
	}
	pr := access.BreakGlass(user, sess.Addr)
	pr.SessionID = sess.ID
	if !s.startSession(r.Context(), w, r, sess, pr) {
		return
	}
	s.log.Info("break-glass sign-in", zap.String("session", sess.ID))
	redirectInConsole(w, "/")
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) {
			return false
		}
	}
	return true
}

func noStore(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
}

// refuse logs why a sign-in step was refused (our words, no token or code) and answers
// with a page.
func (s *Service) refuse(w http.ResponseWriter, status int, why, title, msg string) {
	s.log.Info("sign-in refused: "+why, zap.Int("status", status))
	s.page(w, status, title, msg)
}

func (s *Service) storeFailed(w http.ResponseWriter, doing string, err error) {
	s.log.Error("sign-in: the store failed", zap.String("while", doing), zap.Error(err))
	s.page(w, http.StatusServiceUnavailable, "Switchyard cannot sign you in right now",
		"Its database did not answer. Try again in a minute.")
}

// page answers with a small page in our words; the link starts a new sign-in (every
// page is under auth/, so "login" is auth/login).
func (s *Service) page(w http.ResponseWriter, status int, title, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>%s — Switchyard</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:36em;margin:4em auto;padding:0 1em}</style></head>
<body><h1>%s</h1><p>%s</p><p><a href="login">Sign in again</a></p></body></html>
`, html.EscapeString(title), html.EscapeString(title), html.EscapeString(msg))
}

// describeIDTokenError names which check an ID token failed, for the log.
func describeIDTokenError(err error) string {
	var expired *oidc.TokenExpiredError
	msg := err.Error()
	switch {
	case errors.As(err, &expired):
		return "expired"
	case strings.Contains(msg, "audience"):
		return "wrong audience"
	case strings.Contains(msg, "issued by a different provider"):
		return "wrong issuer"
	case strings.Contains(msg, "signature"):
		return "bad signature"
	case strings.Contains(msg, "nbf"):
		return "not valid yet"
	}
	return describeProviderError(err)
}
