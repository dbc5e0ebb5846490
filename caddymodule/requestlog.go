package caddymodule

import (
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/metering"
	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/relay"
)

// The request log is the ledger: a served answer's record (see meter) carries its
// attempts, and a request refused by a limit or that no candidate answered is journaled
// as a record of its own, with no tokens and no cost, which usage does not count.

// triesOf is the request log's view of a request's upstream attempts.
func triesOf(attempts []relay.Attempt) []metering.Try {
	if len(attempts) == 0 {
		return nil
	}
	tries := make([]metering.Try, len(attempts))
	for i, a := range attempts {
		tries[i] = metering.Try{Candidate: a.Candidate, Retry: a.Retry, WaitMs: a.Wait.Milliseconds(),
			Reason: string(a.Reason), Status: a.Status, DurationMs: a.Duration.Milliseconds()}
	}
	return tries
}

// unserved is a request that ended without an answer from any candidate.
type unserved struct {
	requestID string
	identity  *auth.Identity
	model     string
	op        protocols.Operation
	status    int
	outcome   string // metering.OutcomeRefused or metering.OutcomeFailed
	refusedBy string
	attempts  []relay.Attempt
	started   time.Time
}

// journalUnserved puts an unserved request in the ledger. It never waits: a refusal
// must stay cheap, so one that comes before the ledger has opened is not logged.
func (a *App) journalUnserved(u unserved) {
	if a.ledgerReady == nil {
		return
	}
	select {
	case <-a.ledgerReady:
	default:
		return
	}
	now := time.Now()
	if u.outcome == metering.OutcomeRefused && !a.refusalLog.admit(keyOf(u.identity), now) {
		return
	}
	rec := &metering.Record{
		RequestID: u.requestID, Model: u.model, Protocol: u.op.Family.Token(), Operation: u.op.Kind.String(),
		Status: u.status, Attempts: len(u.attempts), Time: now.UTC(), Outcome: u.outcome, RefusedBy: u.refusedBy,
		Tries: triesOf(u.attempts),
	}
	if !u.started.IsZero() {
		rec.LatencyMs = now.Sub(u.started).Milliseconds()
	}
	if u.identity != nil {
		rec.KeyID, rec.ProjectID = u.identity.KeyID, u.identity.ProjectID
	}
	if err := a.ledger.Append(rec); err != nil {
		a.logger.Error("request log record could not be journaled", zap.String("request_id", u.requestID), zap.Error(err))
	}
}

func keyOf(id *auth.Identity) string {
	if id == nil {
		return ""
	}
	return id.KeyID
}

// refusalsLoggedPerSecond is how many refusals of one key a second the request log keeps.
// A client hammering its limit would otherwise turn each refused request, which costs the
// gateway next to nothing, into a journal write and a database row: the log shows that it
// was refused, not every time.
const refusalsLoggedPerSecond = 10

// refusalSampler counts each key's logged refusals in the current second. Its map holds
// the keys refused in that second only, all of them authenticated, so it stays small.
type refusalSampler struct {
	mu     sync.Mutex
	second int64
	counts map[string]int
}

// admit reports whether key's refusal at now is logged, counting it if so. A nil sampler
// (an app not provisioned) admits all.
func (s *refusalSampler) admit(key string, now time.Time) bool {
	if s == nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sec := now.Unix(); sec != s.second || s.counts == nil {
		s.second, s.counts = sec, map[string]int{}
	}
	if s.counts[key] >= refusalsLoggedPerSecond {
		return false
	}
	s.counts[key]++
	return true
}
