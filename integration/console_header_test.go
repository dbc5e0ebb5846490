package integration

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// The console mounted as docs/security.md shows refuses a change that lacks its header, even
// with the operator's login: a page on another site can make the operator's browser send
// the login, never the header. (The console package's tests cover every route; this one
// proves the gateway's console requires the header at all.)
func TestConsoleRefusesChangesWithoutItsHeader(t *testing.T) {
	g, _ := startConsoleGateway(t, newUpstream(t))
	login := []string{"Authorization", basicAuth(consoleUser, consolePassword)}
	withHeader := append([]string{"X-Switchyard-Console", "1"}, login...)

	for _, c := range []struct{ path, body string }{
		{"/console/api/projects", `{"id":"forged","limits":{"budget":"1000/month"}}`},
		{"/console/api/keys", `{"name":"forged"}`},
	} {
		res := g.call(t, "POST", c.path, c.body, login...)
		assert.Equal(t, http.StatusForbidden, res.Status, "POST %s without the header: %s", c.path, res.Body)
	}
	for path, list := range map[string]string{"/console/api/projects": "projects", "/console/api/keys": "keys", "/console/api/audit": "entries"} {
		res := g.call(t, "GET", path, "", login...)
		require.Equal(t, http.StatusOK, res.Status, "%s", res.Body)
		require.True(t, gjson.GetBytes(res.Body, list).IsArray(), "%s", res.Body)
		assert.Empty(t, gjson.GetBytes(res.Body, list).Array(), "GET %s: nothing was made", path)
	}

	res := g.call(t, "POST", "/console/api/keys", `{"name":"real"}`, withHeader...)
	assert.Equal(t, http.StatusCreated, res.Status, "with the header: %s", res.Body)
}
