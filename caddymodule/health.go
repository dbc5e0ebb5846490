package caddymodule

import (
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/switchyard-gw/switchyard/routing"
)

// healthPool shares each candidate's live health between the configurations that
// contain it, keyed by the candidate's identity, so that a reload keeps what was learnt
// about every candidate whose upstream did not change.
var healthPool = caddy.NewUsagePool()

// HealthConfig tunes the circuit breakers.
type HealthConfig struct {
	// FailureThreshold failures within Window open a candidate's circuit. Default: 3.
	FailureThreshold int `json:"failure_threshold,omitempty"`
	// Window is how far back failures count; they fade with a half-life of a third of
	// it. Default: 30s.
	Window caddy.Duration `json:"window,omitempty"`
	// Cooldown is how long a circuit stays open after its first trip; it doubles with
	// each consecutive trip, up to MaxCooldown. Default: 5s.
	Cooldown caddy.Duration `json:"cooldown,omitempty"`
	// MaxCooldown caps the doubling cooldown, and the pause an upstream's Retry-After
	// can ask for (a longer one is read as MaxCooldown). Default: 5m.
	MaxCooldown caddy.Duration `json:"max_cooldown,omitempty"`
	// HalfOpenProbes is how many live requests may probe a recovering candidate at once.
	// Default: 1.
	HalfOpenProbes int `json:"half_open_probes,omitempty"`
	// Probe is how a candidate whose generation circuit failures opened (sub-operations
	// such as token counts are left to live requests) is found to have recovered:
	// "models" probes it in the background (GET {url}/models for family_a, GET
	// {url}/v1/models for family_b, with its credential) and only a passing probe closes
	// the circuit, so no client request pays for a failed probe; "off" leaves it to a
	// live request once the cooldown is over. A candidate that answers the probe with 404
	// or 405 is left to live requests. A pause the upstream asked for (Retry-After, at
	// most MaxCooldown) is not probed before it ends, and is probed as it ends.
	// Default: "models".
	Probe string `json:"probe,omitempty"`
	// ProbeInterval is how long after the circuit opens the first probe is sent; each
	// failed probe doubles the wait, up to ProbeMaxInterval, which bounds how long a
	// recovered candidate stays unused. Defaults: 1s and 5s.
	ProbeInterval    caddy.Duration `json:"probe_interval,omitempty"`
	ProbeMaxInterval caddy.Duration `json:"probe_max_interval,omitempty"`
}

// Probe kinds.
const (
	probeModels = "models"
	probeOff    = "off"
)

// probing reports whether candidates are probed in the background.
func (h *HealthConfig) probing() bool { return h == nil || h.Probe != probeOff }

func (h *HealthConfig) policy() routing.HealthPolicy {
	if h == nil {
		h = &HealthConfig{}
	}
	p := routing.HealthPolicy{
		FailureThreshold: h.FailureThreshold,
		Window:           time.Duration(h.Window),
		Cooldown:         time.Duration(h.Cooldown),
		MaxCooldown:      time.Duration(h.MaxCooldown),
		HalfOpenProbes:   h.HalfOpenProbes,
	}
	if h.probing() {
		p.ProbeInterval, p.ProbeMaxInterval = routing.DefaultProbeInterval, time.Duration(h.ProbeMaxInterval)
		if h.ProbeInterval > 0 {
			p.ProbeInterval = time.Duration(h.ProbeInterval)
		}
	}
	return p.WithDefaults()
}

// validate checks what the JSON may hold that the policy would otherwise quietly mend.
func (h *HealthConfig) validate() error {
	if h == nil {
		return nil
	}
	switch h.Probe {
	case "", probeModels, probeOff:
	default:
		return fmt.Errorf("health: probe: %q is not a probe kind (models, off)", h.Probe)
	}
	if h.ProbeInterval < 0 || h.ProbeMaxInterval < 0 {
		return fmt.Errorf("health: probe_interval and probe_max_interval must be positive durations")
	}
	interval := time.Duration(h.ProbeInterval)
	if interval == 0 {
		interval = routing.DefaultProbeInterval
	}
	if h.ProbeMaxInterval > 0 && time.Duration(h.ProbeMaxInterval) < interval {
		return fmt.Errorf("health: probe_max_interval %s is shorter than probe_interval %s", time.Duration(h.ProbeMaxInterval), interval)
	}
	return nil
}

// Validate implements caddy.Validator: it runs once the app is provisioned.
func (a *App) Validate() error { return a.Health.validate() }

// candidateHealth is one row of GET /switchyard/health: operator-facing names only,
// never an upstream host, model name or credential.
type candidateHealth struct {
	Model     string `json:"model"`
	Candidate string `json:"candidate"`
	Protocol  string `json:"protocol"`
	Priority  int    `json:"priority"`
	routing.Snapshot
}

// resetHealth clears the live health (generation and sub-operations) of every candidate
// of the model with that name, on each protocol it serves; it reports whether there was
// one. Health is shared across reloads, so the configuration that replaces this one
// keeps the reset; each gateway keeps its own.
func (a *App) resetHealth(model, candidate string) bool {
	m, ok := a.catalog.Lookup(model)
	if !ok {
		return false
	}
	now, found := time.Now(), false
	for _, c := range m.Candidates {
		if c.Name != candidate {
			continue
		}
		up := a.upstreams[c]
		up.Health.Reset(now)
		up.SubHealth.Reset(now)
		found = true
	}
	if found {
		a.logger.Info("candidate health reset by an operator: it takes traffic again",
			zap.String("model", model), zap.String("candidate", candidate))
	}
	return found
}

func (a *App) healthRows(now time.Time) []candidateHealth {
	var rows []candidateHealth
	for _, m := range a.catalog.Models() {
		for _, c := range m.Candidates {
			rows = append(rows, candidateHealth{
				Model: m.ID, Candidate: c.Name, Protocol: c.Protocol.Token(), Priority: c.Priority,
				Snapshot: a.upstreams[c].Health.Snapshot(now),
			})
		}
	}
	return rows
}
