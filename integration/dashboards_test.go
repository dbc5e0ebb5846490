package integration

// The Grafana dashboard and the Prometheus rules in deploy/ name only metrics the
// gateway exports: after traffic that makes every labelled series appear (a stream, a
// failover, a retry, a refusal by a key's limit, priced answers), each switchyard_ name
// in the dashboard's queries and the rules' expressions is on the live /metrics. And
// promtool accepts the rules and passes their unit tests.

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	dashboardPath = "../deploy/grafana/switchyard.json"
	rulesDir      = "../deploy/prometheus"
	rulesPath     = rulesDir + "/switchyard-rules.yml"
)

// promQLMetricNames returns the identifiers in expr that start with switchyard_, outside
// string literals (label values such as "success" or a regex are strings).
func promQLMetricNames(expr string) []string {
	var names []string
	isStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isPart := func(c byte) bool { return isStart(c) || c >= '0' && c <= '9' }
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			i = j + 1
		case isStart(c):
			j := i
			for j < len(expr) && isPart(expr[j]) {
				j++
			}
			if word := expr[i:j]; strings.HasPrefix(word, "switchyard_") {
				names = append(names, word)
			}
			i = j
		case c >= '0' && c <= '9': // a number such as 1e6 is not an identifier
			for i < len(expr) && (isPart(expr[i]) || expr[i] == '.') {
				i++
			}
		default:
			i++
		}
	}
	return names
}

func TestPromQLMetricNames(t *testing.T) {
	assert.Equal(t, []string{"switchyard_a_bucket", "switchyard_b:rate5m"},
		promQLMetricNames(`histogram_quantile(0.95, sum by (le) (rate(switchyard_a_bucket{outcome!~"switchyard_not|x", m='switchyard_no'}[5m]))) / switchyard_b:rate5m * 1e6`))
}

// dashboardExprs are the queries of every panel and template variable of a Grafana
// dashboard, found wherever they nest.
func dashboardExprs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var doc any
	require.NoError(t, json.Unmarshal(b, &doc))
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "query" || k == "definition") {
					exprs = append(exprs, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	return exprs
}

// ruleExprs are the expr values of a Prometheus rules file, inline or block scalars.
func ruleExprs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(string(b), "\n")
	indent := func(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }
	var exprs []string
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimSpace(lines[i])
		rest, ok := strings.CutPrefix(trimmed, "expr:")
		if !ok {
			continue
		}
		rest = strings.TrimSpace(rest)
		if rest != "|" && rest != ">" && rest != "|-" && rest != ">-" {
			exprs = append(exprs, rest)
			continue
		}
		var block []string
		for i+1 < len(lines) && (strings.TrimSpace(lines[i+1]) == "" || indent(lines[i+1]) > indent(lines[i])) {
			i++
			block = append(block, lines[i])
		}
		exprs = append(exprs, strings.Join(block, "\n"))
	}
	return exprs
}

func TestDashboardAndRulesNameOnlyExportedMetrics(t *testing.T) {
	dashboard := dashboardExprs(t, dashboardPath)
	rules := ruleExprs(t, rulesPath)
	require.GreaterOrEqual(t, len(dashboard), 15, "the dashboard's queries were found")
	require.GreaterOrEqual(t, len(rules), 7, "the rules' expressions were found")

	up := newUpstream(t)
	a := "http://" + up.hostport() + "/v1"
	const rpmKey = "sk-dash-rpm-key-0123456789abc"
	models := "" +
		// One try fails with a 500, the retry answers: a retry and its wait.
		"\t\tmodel dash-retry {\n\t\t\tprice input 2 output 8\n" + candidate("flaky", "family_a", a, upstreamPrefix+"-dash+fail-500+first-1") + "\t\t}\n" +
		// The first candidate refuses connections: a failover to the second.
		"\t\tmodel dash-failover {\n\t\t\tprice input 2 output 8\n" +
		candidate("refused", "family_a", "http://127.0.0.1:1/v1", upstreamPrefix+"-dead", "priority 1") +
		candidate("good", "family_a", a, upstreamPrefix+"-dash-good", "priority 2") + "\t\t}\n"
	g := startGatewayWith(t, up, models, "\t\tkey dash-rpm "+rpmKey+" {\n\t\t\trpm 1\n\t\t}\n")

	chat := func(model string, stream bool, key string) int {
		body := `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`
		if stream {
			body = `{"model":"` + model + `","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
		}
		return g.call(t, "POST", "/v1/chat/completions", body, "Authorization", "Bearer "+key).Status
	}
	require.Equal(t, 200, chat("dash-retry", false, testKey))
	require.Equal(t, 200, chat("dash-failover", true, testKey))
	require.Equal(t, 200, chat("dash-failover", false, rpmKey))
	require.Equal(t, 429, chat("dash-failover", false, rpmKey), "the key's second request in a minute is refused by its limit")

	series, _ := g.scrapeMetrics(t)
	exported := map[string]bool{}
	for s := range series {
		name, _, _ := strings.Cut(s, "{")
		exported[name] = true
	}
	check := func(where string, exprs []string) {
		used := map[string]bool{}
		for _, e := range exprs {
			for _, n := range promQLMetricNames(e) {
				used[n] = true
			}
		}
		var missing []string
		for n := range used {
			if !exported[n] {
				missing = append(missing, n)
			}
		}
		sort.Strings(missing)
		assert.Empty(t, missing, "%s names metrics the gateway does not export", where)
		t.Logf("%s uses %d metric names", where, len(used))
	}
	check(dashboardPath, dashboard)
	check(rulesPath, rules)
}

// promtool (Debian's prometheus package) accepts the rules and passes their unit tests.
// Skipped when promtool is missing, except under CI=true, where .ci/run installs it.
func TestPrometheusRulesPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is not on PATH, but CI (.ci/run) installs it: the rules must be checked in CI")
		}
		t.Skip("skipping: promtool is not on PATH (apt-get install prometheus)")
	}
	files, err := filepath.Glob(filepath.Join(rulesDir, "*-rules.yml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	out, err := exec.Command(promtool, append([]string{"check", "rules"}, files...)...).CombinedOutput()
	assert.NoError(t, err, "promtool check rules:\n%s", out)
	tests, err := filepath.Glob(filepath.Join(rulesDir, "*-rules.test.yml"))
	require.NoError(t, err)
	require.NotEmpty(t, tests)
	cmd := exec.Command(promtool, append([]string{"test", "rules"}, filepath.Base(tests[0]))...)
	cmd.Dir = rulesDir // the test file names its rule file relative to itself
	out, err = cmd.CombinedOutput()
	assert.NoError(t, err, "promtool test rules:\n%s", out)
}
