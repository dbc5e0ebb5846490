package console_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/console"
)

func TestAlertsRoute(t *testing.T) {
	// Without alerts configured: an empty, well-formed answer the page can show.
	rec := do(newAPI(t, ""), "GET", "/api/alerts", "")
	assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.False(t, gjson.Get(rec.Body.String(), "configured").Bool())
	assert.True(t, gjson.Get(rec.Body.String(), "deliveries").IsArray())

	// A store that does not answer: 503, and no error text (it may name the database).
	api := &console.API{Alerts: func(context.Context, int) (*console.AlertsView, error) {
		return nil, errors.New("dial tcp db.internal:5432: refused")
	}}
	rec = do(console.New(api), "GET", "/api/alerts", "")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.NotContains(t, rec.Body.String(), "db.internal")

	var limit int
	api.Alerts = func(_ context.Context, n int) (*console.AlertsView, error) {
		limit = n
		return &console.AlertsView{Configured: true, Webhooks: []console.AlertWebhook{{Endpoint: "https://h.example"}}}, nil
	}
	rec = do(console.New(api), "GET", "/api/alerts", "")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, 50, limit, "the latest 50")
	assert.Equal(t, "https://h.example", gjson.Get(rec.Body.String(), "webhooks.0.endpoint").String())
}
