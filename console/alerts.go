package console

import (
	"context"
	"net/http"
	"time"
)

// AlertsView is what GET /alerts answers: the configured webhooks (their scheme and
// host only: a URL's path may hold a token, and a secret is never shown) and the latest
// deliveries with their state.
type AlertsView struct {
	Configured       bool            `json:"configured"`
	Webhooks         []AlertWebhook  `json:"webhooks"`
	BudgetThresholds []int           `json:"budget_thresholds"`
	LedgerAfter      string          `json:"ledger_after,omitempty"`
	Deliveries       []AlertDelivery `json:"deliveries"`
}

// AlertWebhook is one configured receiver.
type AlertWebhook struct {
	ID       string   `json:"id"`
	Endpoint string   `json:"endpoint"` // scheme://host
	Format   string   `json:"format"`
	Events   []string `json:"events"`
}

// AlertDelivery is one event for one webhook, as the outbox holds it.
type AlertDelivery struct {
	ID        int64      `json:"id"`
	Webhook   string     `json:"webhook"` // the webhook's endpoint, or its id when no longer configured
	Kind      string     `json:"kind"`
	Text      string     `json:"text"`
	State     string     `json:"state"` // pending, sent or failed
	Attempts  int        `json:"attempts"`
	CreatedAt time.Time  `json:"created_at"`
	NextAt    *time.Time `json:"next_at,omitempty"` // while pending
	SentAt    *time.Time `json:"sent_at,omitempty"`
	LastError string     `json:"last_error,omitempty"`
}

// maxAlertDeliveries bounds GET /alerts' list.
const maxAlertDeliveries = 50

func (a *API) listAlerts(w http.ResponseWriter, r *http.Request) {
	if a.Alerts == nil {
		writeJSON(w, http.StatusOK, AlertsView{Webhooks: []AlertWebhook{}, BudgetThresholds: []int{}, Deliveries: []AlertDelivery{}})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	v, err := a.Alerts(ctx, maxAlertDeliveries)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "the alerts' outbox could not be read: the store does not answer")
		return
	}
	writeJSON(w, http.StatusOK, v)
}
