package console

import (
	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/connect"
	"github.com/switchyard-gw/switchyard/metering"
)

// The answers of the API, as it encodes them and as `caddy switchyard …` decodes them.
// Fields are in the order of their JSON names: the answers were maps before, and
// encoding/json writes a map's keys sorted, so the bytes on the wire stay as they were.

// ErrorAnswer is every refused or failed call's answer.
type ErrorAnswer struct {
	Error string `json:"error"`
	// SignIn, on a 401, says how one signs in here (login is relative to the console).
	SignIn *SignInInfo `json:"sign_in,omitempty"`
}

// KeyAnswer is the answer about one key: GET /keys/{id} and each change to a key.
type KeyAnswer struct {
	Key KeyView `json:"key"`
	// Replaced is the key a rotation replaced, as it is now.
	Replaced *KeyView `json:"replaced,omitempty"`
	// Secret is a created or rotated key's secret, shown in this answer only.
	Secret string `json:"secret,omitempty"`
}

// KeysAnswer is GET /keys.
type KeysAnswer struct {
	Keys []KeyView `json:"keys"`
}

// ProjectAnswer is the answer about one project: GET /projects/{id} and each change to one.
type ProjectAnswer struct {
	Project ProjectDetail `json:"project"`
}

// ProjectsAnswer is GET /projects.
type ProjectsAnswer struct {
	Projects []ProjectView `json:"projects"`
}

// AuditAnswer is GET /audit: a page of entries, newest first, and whether older remain.
type AuditAnswer struct {
	Entries []*auth.AuditEntry `json:"entries"`
	More    bool               `json:"more"`
}

// ModelsAnswer is GET /models.
type ModelsAnswer struct {
	Models []ModelInfo `json:"models"`
}

// HealthResetAnswer is POST /health/{model}/{candidate}/reset: the candidate as it is
// now, and the circuit state it was in.
type HealthResetAnswer struct {
	Candidate CandidateInfo `json:"candidate"`
	Model     string        `json:"model"`
	Was       string        `json:"was"`
}

// UsageAnswer is GET /usage: the days asked for (To included), the dimensions summed by,
// a row per group and their total.
type UsageAnswer struct {
	From  string         `json:"from"`
	Group []string       `json:"group"`
	Rows  []metering.Row `json:"rows"`
	To    string         `json:"to"`
	Total metering.Row   `json:"total"`
}

// LatencyAnswer is GET /latency: a row per candidate and per model over the window, with
// the bucket bounds their counts are in.
type LatencyAnswer struct {
	BoundsMs []int64       `json:"bounds_ms"`
	From     string        `json:"from"`
	Models   []LatencyView `json:"models"`
	Rows     []LatencyView `json:"rows"`
	To       string        `json:"to"`
	Window   string        `json:"window"`
}

// SetupAnswer is GET /connect/{client}.
type SetupAnswer struct {
	Setup *connect.Setup `json:"setup"`
}
