// Package admission is the policy that turns a request into a reservation against the
// limits on its path, and settles it when the request ends: which limits apply (a key's
// own or the defaults, its project's or the project defaults, per-model variants), what a
// request may cost at worst, how a refusal is worded for the client in its family's
// envelope. It knows nothing of Caddy or of HTTP handlers: the glue hands it plain values
// and gets back what to settle, or the error to send.
package admission

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/switchyard-gw/switchyard/limits"
	"github.com/switchyard-gw/switchyard/metering"
	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// DefaultOutputReservation is the output reserved for a request that sets no output cap,
// on a model that declares none.
const DefaultOutputReservation = 4096

// DefaultToolUses is the uses reserved for each server-side tool a request declares
// without a count of its own (a Responses tool, a Messages web search without max_uses,
// each MCP server).
const DefaultToolUses = 10

// Reserver is what admission reserves with: a *limits.Limiter.
type Reserver interface {
	Reserve(ctx context.Context, a limits.Ask) (limits.Decision, error)
}

// ProjectLookup finds a project's limits: found is false for a project it does not
// know; a known project without limits of its own answers a nil Own.
type ProjectLookup func(projectID string) (limits ProjectLimits, found bool)

// ProjectLimits are what a project limits: its own requests, and all of one member's
// keys together (nil: nothing).
type ProjectLimits struct {
	Own, Members *limits.Policy
}

// Policy is how requests are admitted.
type Policy struct {
	// Limiter holds the counters; nil: nothing is limited.
	Limiter Reserver
	// Projects finds a project's limits; nil: projects are not known here and add no
	// limits (not even ProjectDefaults).
	Projects ProjectLookup
	// KeyDefaults apply to a key without limits of its own; ProjectDefaults to a project
	// without limits of its own.
	KeyDefaults, ProjectDefaults *limits.Policy
	// DefaultOutputTokens is the output reserved for a request without a cap on a model
	// that declares none; 0: DefaultOutputReservation.
	DefaultOutputTokens int64
	// DefaultToolUses is the uses reserved for each server-side tool a request declares
	// without a count of its own; 0: DefaultToolUses.
	DefaultToolUses int64
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Who is the key a request came with.
type Who struct {
	KeyID     string
	ProjectID string         // empty: none
	Limits    *limits.Policy // the key's own limits; nil: none (the defaults apply)
	// Owner is the person (or service account) the key belongs to; empty: none. With
	// a project, the project's limits for each member hold all their keys together.
	Owner string
}

// Model is what admission needs of the model asked for.
type Model struct {
	ID              string
	Prices          routing.Prices
	MaxOutputTokens int64 // 0: not declared
}

// Request is one request to admit.
type Request struct {
	ID     string // the gateway's request id: names the reservation
	Who    Who
	Model  Model
	Op     protocols.Operation
	Parsed *protocols.ParsedRequest // the whole body; required when Applies
	// Entered is the request's first phase (Enter), whose limits Admit does not count
	// again; nil: Admit counts every limit.
	Entered *Entered
}

// Result is admission's answer. Exactly one of Admitted (possibly nil when no limit
// applies) and Err matters: when Err is set the request must be answered with it.
type Result struct {
	// Admitted is what to settle when the request ends; nil when no limit applies.
	Admitted *Admitted
	// Err is the answer to send instead of serving the request.
	Err *protocols.APIError
	// Refused labels the limit that refused ("key_budget", "project_requests", …) or
	// "unavailable" when the counters could not be asked; empty when admitted.
	Refused string
	// Cause is why the counters could not be asked, for the log (never for the client).
	Cause error
}

// keyPolicy is the policy a key's requests are held to: its own, or the defaults.
func (p *Policy) keyPolicy(w Who) *limits.Policy {
	if w.Limits != nil {
		return w.Limits
	}
	return p.KeyDefaults
}

// projectPolicies are the policies of the key's project (its own, or the defaults) and
// of its member scope; nil when there is none.
func (p *Policy) projectPolicies(w Who) (own, members *limits.Policy) {
	if w.ProjectID == "" || p.Projects == nil {
		return nil, nil
	}
	pl, ok := p.Projects(w.ProjectID)
	if own = pl.Own; !ok || own == nil {
		own = p.ProjectDefaults
	}
	return own, pl.Members
}

// Checks lists every limit on a request's path: the key's, then its project's, each
// with its per-model variant for the model asked for.
func (p *Policy) Checks(w Who, model string) []limits.Check {
	var checks []limits.Check
	add := func(kind limits.ScopeKind, scopeID string, pol *limits.Policy) {
		if pol.IsZero() {
			return
		}
		checks = append(checks, limits.Check{Scope: limits.Scope{Kind: kind, ID: scopeID}, Policy: *pol})
		if v := pol.Models[model]; !v.IsZero() {
			checks = append(checks, limits.Check{Scope: limits.Scope{Kind: kind, ID: scopeID, Model: model}, Policy: *v})
		}
	}
	p.eachScope(w, add)
	return checks
}

// eachScope visits every scope a key's requests count in, with its policy (nil: none):
// the key's, its project's, and its owner's in that project (all of one member's keys
// together).
func (p *Policy) eachScope(w Who, visit func(kind limits.ScopeKind, scopeID string, pol *limits.Policy)) {
	visit(limits.ScopeKey, w.KeyID, p.keyPolicy(w))
	if w.ProjectID == "" {
		return
	}
	own, members := p.projectPolicies(w)
	visit(limits.ScopeProject, w.ProjectID, own)
	if w.Owner != "" && members != nil {
		visit(limits.ScopeMember, limits.MemberScopeID(w.ProjectID, w.Owner), members)
	}
}

// Applies reports whether any limit applies to the key's requests for the model: only
// then must a body be read whole before an upstream is called, to reserve its worst case.
func (p *Policy) Applies(w Who, model string) bool {
	return p != nil && p.Limiter != nil && len(p.Checks(w, model)) > 0
}

// WorstCase is what admission reserves for a request: its input estimated from its body
// and the output it may generate (its own cap, else the model's, else the default, times
// the answers it asks for), at the model's prices; and the uses of server-side tools it
// may make (each tool's max_uses, else the default), at the model's tool prices.
func (p *Policy) WorstCase(op protocols.Operation, parsed *protocols.ParsedRequest, m Model) (tokens, costMicros int64) {
	if !op.Generates() {
		return 0, 0 // a token count produces nothing to bill
	}
	input := metering.EstimateInputTokens(parsed.Body)
	output, ok := parsed.OutputCap(op)
	if !ok {
		output = m.MaxOutputTokens
	}
	if output <= 0 {
		output = p.DefaultOutputTokens
		if output <= 0 {
			output = DefaultOutputReservation
		}
	}
	// The upstream writes n answers, each up to the cap (saturating, never wrapping).
	if n := parsed.Choices(op); n > 1 {
		output = satMul(output, n)
	}
	// A claimed cap near the int64 limit must not wrap the sum into a small ask.
	tokens = input + output
	if output > math.MaxInt64-input {
		tokens = math.MaxInt64
	}
	costMicros = metering.WorstCaseCost(m.Prices, input, output)
	uses := p.DefaultToolUses
	if uses <= 0 {
		uses = DefaultToolUses
	}
	tools := metering.WorstCaseToolCost(m.Prices.Tools, parsed.ServerTools(op, uses))
	if tools > math.MaxInt64-costMicros {
		return tokens, math.MaxInt64
	}
	return tokens, costMicros + tools
}

// Admit reserves a request's worst case against every limit on its path. On admission
// the tightest remaining allowances are written to hdr (the response's headers) in the
// family's own names.
func (p *Policy) Admit(ctx context.Context, req Request, hdr http.Header) Result {
	if p == nil || p.Limiter == nil {
		return Result{}
	}
	checks := req.Entered.without(p.Checks(req.Who, req.Model.ID))
	if len(checks) == 0 {
		return Result{}
	}
	tokens, cost := p.WorstCase(req.Op, req.Parsed, req.Model)
	dec, err := p.Limiter.Reserve(ctx, limits.Ask{ID: req.ID, Checks: checks, Tokens: tokens, CostMicros: cost})
	if err != nil {
		return Result{Err: protocols.ErrLimitsUnavailable(req.Op.Family), Refused: "unavailable", Cause: err}
	}
	now := p.now()
	f := req.Op.Family
	if r := dec.Refused; r != nil {
		e := RefusalError(f, r, now)
		if r.Kind == limits.KindBudget && r.HeldMicros > 0 {
			// SDKs retry a 429 on their own; say it outright, as the budget frees when
			// the requests holding it end.
			hdr.Set("X-Should-Retry", "true")
		}
		return Result{Err: e, Refused: string(r.Scope.Kind) + "_" + string(r.Kind)}
	}
	if al := dec.Requests; al != nil && (req.Entered == nil || req.Entered.local) {
		protocols.SetRateLimitHeaders(f, hdr, protocols.LimitRequests, al.Limit, al.Remaining, al.Reset, now)
	}
	if al := dec.Tokens; al != nil {
		protocols.SetRateLimitHeaders(f, hdr, protocols.LimitTokens, al.Limit, al.Remaining, al.Reset, now)
	}
	return Result{Admitted: &Admitted{res: dec.Reservation}}
}

func (p *Policy) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// RefusalError words a refusal for the client: which limit (the key's or its
// project's, for which model), and when it frees up; never another key's figures.
func RefusalError(f protocols.Family, r *limits.Refusal, now time.Time) *protocols.APIError {
	whose := "this key's"
	switch r.Scope.Kind {
	case limits.ScopeProject:
		whose = "this key's project's"
	case limits.ScopeMember:
		whose = "your keys' (together, in this project)"
	}
	if r.Scope.Model != "" {
		whose += " limit for model '" + r.Scope.Model + "':"
	}
	switch r.Kind {
	case limits.KindBudget:
		b := r.Budget
		if b == nil {
			b = &limits.Budget{Period: limits.PeriodTotal}
		}
		if r.HeldMicros > 0 {
			// Only reservations of requests still running stand in the way: they settle
			// to what they cost as they end, which usually frees room.
			return protocols.ErrRateLimited(f, fmt.Sprintf("rate limit reached: %s spend budget of %s has %s held by requests in flight "+
				"and no room for this request besides; retry when they end", whose, b.String(), limits.FormatMicros(r.HeldMicros)), r.RetryAfter)
		}
		msg := fmt.Sprintf("budget exceeded: %s spend budget of %s", whose, b.String())
		var until time.Duration
		switch {
		case b.Period == limits.PeriodTotal:
			msg += " is used up; it does not reset, ask the gateway's operator to raise it"
		case r.ResetAt.IsZero():
			msg += " cannot cover this request"
		default:
			until = r.ResetAt.Sub(now)
			msg += fmt.Sprintf(" (per %s) has no room for this request; it resets at %s", b.Period, r.ResetAt.UTC().Format(time.RFC3339))
		}
		return protocols.ErrBudgetExceeded(f, msg, until)
	case limits.KindConcurrency:
		return protocols.ErrRateLimited(f, fmt.Sprintf("rate limit reached: %s limit of %d concurrent requests; retry when one ends", whose, r.Limit), r.RetryAfter)
	case limits.KindTokens:
		msg := fmt.Sprintf("rate limit reached: %s limit of %d tokens per minute", whose, r.Limit)
		if r.RetryAfter <= 0 {
			// The request alone needs more than a minute's allowance: waiting cannot help.
			e := protocols.ErrRateLimited(f, msg+" is smaller than this request's input and output cap; lower max_tokens or shorten the input", time.Second)
			e.NoRetry, e.RetryAfter, e.RetryAfterMillis = true, 0, 0
			return e
		}
		return protocols.ErrRateLimited(f, fmt.Sprintf("%s; retry in %.1fs", msg, r.RetryAfter.Seconds()), r.RetryAfter)
	}
	return protocols.ErrRateLimited(f, fmt.Sprintf("rate limit reached: %s limit of %d requests per minute; retry in %.1fs", whose, r.Limit, r.RetryAfter.Seconds()), r.RetryAfter)
}

// Entered is a request's first phase: its requests-per-minute and its in-flight slot in
// the key's and the project's own scopes, taken before its body is read (neither depends
// on the body), so that a key at its concurrency limit cannot make the gateway buffer
// one more body. Per-model variants wait for the model, in Admit.
type Entered struct {
	res    *limits.Reservation
	scopes []limits.Scope
	// local: the slots are this gateway's own (counters shared in Redis): Admit counts
	// every limit in the shared counters, in one round trip.
	local bool
}

// localReserver is a Reserver whose counters may be shared, with counters of the
// gateway's own beside them: a *limits.Limiter.
type localReserver interface {
	Shared() bool
	ReserveLocal(ctx context.Context, a limits.Ask) (limits.Decision, error)
}

// enterChecks are the first phase's checks: the rpm and concurrency of the key, its
// project and its member scope, when any has one.
func (p *Policy) enterChecks(w Who) []limits.Check {
	var checks []limits.Check
	add := func(kind limits.ScopeKind, scopeID string, pol *limits.Policy) {
		if pol == nil || pol.RPM <= 0 && pol.Concurrency <= 0 {
			return
		}
		checks = append(checks, limits.Check{Scope: limits.Scope{Kind: kind, ID: scopeID},
			Policy: limits.Policy{RPM: pol.RPM, Concurrency: pol.Concurrency}})
	}
	p.eachScope(w, add)
	return checks
}

// Enter is admission's first phase, before the body is read: the request takes its
// requests-per-minute and in-flight slot in the key's and project's scopes (family f
// words a refusal). The Entered (nil when neither has such a limit) is to be released
// on every way out and handed to Admit in Request.Entered. With counters in Redis it
// makes no round trip: it counts the key's and project's concurrency in this gateway
// alone, and Admit counts every limit in Redis.
func (p *Policy) Enter(ctx context.Context, id string, w Who, f protocols.Family, hdr http.Header) (*Entered, Result) {
	if p == nil || p.Limiter == nil {
		return nil, Result{}
	}
	checks := p.enterChecks(w)
	reserve, local := p.Limiter.Reserve, false
	if lr, ok := p.Limiter.(localReserver); ok && lr.Shared() {
		// With counters in Redis, the first phase is this gateway's own count of the
		// key's and project's requests (no round trip): the body is read only while
		// this gateway holds fewer than their concurrency. Admit then counts every
		// limit, rates and the shared slots included, in one script.
		reserve, local = lr.ReserveLocal, true
		n := 0
		for _, c := range checks {
			if c.Policy.Concurrency > 0 {
				c.Policy.RPM = 0
				checks[n] = c
				n++
			}
		}
		checks = checks[:n]
	}
	if len(checks) == 0 {
		return nil, Result{}
	}
	dec, err := reserve(ctx, limits.Ask{ID: id + "/enter", Checks: checks})
	if err != nil {
		return nil, Result{Err: protocols.ErrLimitsUnavailable(f), Refused: "unavailable", Cause: err}
	}
	if r := dec.Refused; r != nil {
		return nil, Result{Err: RefusalError(f, r, p.now()), Refused: string(r.Scope.Kind) + "_" + string(r.Kind)}
	}
	if al := dec.Requests; al != nil {
		protocols.SetRateLimitHeaders(f, hdr, protocols.LimitRequests, al.Limit, al.Remaining, al.Reset, p.now())
	}
	e := &Entered{res: dec.Reservation, local: local}
	for _, c := range checks {
		e.scopes = append(e.scopes, c.Scope)
	}
	return e, Result{}
}

// without is checks less what the first phase counted: the entered scopes' rpm and
// concurrency (their slot is held), their tpm and budget kept.
func (e *Entered) without(checks []limits.Check) []limits.Check {
	if e == nil || e.local {
		return checks
	}
	out := checks[:0]
	for _, c := range checks {
		for _, s := range e.scopes {
			if c.Scope == s {
				c.Policy.RPM, c.Policy.Concurrency, c.SlotHeld = 0, 0, true
			}
		}
		if c.SlotHeld && c.Policy.TPM <= 0 && c.Policy.Budget == nil {
			continue // nothing left to count here
		}
		out = append(out, c)
	}
	return out
}

// Release gives back the first phase's slots (the requests per minute stay spent). It
// must not wait on the client, so it runs on a context of its own. Later calls, and
// calls on nil, do nothing.
func (e *Entered) Release() {
	if e == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	e.res.Settle(ctx, 0, 0)
}

// Admitted is an admitted request's hold on its limits, until Settle.
type Admitted struct {
	res *limits.Reservation
}

// Settle replaces the reservation by what the answer cost: tokens and costMicros as
// metered, zero when no answer came. It must not wait on the client, so it runs on a
// context of its own. Later calls, and calls on nil, do nothing.
func (a *Admitted) Settle(tokens, costMicros int64) {
	if a == nil || a.res == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	a.res.Settle(ctx, tokens, costMicros)
}

// Usage is what a request used, as metered; zero until its answer is metered.
type Usage struct {
	Tokens, CostMicros int64
}

// Serve runs serve while the request holds its admission, and settles it to the usage
// serve metered on every way out: an answer, an error, a client gone, a panic (which
// goes on up after the settlement). a may be nil (no limit applied).
func (a *Admitted) Serve(serve func(used *Usage)) {
	var used Usage
	defer func() { a.Settle(used.Tokens, used.CostMicros) }()
	serve(&used)
}

// satMul is a×b for positive a and b, or math.MaxInt64 when that would not fit.
func satMul(a, b int64) int64 {
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}
