package caddymodule

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Readiness fails until the ledger is open (requests would wait for it), is ready then,
// and fails again once the app's stop has begun, even before Caddy's http app announces
// its own.
func TestReadinessFollowsTheLedgerAndTheStop(t *testing.T) {
	app := &App{ledgerReady: make(chan struct{}), inFlight: newInFlight()}
	ready := &Ready{app: app}
	probe := func() (int, string) {
		w := httptest.NewRecorder()
		_ = ready.ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil), nil)
		return w.Code, w.Body.String()
	}

	code, body := probe()
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.JSONEq(t, `{"status":"starting"}`, body)

	close(app.ledgerReady)
	code, body = probe()
	assert.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"status":"ready"}`, body)

	_ = app.Stop()
	code, body = probe()
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.JSONEq(t, `{"status":"stopping"}`, body)
}
