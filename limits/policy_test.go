package limits

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A budget is "50/month" in every JSON the gateway reads or writes; the object older
// versions stored still reads.
func TestBudgetIsOneStringInJSON(t *testing.T) {
	const written = `{"rpm":60,"tpm":100000,"concurrency":4,"budget":"50/month","models":{"m":{"budget":"0.25/day"}}}`
	var p Policy
	require.NoError(t, json.Unmarshal([]byte(written), &p))
	assert.Equal(t, Policy{RPM: 60, TPM: 100_000, Concurrency: 4, Budget: &Budget{Micros: 50_000_000, Period: PeriodMonth},
		Models: map[string]*Policy{"m": {Budget: &Budget{Micros: 250_000, Period: PeriodDay}}}}, p)
	out, err := json.Marshal(p)
	require.NoError(t, err)
	assert.JSONEq(t, written, string(out))

	var old Policy
	require.NoError(t, json.Unmarshal([]byte(`{"budget":{"micros":1500000,"period":"total"}}`), &old))
	assert.Equal(t, &Budget{Micros: 1_500_000, Period: PeriodTotal}, old.Budget)

	for _, none := range []string{`{}`, `{"budget":null}`, `{"budget":"none"}`} {
		var p Policy
		require.NoError(t, json.Unmarshal([]byte(none), &p), none)
		assert.Nil(t, p.Budget, none)
	}
	for in, want := range map[string]string{
		`{"budget":""}`:                      "budget: empty",
		`{"budget":"  "}`:                    "budget: empty",
		`{"budget":"50/week"}`:               "budget: want <amount>/<day|month|total>",
		`{"budget":50}`:                      "budget: want a string",
		`{"models":{"m":{"budget":""}}}`:     "models.m.budget: empty",
		`{"rpn":60}`:                         `unknown field "rpn"`,
		`{"budget":{"micros":"x"}}`:          "budget:",
		`{"models":{"m":{"budget":"1/yr"}}}`: "models.m.budget: want",
	} {
		var p Policy
		err := json.Unmarshal([]byte(in), &p)
		if assert.Error(t, err, in) {
			assert.Contains(t, err.Error(), want, in)
		}
	}
}

// A rate or budget beyond what the counters hold exactly is refused, so that no
// allowance header shows a figure the gateway does not enforce.
func TestPolicyRefusesFiguresTheCountersCannotHoldExactly(t *testing.T) {
	ok := Policy{RPM: MaxRate, TPM: MaxRate, Concurrency: MaxRate, Budget: &Budget{Micros: MaxBudgetMicros, Period: PeriodMonth}}
	assert.NoError(t, ok.Validate())
	for _, p := range []Policy{
		{RPM: MaxRate + 1}, {TPM: 1<<63 - 1}, {Concurrency: MaxRate + 1},
		{Budget: &Budget{Micros: MaxBudgetMicros + 1, Period: PeriodDay}},
		{Models: map[string]*Policy{"m": {TPM: MaxRate + 1}}},
	} {
		assert.ErrorContains(t, p.Validate(), "more than the most", "%+v", p)
	}
	_, err := ParseBudget("1000000001/month")
	assert.ErrorContains(t, err, "more than the most a budget may be, 1000000000")
}
