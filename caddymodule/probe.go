package caddymodule

import (
	"time"

	"go.uber.org/zap"

	"github.com/switchyard-gw/switchyard/routing"
)

// probeTick is how often the prober looks for a probe that has fallen due: a quarter of
// the probe interval, so a probe is late by at most that, but no more often than every
// 10ms nor less than every 250ms. A look costs a lock and a compare per candidate.
func probeTick(interval time.Duration) time.Duration {
	return min(max(interval/4, 10*time.Millisecond), 250*time.Millisecond)
}

// startProbes starts this configuration's prober for the generation health of each
// candidate (sub-operation health is left to live requests). Health is shared across
// reloads, so while an old and a new configuration overlap both probers look at it; a
// probe is claimed on the shared health first, so a candidate is still probed once at a
// time and on one schedule.
func (a *App) startProbes() {
	if !a.Health.probing() {
		return
	}
	metrics := loadMetrics()
	var targets []routing.ProbeTarget
	for _, m := range a.catalog.Models() {
		for _, c := range m.Candidates {
			up := a.upstreams[c]
			if up.ChannelName() != "api" {
				// A cloud channel has no model list a probe could read with its
				// credential: its circuit is left to live half-open probes.
				continue
			}
			model, name := m.ID, c.Name
			targets = append(targets, routing.ProbeTarget{
				Health: up.Health,
				Probe:  up.Probe,
				Done: func(out routing.ProbeOutcome) {
					metrics.probes.WithLabelValues(model, name, out.Result.String()).Inc()
					// Names only: a log line never carries an upstream's address or credential.
					switch out.Result {
					case routing.ProbePass:
						a.logger.Info("candidate recovered: a health probe passed and its circuit closed",
							zap.String("model", model), zap.String("candidate", name))
					case routing.ProbeNotOffered:
						// Once per candidate: it is not probed again.
						a.logger.Warn("candidate has no model list to probe (404 or 405); live requests will probe it after its cooldown instead",
							zap.String("model", model), zap.String("candidate", name))
					}
				},
			})
		}
	}
	a.prober = routing.StartProber(targets, probeTick(a.Health.policy().ProbeInterval))
}

// stopProbes cancels the probes under way and waits for the prober to end, so that a
// reload or shutdown leaves no goroutine behind.
func (a *App) stopProbes() {
	if a.prober != nil {
		a.prober.Stop()
		a.prober = nil
	}
}
