package metering

import (
	"context"
	"time"
)

// Query selects usage records and how to sum them.
type Query struct {
	// From and To bound the records' times: From <= time < To. Zero means unbounded.
	From, To time.Time
	// KeyID and Model, when set, keep only that key's or that model's records.
	KeyID, Model string
	// Owner, when set, keeps only the records of keys that owner owns (a user id or
	// "svc:<name>"), whichever of their keys (a rotation's replacement keeps its
	// owner).
	Owner string
	// GroupBy names the dimensions rows are summed by, in this order: any of "day"
	// (UTC calendar day), "key", "model", "candidate" (the model's candidate that
	// served: grouped with "model" as well, or the same name on two models sums
	// together), "channel" and "owner" (the key's owner now; "" for keys without one
	// and for keys from the configuration). Empty gives one row of totals.
	GroupBy []string
}

// Row is the sum of the records of one group.
type Row struct {
	Day        string `json:"day,omitempty"` // YYYY-MM-DD, UTC
	KeyID      string `json:"key_id,omitempty"`
	Model      string `json:"model,omitempty"`
	Candidate  string `json:"candidate,omitempty"`
	Channel    string `json:"channel,omitempty"`
	Owner      string `json:"owner,omitempty"`
	Requests   int64  `json:"requests"`
	Input      int64  `json:"input"`
	CachedIn   int64  `json:"cached_input"`
	CacheWrite int64  `json:"cache_write"`
	Output     int64  `json:"output"`
	Reasoning  int64  `json:"reasoning"`
	CostMicros int64  `json:"cost_micros"`
	// Estimated counts the records whose tokens were partly estimated.
	Estimated int64 `json:"estimated"`
}

// Reader answers usage queries; the stores implement it.
type Reader interface {
	// QueryUsage returns one row per group, ordered by the GroupBy dimensions.
	QueryUsage(ctx context.Context, q Query) ([]Row, error)
}

// Total sums rows into one.
func Total(rows []Row) Row {
	var t Row
	for _, r := range rows {
		t.Add(r)
	}
	return t
}

// Add adds o's sums to r's, leaving r's dimensions as they are.
func (r *Row) Add(o Row) {
	r.Requests += o.Requests
	r.Input += o.Input
	r.CachedIn += o.CachedIn
	r.CacheWrite += o.CacheWrite
	r.Output += o.Output
	r.Reasoning += o.Reasoning
	r.CostMicros += o.CostMicros
	r.Estimated += o.Estimated
}

// Dims is r's dimensions alone, its sums zero: what rows are grouped by.
func (r Row) Dims() Row {
	return Row{Day: r.Day, KeyID: r.KeyID, Model: r.Model, Candidate: r.Candidate, Channel: r.Channel, Owner: r.Owner}
}
