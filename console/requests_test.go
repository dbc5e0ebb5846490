package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/switchyard-gw/switchyard/console"
	"github.com/switchyard-gw/switchyard/metering"
)

// seenQuery is a request log that remembers the query it was asked.
type seenQuery struct{ q *metering.RequestQuery }

func (s seenQuery) ListRequests(_ context.Context, q metering.RequestQuery) (metering.RequestPage, error) {
	*s.q = q
	if q.After == "bad" {
		return metering.RequestPage{}, metering.ErrBadCursor
	}
	return metering.RequestPage{}, nil
}

// The filters reach the request log as given; what is not a filter is refused with a
// reason, before the store is asked.
func TestRequestLogQueryFilters(t *testing.T) {
	var got metering.RequestQuery
	h := console.New(&console.API{Requests: seenQuery{&got}})
	w := do(h, "GET", "/api/requests?key=k1&project=p&model=m&candidate=c&status=429&since=2026-11-25T14:00:00Z&until=2026-11-25T15:00:00Z&limit=20&cursor=abc", "")
	assert.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.JSONEq(t, `{"requests":[]}`, w.Body.String())
	assert.Equal(t, metering.RequestQuery{KeyID: "k1", ProjectID: "p", Model: "m", Candidate: "c", Status: 429,
		Since: time.Date(2026, 11, 25, 14, 0, 0, 0, time.UTC), Until: time.Date(2026, 11, 25, 15, 0, 0, 0, time.UTC),
		Limit: 20, After: "abc"}, got)

	for query, reason := range map[string]string{
		"status=abc":                        "status",
		"status=99":                         "status",
		"since=yesterday":                   "since",
		"limit=0":                           "limit",
		"limit=501":                         "limit",
		"model=" + strings.Repeat("m", 300): "model",
		"cursor=bad":                        "cursor",
	} {
		w := do(h, "GET", "/api/requests?"+query, "")
		assert.Equal(t, http.StatusBadRequest, w.Code, query)
		assert.Contains(t, w.Body.String(), reason, query)
	}
	w = do(console.New(&console.API{}), "GET", "/api/requests", "")
	assert.Equal(t, http.StatusServiceUnavailable, w.Code, "without a store there is no log")
}
