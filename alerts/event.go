package alerts

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Kind is what an event is about; a webhook subscribes to kinds.
type Kind string

// The kinds of event.
const (
	KindBudget  Kind = "budget"
	KindCircuit Kind = "circuit"
	KindLedger  Kind = "ledger"
)

// Kinds lists every kind, the default subscription.
var Kinds = []Kind{KindBudget, KindCircuit, KindLedger}

// ParseKind reads a kind's name.
func ParseKind(s string) (Kind, error) {
	for _, k := range Kinds {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown alert event %q (want budget, circuit or ledger)", s)
}

// Event is one thing to tell. Exactly one of Budget, Circuit and Ledger is set, matching
// Kind. It holds no secret, credential, upstream address or error text from a database:
// it is sent to a third party.
type Event struct {
	Kind    Kind          `json:"kind"`
	At      time.Time     `json:"at"`
	Budget  *BudgetEvent  `json:"budget,omitempty"`
	Circuit *CircuitEvent `json:"circuit,omitempty"`
	Ledger  *LedgerEvent  `json:"ledger,omitempty"`
}

// BudgetEvent: a scope's spend in a budget period reached Threshold percent of it.
type BudgetEvent struct {
	Scope       string    `json:"scope"` // "key" or "project"
	ID          string    `json:"id"`    // the key's id or the project's slug
	Model       string    `json:"model,omitempty"`
	Period      string    `json:"period"` // day, month or total
	PeriodStart time.Time `json:"period_start,omitzero"`
	Threshold   int       `json:"threshold_percent"`
	LimitMicros int64     `json:"limit_micros"`
	SpentMicros int64     `json:"spent_micros"`
}

// CircuitEvent: a candidate's circuit opened (it is skipped) or closed (it takes
// traffic again).
type CircuitEvent struct {
	Model     string `json:"model"`
	Candidate string `json:"candidate"`
	State     string `json:"state"`            // "open" or "closed"
	Reason    string `json:"reason,omitempty"` // the last failure's reason, when opened
}

// LedgerEvent: the usage journal of one gateway has not reached the database since
// FailingSince.
type LedgerEvent struct {
	Journal      string    `json:"journal"`
	FailingSince time.Time `json:"failing_since"`
	PendingBytes int64     `json:"pending_bytes"`
}

// circuitBucket is the window within which circuit alerts for one candidate and state
// are one alert: several gateways watch the same candidate and open their own circuits
// moments apart, and a flapping candidate should not page once per flap.
const circuitBucket = time.Minute

// DedupeKey names the event so that two gateways noticing the same thing (or one
// gateway noticing it twice) store one row: kind, subject, what happened, and period.
func (e *Event) DedupeKey() string {
	switch {
	case e.Budget != nil:
		b := e.Budget
		subject := b.Scope + ":" + b.ID
		if b.Model != "" {
			subject += "/model:" + b.Model
		}
		return "budget|" + subject + "|" + strconv.Itoa(b.Threshold) + "|" + b.Period + "@" + strconv.FormatInt(b.PeriodStart.Unix(), 10)
	case e.Circuit != nil:
		c := e.Circuit
		bucket := e.At.Unix() / int64(circuitBucket/time.Second)
		return "circuit|" + c.Model + "/" + c.Candidate + "|" + c.State + "|" + strconv.FormatInt(bucket, 10)
	case e.Ledger != nil:
		return "ledger|" + e.Ledger.Journal + "|" + strconv.FormatInt(e.Ledger.FailingSince.UnixMicro(), 10)
	}
	return string(e.Kind) + "|" + strconv.FormatInt(e.At.UnixMicro(), 10)
}

// Text is the event in one sentence for people (Slack's text, and the JSON body's).
func (e *Event) Text() string {
	switch {
	case e.Budget != nil:
		b := e.Budget
		subject := b.Scope + " " + b.ID
		if b.Model != "" {
			subject += " (model " + b.Model + ")"
		}
		return fmt.Sprintf("Switchyard: %s has spent %d%% of its %s budget (%s of %s).",
			subject, b.Threshold, b.Period, formatMicros(b.SpentMicros), formatMicros(b.LimitMicros))
	case e.Circuit != nil:
		c := e.Circuit
		if c.State == "open" {
			why := ""
			if c.Reason != "" {
				why = " after " + c.Reason + " failures"
			}
			return fmt.Sprintf("Switchyard: candidate %s of model %s is out of service (circuit open%s).", c.Candidate, c.Model, why)
		}
		return fmt.Sprintf("Switchyard: candidate %s of model %s takes traffic again (circuit closed).", c.Candidate, c.Model)
	case e.Ledger != nil:
		return fmt.Sprintf("Switchyard: usage journal %s has not reached the database since %s (%d bytes waiting).",
			e.Ledger.Journal, e.Ledger.FailingSince.UTC().Format(time.RFC3339), e.Ledger.PendingBytes)
	}
	return "Switchyard: " + string(e.Kind)
}

// formatMicros shows micro-units as a decimal amount with two places or more.
func formatMicros(m int64) string {
	sign := ""
	if m < 0 {
		sign, m = "-", -m
	}
	whole, frac := m/1_000_000, m%1_000_000
	s := fmt.Sprintf("%s%d.%06d", sign, whole, frac)
	for len(s) > 0 && s[len(s)-1] == '0' && s[len(s)-3] != '.' {
		s = s[:len(s)-1]
	}
	return s
}

// Format is how a webhook's body is written.
type Format string

// The body formats.
const (
	FormatJSON  Format = "json"
	FormatSlack Format = "slack"
)

// Body renders the delivery's body: the event as JSON with the delivery's id and a
// sentence, or Slack's {"text": ...}.
func Body(f Format, deliveryID int64, e *Event) ([]byte, error) {
	if f == FormatSlack {
		return json.Marshal(struct {
			Text string `json:"text"`
		}{e.Text()})
	}
	return json.Marshal(struct {
		ID int64 `json:"id"`
		*Event
		Text string `json:"text"`
	}{deliveryID, e, e.Text()})
}
