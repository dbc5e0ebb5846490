package caddymodule

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/alerts"
	"github.com/switchyard-gw/switchyard/metering"
)

func alertsCaddyfile(store, block string) string {
	return "{\n\tswitchyard {\n\t\t" + store + "\n\t\talerts {\n" + block + "\n\t\t}\n" +
		"\t\tmodel m {\n\t\t\tcandidate east {\n\t\t\t\tprotocol family_a\n\t\t\t\turl http://127.0.0.1:9/v1\n\t\t\t\tupstream_model up\n\t\t\t}\n\t\t}\n\t}\n}\n"
}

// A mistake in the alerts block is refused, and the message names the field, never the
// secret or the URL's path.
func TestBadAlertsNameTheField(t *testing.T) {
	t.Setenv("EMPTY_SECRET", "")
	for _, tc := range []struct{ store, block, want string }{
		{"", "budget_thresholds 50", "alerts: webhooks: at least one is required"},
		{"store off", "webhook https://h.example/x {\n secret s\n}", "alerts: need a store"},
		{"", "webhook ftp://h.example/T0KEN {\n secret s\n}", "alerts: webhooks[0]: url: want an http or https URL"},
		{"", "webhook https://h.example/T0KEN {\n secret hunter2\n format xml\n}", `alerts: webhooks[0]: format: "xml" is neither json nor slack`},
		{"", "webhook https://h.example/T0KEN", "alerts: webhooks[0]: secret: required for the json format"},
		{"", "webhook https://h.example/T0KEN {\n secret {env.EMPTY_SECRET}\n}", "alerts: webhooks[0]: secret: {env.EMPTY_SECRET} resolves to an empty value"},
		{"", "webhook https://h.example/T0KEN {\n secret hunter2\n events budget pager\n}", `alerts: webhooks[0]: events: unknown alert event "pager"`},
		{"", "webhook https://h.example/T0KEN {\n secret hunter2\n}\n budget_thresholds 50 0", "alerts: budget_thresholds: 0 is not a percent"},
		{"", "webhook https://h.example/T0KEN {\n secret hunter2\n}\nwebhook https://h.example/T0KEN {\n secret x\n}", "alerts: webhooks[1]: url: https://h.example is configured twice"},
	} {
		err := validate(t, alertsCaddyfile(tc.store, tc.block))
		require.Error(t, err, tc.block)
		assert.Contains(t, err.Error(), tc.want)
		assert.NotContains(t, err.Error(), "hunter2")
		assert.NotContains(t, err.Error(), "T0KEN")
	}
	require.NoError(t, validate(t, alertsCaddyfile("", "webhook https://hooks.slack.com/services/T/B/X {\n format slack\n}")),
		"a Slack webhook needs no secret")
}

// The journal failing for longer than the bound is told once per run of failures.
func TestLedgerWatchTellsOncePerRunOfFailures(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	w := ledgerWatch{after: time.Minute}
	down := metering.Stats{JournalID: "gw-1", PendingBytes: 4096, LastError: errors.New("connection refused to db.internal:5432")}
	up := metering.Stats{JournalID: "gw-1"}
	check := func(s metering.Stats, advance time.Duration) *alerts.Event {
		now = now.Add(advance)
		return w.check(s, now)
	}
	assert.Nil(t, check(down, 0))
	assert.Nil(t, check(down, 59*time.Second), "failing for less than the bound")
	e := check(down, 2*time.Second)
	require.NotNil(t, e)
	require.NotNil(t, e.Ledger)
	assert.Equal(t, "gw-1", e.Ledger.Journal)
	assert.Equal(t, int64(4096), e.Ledger.PendingBytes)
	assert.Equal(t, now.Add(-61*time.Second), e.Ledger.FailingSince)
	assert.NotContains(t, e.Text(), "db.internal", "no database address")
	assert.Nil(t, check(down, time.Hour), "once per run")
	assert.Nil(t, check(up, time.Second))
	assert.Nil(t, check(down, time.Second))
	assert.Nil(t, check(down, 30*time.Second), "a new run counts from its own start")
	assert.NotNil(t, check(down, 31*time.Second), "a new run is told again")
}
