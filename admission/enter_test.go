package admission

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/limits"
	"github.com/switchyard-gw/switchyard/protocols"
)

// enter runs the first phase as the glue does, before any body: the refusal's answer is
// written to the recorder.
func (f *fixture) enter(id string, who Who, fam protocols.Family) (*Entered, Result, *httptest.ResponseRecorder) {
	rec := httptest.NewRecorder()
	e, res := f.policy.Enter(context.Background(), id, who, fam, rec.Header())
	if res.Err != nil {
		res.Err.Write(rec, id)
	}
	return e, res, rec
}

// A key at its concurrency limit is refused before its body is read, in the family's
// envelope; the requests in flight count once across both phases, and each phase's
// hold is let go when its request ends.
func TestTheFirstPhaseHoldsTheKeysSlotsBeforeTheBody(t *testing.T) {
	pol := limits.Policy{Concurrency: 2, TPM: 100_000, Budget: budget("1/month")}
	f := newFixture(t, nil, limits.Options{})
	who := Who{KeyID: "k", Limits: &pol}

	var held []*Entered
	var admitted []*Admitted
	for i := range 2 {
		e, res, rec := f.enter("r"+string(rune('0'+i)), who, protocols.FamilyA)
		require.Nil(t, res.Err, "%s", rec.Body.String())
		require.NotNil(t, e)
		held = append(held, e)
		req := f.request(who, model, protocols.FamilyA, 100)
		req.Entered = e
		admitted = append(admitted, f.mustAdmit(req))
	}
	st := f.status(keyScope("k"), pol)
	assert.Equal(t, int64(2), st.InFlight, "two requests hold two slots, not four")
	assert.Positive(t, st.ReservedMicros, "the second phase still reserves the budget")

	for _, fam := range []protocols.Family{protocols.FamilyA, protocols.FamilyB} {
		e, res, rec := f.enter("r-third", who, fam)
		require.NotNil(t, res.Err, "a third body may not start")
		assert.Nil(t, e)
		assert.Equal(t, "key_concurrency", res.Refused)
		assert.Equal(t, 429, rec.Code)
		assert.Contains(t, gjson.Get(rec.Body.String(), "error.message").Str, "2 concurrent requests")
		assert.Equal(t, fam == protocols.FamilyB, gjson.Get(rec.Body.String(), "type").Str == "error", "the family's envelope")
	}

	// The first request ends (answer settled, then its first phase released): a slot frees.
	admitted[0].Settle(0, 0)
	held[0].Release()
	held[0].Release() // twice changes nothing
	assert.Equal(t, int64(1), f.status(keyScope("k"), pol).InFlight)
	e, res, _ := f.enter("r-fourth", who, protocols.FamilyA)
	require.Nil(t, res.Err)
	e.Release()
	admitted[1].Settle(0, 0)
	held[1].Release()
	assert.Zero(t, f.status(keyScope("k"), pol).InFlight)
}

// Requests per minute are taken in the first phase and not again in the second; the
// project's own limits are entered too, per-model variants wait for the model.
func TestTheFirstPhaseCountsRequestsOnceAndLeavesModelsToTheSecond(t *testing.T) {
	keyPol := limits.Policy{RPM: 3}
	projPol := limits.Policy{Concurrency: 1}
	variant := limits.Policy{Concurrency: 1}
	keyPol.Models = map[string]*limits.Policy{"m": &variant}
	f := newFixture(t, func(p *Policy) {
		p.Projects = func(string) (ProjectLimits, bool) { return ProjectLimits{Own: &projPol}, true }
	}, limits.Options{})
	who := Who{KeyID: "k", ProjectID: "p", Limits: &keyPol}

	e, res, rec := f.enter("a", who, protocols.FamilyA)
	require.Nil(t, res.Err, "%s", rec.Body.String())
	assert.Equal(t, "2", rec.Header().Get("x-ratelimit-remaining-requests"))
	req := f.request(who, model, protocols.FamilyA, 100)
	req.Entered = e
	adm := f.mustAdmit(req)
	assert.Equal(t, int64(2), f.status(keyScope("k"), keyPol).Requests.Remaining, "the second phase took no request")
	assert.Equal(t, int64(1), f.status(limits.Scope{Kind: limits.ScopeKey, ID: "k", Model: "m"}, variant).InFlight, "the variant is counted in the second phase")
	// The project's one slot is held: another key of it cannot start a body.
	_, res, _ = f.enter("b", Who{KeyID: "k2", ProjectID: "p"}, protocols.FamilyB)
	assert.Equal(t, "project_concurrency", res.Refused)
	adm.Settle(0, 0)
	e.Release()
	assert.Zero(t, f.status(projectScope("p"), projPol).InFlight)
	assert.Zero(t, f.status(limits.Scope{Kind: limits.ScopeKey, ID: "k", Model: "m"}, variant).InFlight)

	// A request whose body fails never reaches the second phase: the release alone frees it.
	e, res, _ = f.enter("c", who, protocols.FamilyA)
	require.Nil(t, res.Err)
	assert.Equal(t, int64(1), f.status(projectScope("p"), projPol).InFlight)
	e.Release()
	assert.Zero(t, f.status(projectScope("p"), projPol).InFlight)
}

// Without rpm or concurrency on the key or its project there is no first phase (and no
// round trip to the counters): the second counts the slot, as before.
func TestNoFirstPhaseWithoutRatesOrConcurrency(t *testing.T) {
	pol := limits.Policy{Budget: budget("1/month")}
	f := newFixture(t, nil, limits.Options{})
	who := Who{KeyID: "k", Limits: &pol}
	e, res, _ := f.enter("a", who, protocols.FamilyA)
	assert.Nil(t, e)
	assert.Nil(t, res.Err)
	adm := f.mustAdmit(f.request(who, model, protocols.FamilyA, 100))
	assert.Equal(t, int64(1), f.status(keyScope("k"), pol).InFlight)
	adm.Settle(0, 0)
	e.Release() // nil: nothing
}
