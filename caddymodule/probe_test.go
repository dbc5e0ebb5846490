package caddymodule

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/routing"
)

func TestHealthConfigValidation(t *testing.T) {
	for name, c := range map[string]HealthConfig{
		"unknown kind":      {Probe: "generate"},
		"negative interval": {ProbeInterval: caddy.Duration(-time.Second)},
		"negative cap":      {ProbeMaxInterval: caddy.Duration(-time.Second)},
		"cap below":         {ProbeInterval: caddy.Duration(3 * time.Second), ProbeMaxInterval: caddy.Duration(2 * time.Second)},
		"cap below default": {ProbeMaxInterval: caddy.Duration(500 * time.Millisecond)},
	} {
		assert.Error(t, (&App{Health: &c}).Validate(), name)
	}
	for name, c := range map[string]*HealthConfig{
		"none":          nil,
		"off":           {Probe: "off"},
		"models":        {Probe: "models", ProbeInterval: caddy.Duration(2 * time.Second), ProbeMaxInterval: caddy.Duration(2 * time.Second)},
		"interval only": {ProbeInterval: caddy.Duration(30 * time.Second)},
	} {
		assert.NoError(t, (&App{Health: c}).Validate(), name)
	}

	// What the circuits are told.
	var none *HealthConfig
	assert.True(t, none.probing(), "a configuration without a health block starts a prober")
	assert.Equal(t, routing.DefaultProbeInterval, none.policy().ProbeInterval, "on by default")
	assert.Equal(t, routing.DefaultProbeMaxInterval, none.policy().ProbeMaxInterval)
	off := &HealthConfig{Probe: "off", ProbeInterval: caddy.Duration(time.Second)}
	assert.Zero(t, off.policy().ProbeInterval, "off: live requests probe after the cooldown")
	long := &HealthConfig{ProbeInterval: caddy.Duration(30 * time.Second)}
	assert.Equal(t, 30*time.Second, long.policy().ProbeMaxInterval, "a cap is never below the interval")
}

// The app probes a candidate whose circuit is open, counts the result, and at Stop
// cancels a probe under way and waits for it: nothing outlives the configuration.
func TestAppProbesOpenCircuitsAndStopsCleanly(t *testing.T) {
	var probes atomic.Int64
	var answer atomic.Bool // false: probes hang until cancelled
	arrived := make(chan struct{}, 16)
	cancelled := make(chan struct{}, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/models" {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		probes.Add(1)
		arrived <- struct{}{}
		if answer.Load() {
			_, _ = w.Write([]byte(`{"data":[]}`))
			return
		}
		<-r.Context().Done()
		cancelled <- struct{}{}
	}))
	defer srv.Close()

	app := &App{
		Store:  &StoreConfig{Driver: "off"},
		Health: &HealthConfig{ProbeInterval: caddy.Duration(50 * time.Millisecond)},
		Models: []ModelConfig{{ID: "probed", Candidates: []CandidateConfig{
			{Name: "down", Protocol: "family_a", URL: srv.URL + "/v1", UpstreamModel: "up"},
			{Name: "fine", Protocol: "family_a", URL: srv.URL + "/v1", UpstreamModel: "up-fine"},
		}}},
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	require.NoError(t, app.Provision(ctx))
	defer func() { _ = app.Cleanup() }()
	require.NoError(t, app.Validate())

	m := app.catalog.Models()[0]
	down := app.upstreams[m.Candidates[0]].Health
	downSub := app.upstreams[m.Candidates[0]].SubHealth
	trip := func(h *routing.Health) {
		now := time.Now()
		for range 3 {
			h.RecordFailure(routing.Admitted, routing.ReasonStatus, 0, now)
		}
	}

	waitFor := func(t *testing.T, ch chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s", what)
		}
	}
	passes := func() float64 {
		var v dto.Metric
		require.NoError(t, loadMetrics().probes.WithLabelValues("probed", "down", "pass").Write(&v))
		return v.GetCounter().GetValue()
	}
	before := passes()

	// A first probe that answers: the circuit closes and the pass is counted.
	answer.Store(true)
	require.NoError(t, app.Start())
	trip(downSub)
	trip(down)
	require.True(t, down.Snapshot(time.Now()).Probing)
	assert.False(t, downSub.Snapshot(time.Now()).Probing, "sub-operations are left to live requests")
	waitFor(t, arrived, "a probe of the open circuit")
	require.Eventually(t, func() bool { return down.State(time.Now()) == routing.Closed }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, before+1, passes())
	require.NoError(t, app.Stop())
	assert.Equal(t, int64(1), probes.Load(), "the healthy candidate was never probed")

	// A probe that hangs is cancelled by Stop, which waits for it.
	answer.Store(false)
	require.NoError(t, app.Start())
	trip(down)
	waitFor(t, arrived, "a probe of the open circuit")
	stopped := make(chan struct{})
	go func() { _ = app.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not end the probe under way")
	}
	select {
	case <-cancelled: // the upstream sees the connection go
	case <-time.After(5 * time.Second):
		t.Fatal("the probe under way was not cancelled")
	}
	assert.Equal(t, routing.Open, down.State(time.Now()), "a cancelled probe is no result")
	assert.Equal(t, before+1, passes())
}
