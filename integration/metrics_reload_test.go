package integration

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// circuitSeries lists the switchyard_circuit_state series /metrics serves, sorted.
func circuitSeries(t *testing.T, g *gateway) []string {
	t.Helper()
	all, _ := g.scrapeMetrics(t)
	var out []string
	for series := range all {
		if strings.HasPrefix(series, "switchyard_circuit_state{") {
			out = append(out, series)
		}
	}
	slices.Sort(out)
	return out
}

// The circuit metrics belong to the configuration in force: after a reload /metrics
// shows one set of circuit series, the new configuration's candidates, and none of the
// old one's (whose collector would otherwise linger, or the reload fail on a duplicate
// registration).
func TestAReloadLeavesOneCircuitSeriesSetForTheNewCandidates(t *testing.T) {
	up := newUpstream(t)
	url := "http://" + up.hostport() + "/v1"
	before := "\t\tmodel before-reload {\n" + candidate("old-cand", "family_a", url, "up") + "\t\t}\n"
	g := startGatewayWith(t, up, before, "")
	require.Equal(t, []string{`switchyard_circuit_state{candidate="old-cand",model="before-reload"}`}, circuitSeries(t, g))

	after := "\t\tmodel after-reload {\n" + candidate("new-a", "family_a", url, "up") +
		candidate("new-b", "family_a", url, "up") + "\t\t}\n"
	g.reload(t, strings.Replace(g.caddyfile, before, after, 1))
	assert.Equal(t, []string{
		`switchyard_circuit_state{candidate="new-a",model="after-reload"}`,
		`switchyard_circuit_state{candidate="new-b",model="after-reload"}`,
	}, circuitSeries(t, g))
}
