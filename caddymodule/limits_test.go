package caddymodule

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/switchyard-gw/switchyard/admission"
	"github.com/switchyard-gw/switchyard/limits"
	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// The limiter the glue opens counts budgets from the store's ledger, and admission holds
// keys without limits of their own to key_defaults: a key whose ledger shows its budget
// nearly spent is refused on its first request after a start.
func TestOpenLimiterSeedsFromTheLedgerAndAppliesKeyDefaults(t *testing.T) {
	monthly, err := limits.ParseBudget("1/month")
	require.NoError(t, err)
	var seeded []limits.Scope
	a := &App{
		Limits:   &LimitsConfig{KeyDefaults: &limits.Policy{Budget: &monthly}, DefaultOutputTokens: 100},
		logger:   zap.NewNop(),
		storeKey: t.Name(), // a limiter of its own in the pool
		spend: func(_ context.Context, s limits.Scope, _ time.Time) (int64, error) {
			seeded = append(seeded, s)
			return 999_990, nil
		},
	}
	require.NoError(t, a.openLimiter(caddy.NewReplacer()))
	t.Cleanup(func() { _, _ = limiterPool.Delete(a.limiterKey) })

	op := protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindChat}
	parsed, apiErr := protocols.ParseRequest(op.Family, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	require.Nil(t, apiErr)
	who := admission.Who{KeyID: "key_1"}
	require.True(t, a.admission.Applies(who, "m"), "key_defaults apply to a key without limits")
	res := a.admission.Admit(context.Background(), admission.Request{
		ID: "req_1", Who: who, Op: op, Parsed: parsed,
		Model: admission.Model{ID: "m", Prices: routing.Prices{Input: 1_000_000, Output: 1_000_000}},
	}, http.Header{})
	require.NotNil(t, res.Err, "999,990 of 1,000,000 spent: 100 output tokens do not fit")
	assert.Equal(t, "key_budget", res.Refused)
	assert.Equal(t, []limits.Scope{{Kind: limits.ScopeKey, ID: "key_1"}}, seeded)
}
