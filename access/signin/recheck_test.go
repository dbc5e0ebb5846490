package signin

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/switchyard-gw/switchyard/auth"
)

func (h *harness) storedSession(c *http.Cookie) (checked time.Time, refresh string, revoked bool) {
	s, err := h.store.SessionByHash(h.t.Context(), accessHash(c.Value))
	if err != nil {
		h.t.Fatal(err)
	}
	return s.CheckedAt, string(s.Refresh), !s.RevokedAt.IsZero()
}

// Every Recheck, the provider is asked with the refresh token whether it still signs
// the person in; when it does, the session goes on and the rotated refresh token is
// kept (sealed); it is asked once per Recheck, not on every call.
func TestRecheckKeepsAVouchedSession(t *testing.T) {
	h := newHarness(t)
	c := h.mustSignIn()
	_, before, _ := h.storedSession(c)
	h.clock.Advance(DefaultRecheck + time.Second)
	if _, err := h.authenticate(c); err != nil {
		t.Fatalf("a vouched session after the recheck: %v", err)
	}
	checked, after, _ := h.storedSession(c)
	if !checked.Equal(h.clock.Now()) || after == before {
		t.Errorf("recheck not recorded: checked %s, refresh token changed %v", checked, after != before)
	}
	for range 3 {
		h.clock.Advance(time.Minute)
		if _, err := h.authenticate(c); err != nil {
			t.Fatal(err)
		}
	}
	if h.p.refreshSeen != 1 {
		t.Errorf("the provider was asked %d times, want once", h.p.refreshSeen)
	}
}

// The provider refusing the refresh token (invalid_grant) disables the person, which
// ends their sessions, audited; the provider signing them in again lifts it.
func TestRecheckRefusedByTheProviderDisablesThePerson(t *testing.T) {
	h := newHarness(t)
	c := h.mustSignIn()
	other := h.mustSignIn() // a second browser of the same person
	p, _ := h.authenticate(c)
	h.p.set(func(p *fakeProvider) { clear(p.refreshes) }) // the person was removed at the provider
	h.clock.Advance(DefaultRecheck + time.Second)
	h.svc = h.newService(h.config()) // a restarted gateway: it has not used the token endpoint yet
	if _, err := h.authenticate(c); !errors.Is(err, ErrRefused) {
		t.Fatalf("a session the provider no longer vouches for gave %v", err)
	}
	if h.p.refreshSeen != 1 {
		t.Errorf("the refused refresh token was sent %d times, want once", h.p.refreshSeen)
	}
	u, _ := h.store.GetUser(t.Context(), p.ID)
	if u.DisabledAt.IsZero() || u.DisabledWhy != whyProviderRefused {
		t.Errorf("person not disabled: %+v", u)
	}
	if _, _, revoked := h.storedSession(other); !revoked {
		t.Error("the person's other session was not ended")
	}
	if _, err := h.authenticate(other); err == nil {
		t.Error("the person's other session still works")
	}
	if d := h.store.auditOf(auth.ActionUserDisable); len(d) != 1 || d[0].Target != p.ID {
		t.Errorf("disable audit %+v", d)
	}

	// Back at the provider: signing in again lifts the recheck's disablement.
	rec, again := h.signIn("/")
	if rec.Code != http.StatusFound || again == nil {
		t.Fatalf("signing in again answered %d: %s", rec.Code, rec.Body)
	}
	if _, err := h.authenticate(again); err != nil {
		t.Errorf("the new session: %v", err)
	}
	if e := h.store.auditOf(auth.ActionUserEnable); len(e) != 1 {
		t.Errorf("enable audit %+v", e)
	}
}

// The provider away keeps the session: an outage of the provider signs no one out.
func TestRecheckWithTheProviderAwayKeepsTheSession(t *testing.T) {
	h := newHarness(t)
	c := h.mustSignIn()
	h.p.set(func(p *fakeProvider) { p.down = true })
	h.clock.Advance(DefaultRecheck + time.Second)
	p, err := h.authenticate(c)
	if err != nil {
		t.Fatalf("the provider away ended the session: %v", err)
	}
	u, _ := h.store.GetUser(t.Context(), p.ID)
	if !u.DisabledAt.IsZero() {
		t.Error("the provider away disabled the person")
	}
	// Back: the next call rechecks.
	h.p.set(func(p *fakeProvider) { p.down = false })
	h.clock.Advance(time.Minute)
	if _, err := h.authenticate(c); err != nil {
		t.Fatal(err)
	}
	if checked, _, _ := h.storedSession(c); !checked.Equal(h.clock.Now()) {
		t.Errorf("not rechecked once the provider was back: checked %s", checked)
	}
}

// With the recheck off, the provider is never asked.
func TestRecheckOff(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Recheck = RecheckOff })
	c := h.mustSignIn()
	h.p.set(func(p *fakeProvider) { clear(p.refreshes) })
	h.clock.Advance(DefaultSessionIdle - time.Minute)
	if _, err := h.authenticate(c); err != nil {
		t.Fatal(err)
	}
	if h.p.refreshSeen != 0 {
		t.Errorf("the provider was asked %d times with the recheck off", h.p.refreshSeen)
	}
}

// Calls of one session that arrive while its recheck is in flight go on without
// spending the refresh token again.
func TestOneRecheckAtATimePerSession(t *testing.T) {
	h := newHarness(t)
	c := h.mustSignIn()
	h.p.set(func(p *fakeProvider) {
		p.holdRefresh, p.arrived, p.released = 2, make(chan struct{}), make(chan struct{})
	})
	h.clock.Advance(DefaultRecheck + time.Second)
	first := make(chan error, 1)
	go func() { _, err := h.authenticate(c); first <- err }()
	select {
	case <-h.p.arrived:
	case err := <-first:
		t.Fatalf("the call after %s did not ask the provider (%v)", DefaultRecheck, err)
	}
	second := make(chan error, 1)
	go func() { _, err := h.authenticate(c); second <- err }()
	select {
	case err := <-second:
		if err != nil {
			t.Errorf("a call during the recheck: %v", err)
		}
	case <-h.p.arrived:
		t.Error("a second call spent the refresh token while the first recheck was in flight")
		h.p.released <- struct{}{}
		<-second
	}
	h.p.released <- struct{}{}
	if err := <-first; err != nil {
		t.Errorf("the rechecking call: %v", err)
	}
}

// Two gateways rechecking one session at once: the provider rotates the refresh token
// for the first and refuses the second's (now spent) one; the second sees the session
// was rechecked meanwhile and disables no one.
func TestRecheckRaceBetweenGatewaysDisablesNoOne(t *testing.T) {
	h := newHarness(t)
	c := h.mustSignIn()
	p, _ := h.authenticate(c)
	a, b := h.svc, h.newService(h.config())
	h.p.set(func(p *fakeProvider) {
		p.holdRefresh, p.arrived, p.released = 2, make(chan struct{}), make(chan struct{})
	})
	h.clock.Advance(DefaultRecheck + time.Second)
	results := make(chan error, 2)
	for _, svc := range []*Service{a, b} {
		go func() { _, err := svc.Authenticate(h.request("GET", "/api/me", c)); results <- err }()
		select {
		case <-h.p.arrived: // both read the session before either rechecked
		case err := <-results:
			t.Fatalf("a gateway did not ask the provider (%v)", err)
		}
	}
	h.p.released <- struct{}{}
	if err := <-results; err != nil {
		t.Errorf("the first recheck: %v", err)
	}
	h.p.released <- struct{}{}
	if err := <-results; err != nil {
		t.Errorf("the second gateway's recheck, refused by the provider after the first rotated the token: %v", err)
	}
	if u, _ := h.store.GetUser(t.Context(), p.ID); !u.DisabledAt.IsZero() {
		t.Error("the person was disabled by a race between gateways")
	}
}
