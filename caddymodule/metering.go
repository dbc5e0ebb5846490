package caddymodule

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/metering"
	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/relay"
)

// ledgerPool shares one usage ledger (its journal and background writer) between the
// configurations that use the same journal directory; the last one to go flushes it.
var ledgerPool = caddy.NewUsagePool()

type sharedLedger struct{ *metering.Ledger }

func (s sharedLedger) Destruct() error { return s.Close() }

// journalDir is where this gateway keeps its usage journal: beside the SQLite file, or in
// Caddy's data directory.
func (a *App) journalDir(driver, dsn string) string {
	if a.Journal != "" {
		return a.Journal
	}
	if driver == "sqlite" {
		return filepath.Join(filepath.Dir(dsn), "journal")
	}
	return filepath.Join(caddy.AppDataDir(), "switchyard", "journal")
}

// openLedger joins (or opens) the usage ledger over the configured store.
func (a *App) openLedger(ctx context.Context, dir string, sink metering.Sink) error {
	logger := a.logger
	shared, _, err := ledgerPool.LoadOrNew(dir, func() (caddy.Destructor, error) {
		l, err := metering.OpenLedger(ctx, dir, sink, metering.Options{
			OnError: func(what string, err error) { logger.Warn(what, zap.Error(err)) },
		})
		if err != nil {
			return nil, fmt.Errorf("usage ledger: %v", err)
		}
		return sharedLedger{l}, nil
	})
	if err != nil {
		return err
	}
	a.ledgerKey = dir
	a.ledger = shared.(sharedLedger).Ledger
	return nil
}

// meter prices what one answer used, counts it, and puts its record in the ledger. It runs
// inside relay's Finalize hook: before the answer's last bytes reach the client.
// It returns the tokens and cost metered, which settle the request's reservation.
func (h *Proxy) meter(rt *route, identity *auth.Identity, requestID string, out *relay.Outcome) (tokens, costMicros int64) {
	keyID, projectID := "", ""
	if identity != nil {
		keyID, projectID = identity.KeyID, identity.ProjectID
	}
	rec := metering.NewRecord(metering.Answer{
		RequestID: requestID, KeyID: keyID, Model: rt.model.ID, Candidate: out.Served.Candidate.Name,
		Channel: out.Served.ChannelName(), Op: rt.op, Status: out.Status, Obs: out.Obs,
		RequestInputTokens: func() int64 { return metering.EstimateInputTokens(rt.parsed.Body) },
		Prices:             rt.model.PricesOf(out.Served.Candidate), Latency: out.Latency, TTFB: out.TimeToFirstByte, Attempts: len(out.Attempts),
		Abandoned: out.Abandoned,
	}, time.Now())
	rec.ProjectID = projectID
	rec.Tries = triesOf(out.Attempts)
	if end := out.StreamEnd(); end != "" && len(rec.Tries) > 0 {
		// The serving attempt is the last; the record stays a served (billed) one.
		rec.Tries[len(rec.Tries)-1].StreamError = end
	}
	tokens, costMicros = rec.Usage.Input+rec.Usage.Output, rec.CostMicros
	loadUsageMetrics().observe(rt.model.ID, keyID, rec.Usage, rec.CostMicros)
	if h.app.ledgerReady == nil {
		return tokens, costMicros // no store keeps usage
	}
	select {
	case <-h.app.ledgerReady:
	case <-time.After(5 * time.Second):
		h.logger.Error("usage ledger not open 5 s after the request: record not kept", zap.String("request_id", requestID))
		return tokens, costMicros
	}
	if err := h.app.ledger.Append(rec); err != nil {
		h.logger.Error("usage record could not be journaled", zap.String("request_id", requestID), zap.Error(err))
	}
	return tokens, costMicros
}

// usageMetrics count tokens and cost, process-wide like the other gateway metrics.
type usageMetrics struct {
	tokens   *prometheus.CounterVec
	cost     *prometheus.CounterVec
	toolUses *prometheus.CounterVec
}

var loadUsageMetrics = sync.OnceValue(func() *usageMetrics {
	return &usageMetrics{
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Name: "tokens_total",
			Help: "Tokens metered, by service model, key id and kind (input, cached_input, cache_write, output, reasoning).",
		}, []string{"model", "key_id", "kind"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Name: "cost_micros_total",
			Help: "Cost metered, in micro-units of the configured currency, by service model and key id.",
		}, []string{"model", "key_id"}),
		toolUses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Name: "tool_uses_total",
			Help: "Uses of server-side tools metered (web_search, web_fetch, file_search, code_interpreter, image_generation, mcp), by service model, key id and tool.",
		}, []string{"model", "key_id", "tool"}),
	}
})

func (m *usageMetrics) register(reg prometheus.Registerer) error {
	return registerCollectors(reg, m.tokens, m.cost, m.toolUses)
}

func (m *usageMetrics) observe(model, keyID string, u metering.Usage, cost int64) {
	for _, c := range []struct {
		kind string
		n    int64
	}{
		{"input", u.Input}, {"cached_input", u.CachedInput}, {"cache_write", u.CacheWrite},
		{"output", u.Output}, {"reasoning", u.Reasoning},
	} {
		if c.n > 0 {
			m.tokens.WithLabelValues(model, keyID, c.kind).Add(float64(c.n))
		}
	}
	if cost > 0 {
		m.cost.WithLabelValues(model, keyID).Add(float64(cost))
	}
	for t, n := range u.ToolUses {
		if n > 0 {
			m.toolUses.WithLabelValues(model, keyID, protocols.ServerTool(t).String()).Add(float64(n))
		}
	}
}
