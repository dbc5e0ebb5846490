package metering

import (
	"context"
	"errors"
	"time"

	"github.com/switchyard-gw/switchyard/protocols"
)

// RequestQuery selects rows of the request log: the ledger's records, newest first.
type RequestQuery struct {
	// Each filter, when set, keeps only the records that match it exactly.
	KeyID, ProjectID, Model, Candidate string
	Status                             int
	// Since and Until bound the records' times: Since <= time < Until; zero: no bound.
	Since, Until time.Time
	// Limit is the page's size (the stores cap it at MaxRequestPage).
	Limit int
	// After continues a listing: the Cursor of the last row of the page before.
	After string
}

// ErrBadCursor is a RequestQuery.After the request log did not make.
var ErrBadCursor = errors.New("not a request log cursor")

// MaxRequestPage caps a request log page.
const MaxRequestPage = 500

// RequestRow is one request in the log. Bodies are never kept.
type RequestRow struct {
	Time      time.Time `json:"time"`
	RequestID string    `json:"request_id"`
	KeyID     string    `json:"key_id,omitempty"`
	// KeyName is the key's name when the store knows the key; never its secret.
	KeyName string `json:"key_name,omitempty"`
	// Owner is the key's owner (a person's user id or a service account), filled in by
	// the console from the keys; the ledger does not store it.
	Owner      string `json:"owner,omitempty"`
	ProjectID  string `json:"project_id,omitempty"`
	Model      string `json:"model"`
	Candidate  string `json:"candidate,omitempty"`
	Operation  string `json:"operation"`
	Status     int    `json:"status"`
	TTFBMs     int64  `json:"ttfb_ms"`
	DurationMs int64  `json:"duration_ms"`
	Input      int64  `json:"input"`
	Output     int64  `json:"output"`
	CostMicros int64  `json:"cost_micros"`
	// ToolUses are the server-side tool uses the answer reported (their price is in
	// CostMicros); left out when none.
	ToolUses  protocols.ToolUses `json:"tool_uses,omitzero"`
	Estimated bool               `json:"estimated,omitempty"`
	// Outcome is OutcomeServed, OutcomeStreamError, OutcomeRefused or OutcomeFailed.
	Outcome   string `json:"outcome"`
	RefusedBy string `json:"refused_by,omitempty"`
	// FailedOver: an attempt on another candidate came after a failed one; Retried: a
	// candidate was tried again.
	FailedOver bool  `json:"failed_over"`
	Retried    bool  `json:"retried"`
	Attempts   int   `json:"attempts"`
	Tries      []Try `json:"tries"`
}

// RequestPage is one page of the request log. Next, when not empty, is the After of
// the page that follows.
type RequestPage struct {
	Requests []RequestRow `json:"requests"`
	Next     string       `json:"next,omitempty"`
}

// RequestLog lists the request log; the stores implement it.
type RequestLog interface {
	ListRequests(ctx context.Context, q RequestQuery) (RequestPage, error)
}

// Flags derives a row's failed-over and retried flags from its attempts, and tells a
// stream that ended in an error event, or an attempt billed after the gateway gave up
// waiting on it (a 504), from an answer served whole: all are stored as served, since
// all are billed.
func (r *RequestRow) Flags() {
	r.FailedOver, r.Retried = false, false
	if r.Outcome == OutcomeServed && r.Status >= 500 {
		// The upstream had the whole request and the gateway's limit ran out: the
		// client got the 504, and the work started upstream is billed.
		r.Outcome = OutcomeFailed
	}
	for i, t := range r.Tries {
		if t.StreamError != "" && r.Outcome == OutcomeServed {
			r.Outcome = OutcomeStreamError
		}
		if t.Retry > 0 {
			r.Retried = true
		}
		if i > 0 && t.Candidate != r.Tries[i-1].Candidate && r.Tries[i-1].Reason != "" {
			r.FailedOver = true
		}
	}
}
