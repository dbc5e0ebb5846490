package integration

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/metering"
)

// A request refused by admission is logged with its key's project, whichever phase
// refused it: a rate limit before the body is read, a budget once its worst case is
// known. Filtering the request log by the project finds them.
func TestRefusedRequestsAreLoggedWithTheirProject(t *testing.T) {
	up := newUpstream(t)
	g := startGatewayWith(t, up, pricedChat("http://"+up.hostport(), upstreamPrefix+"-c"), "")
	status, answer := g.adminCall(t, "POST", "/switchyard/projects", `{"id":"platform","limits":{"rpm":1}}`)
	require.Equal(t, http.StatusCreated, status, "%s", answer.Raw)
	status, answer = g.adminCall(t, "POST", "/switchyard/projects", `{"id":"frugal","limits":{"budget":"0.05/month"}}`)
	require.Equal(t, http.StatusCreated, status, "%s", answer.Raw)
	_, rated := g.createKey(t, `{"name":"rated","project_id":"platform"}`)
	_, frugal := g.createKey(t, `{"name":"frugal","project_id":"frugal"}`)
	chat := func(secret string) *result {
		return g.call(t, "POST", "/v1/chat/completions", `{"model":"priced-chat","max_tokens":100,"messages":[{"role":"user","content":"Hello"}]}`,
			"Authorization", "Bearer "+secret)
	}

	require.Equal(t, http.StatusOK, chat(rated).Status)
	byRate := chat(rated)
	require.Equal(t, http.StatusTooManyRequests, byRate.Status, "%s", byRate.Body)
	// Each request reserves 0.1 of the budget's 0.05: refused once its body is read.
	byBudget := chat(frugal)
	require.Equal(t, http.StatusTooManyRequests, byBudget.Status, "%s", byBudget.Body)

	for _, c := range []struct {
		r                  *result
		project, refusedBy string
		modelKnown         bool
	}{
		{byRate, "platform", "project_requests", false},
		{byBudget, "frugal", "project_budget", true},
	} {
		row := g.loggedRow(t, c.r)
		assert.Equal(t, metering.OutcomeRefused, row.Outcome)
		assert.Equal(t, c.refusedBy, row.RefusedBy)
		assert.Equal(t, c.project, row.ProjectID, "the refused request's row names its key's project")
		if c.modelKnown {
			assert.Equal(t, "priced-chat", row.Model)
		}
		inProject := g.requestLog(t, url.Values{"project": {c.project}}).Requests
		found := false
		for _, r := range inProject {
			found = found || r.RequestID == row.RequestID
		}
		assert.True(t, found, "the project's request log lists its refusal")
	}
}
