package integration

// The web console end to end, in a real browser: headless Chromium (Debian's package),
// driven by playwright-core from console/console.mjs, creates a key in the page, the
// key is used on the gateway, the page revokes it, and the next call gets 401. Along
// the way it checks what an operator relies on: the secret is shown once and is gone
// from the page once dismissed or reloaded, errors from the API reach the page, and the
// page runs under its Content-Security-Policy without a single violation.
//
// Then usage: a key made in the page is used on two models, and once the ledger has
// stored the calls the Usage section must show what the usage API answers, to the token
// and to the micro-unit of cost, beside a few weeks of history written straight into the
// store so that the charts have days to draw.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/metering"
	"github.com/switchyard-gw/switchyard/simulator"
	"github.com/switchyard-gw/switchyard/store"
)

// The console's basic-auth login. The hash is bcrypt at its lowest cost: Caddy checks
// it on every request the page makes, and this password protects nothing.
const (
	consoleUser         = "operator"
	consolePassword     = "console-test-password-7f3a"
	consolePasswordHash = "$2a$04$YAlfUoIeYOZ40OMCsLV7Ce8nyqNW2RCqrKWEdrE/dUQZcGxGCerwe"
	chromiumPath        = "/usr/bin/chromium"
)

// consoleReport is what console.mjs prints. Each "traces" list names the places in the
// page where a secret was found (html, text, field:…, selection, storage, url, history).
// browserReport is what every console script reports besides its own findings.
type browserReport struct {
	Failed        string   `json:"failed"`
	Screenshots   []string `json:"screenshots"`
	PageErrors    []string `json:"page_errors"`
	ConsoleErrors []string `json:"console_errors"`
	PageStatus    int      `json:"page_status"`
}

// runBrowserScript runs one of the console's Playwright scripts (integration/console/)
// in Chromium against g's console, with the console's address, credentials, Chromium
// and an output directory in its environment besides env, decodes the JSON report it
// prints into report, and checks that the run got to its end.
func runBrowserScript(t *testing.T, node, script string, g *gateway, timeout time.Duration, report interface{ base() *browserReport }, env ...string) {
	t.Helper()
	outDir := t.TempDir()
	if dir := os.Getenv("SY_CONSOLE_SCREENSHOTS"); dir != "" {
		outDir = dir // keep the screenshots past the test
		require.NoError(t, os.MkdirAll(outDir, 0o755))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("console", script))
	cmd.Env = append(append(os.Environ(),
		"SY_CONSOLE_URL="+g.base+"/console/", "SY_CONSOLE_USER="+consoleUser, "SY_CONSOLE_PASSWORD="+consolePassword,
		"SY_OUT_DIR="+outDir, "SY_CHROMIUM="+chromiumPath), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	t.Logf("%s:\n%s", script, stderr.String())
	require.NoError(t, json.Unmarshal(stdout.Bytes(), report), "%s printed no report (%v):\n%s", script, runErr, stdout.String())
	require.NoError(t, os.WriteFile(filepath.Join(outDir, strings.TrimSuffix(script, ".mjs")+"-report.json"), stdout.Bytes(), 0o644))
	for _, shot := range report.base().Screenshots {
		t.Logf("screenshot: %s", shot)
	}
	require.Empty(t, report.base().Failed, "the browser run stopped")
	require.NoError(t, runErr, script)
}

func (r *browserReport) base() *browserReport { return r }

type consoleReport struct {
	browserReport
	UnauthenticatedStatus int      `json:"unauthenticated_status"`
	CSP                   string   `json:"csp"`
	Title                 string   `json:"title"`
	Unlabelled            []string `json:"unlabelled"`
	ModelsSection         []struct {
		ID           string   `json:"id"`
		Protocols    []string `json:"protocols"`
		Capabilities []string `json:"capabilities"`
		Candidates   []struct {
			Name     string `json:"name"`
			State    string `json:"state"`
			Shown    string `json:"shown"`
			Priority int    `json:"priority"`
		} `json:"candidates"`
	} `json:"models_section"`
	EmptyNameError string `json:"empty_name_error"`
	ServerError    string `json:"server_error"`
	KeyName        string `json:"key_name"`
	Secret         string `json:"secret"`
	SecretTitle    string `json:"secret_title"`
	SecretNote     string `json:"secret_note"`
	CreatedRow     struct {
		Name        string `json:"name"`
		Prefix      string `json:"prefix"`
		Status      string `json:"status"`
		StatusShown string `json:"status_shown"`
		Models      string `json:"models"`
		Expires     string `json:"expires"`
	} `json:"created_row"`
	FormCleared        bool         `json:"form_cleared"`
	CopyStatus         string       `json:"copy_status"`
	ClipboardMatches   bool         `json:"clipboard_matches"`
	TracesWhileShown   []string     `json:"secret_traces_while_shown"`
	BeforeRevoke       gatewayCalls `json:"before_revoke"`
	TracesAfterDismiss []string     `json:"secret_traces_after_dismiss"`
	RevokeDialogText   string       `json:"revoke_dialog_text"`
	StatusAfterCancel  string       `json:"status_after_cancel"`
	RevokedRow         struct {
		StatusShown string `json:"status_shown"`
		Actions     int    `json:"actions"`
	} `json:"revoked_row"`
	StatusMessage string       `json:"status_message"`
	AfterRevoke   gatewayCalls `json:"after_revoke"`
	Rotate        struct {
		Distinct           bool     `json:"distinct"`
		KeptEarlier        bool     `json:"kept_earlier"`
		LeftAfterOne       bool     `json:"left_after_one_dismiss"`
		Title              string   `json:"title"`
		Extra              string   `json:"extra"`
		OldStatus          string   `json:"old_status"`
		NewStatus          string   `json:"new_status"`
		OldCall            int      `json:"old_call"`
		NewCall            int      `json:"new_call"`
		TracesAfterDismiss []string `json:"traces_after_dismiss"`
	} `json:"rotate"`
	TracesAfterReload    []string `json:"secret_traces_after_reload"`
	SecretBoxAfterReload int      `json:"secret_box_after_reload"`
	StatusAfterReload    string   `json:"status_after_reload"`
	Usage                struct {
		KeyID        string     `json:"key_id"`
		UnusedKeyID  string     `json:"unused_key_id"`
		CallStatuses []int      `json:"call_statuses"`
		All          usageShown `json:"all"`
		APIAll       struct {
			ByModel usageAnswer `json:"by_model"`
			ByDay   usageAnswer `json:"by_day"`
		} `json:"api_all"`
		ByKind usageShown  `json:"by_kind"`
		Key    usageShown  `json:"key"`
		APIKey usageAnswer `json:"api_key"`
		Model  usageShown  `json:"model"`
		Unused usageShown  `json:"unused"`
	} `json:"usage"`
}

// usageRow is one row of the usage API, or of the Usage section's table read back from
// its cells' data-value attributes (CostText is then the cost as written).
type usageRow struct {
	Day         string `json:"day"`
	Model       string `json:"model"`
	Candidate   string `json:"candidate"`
	Channel     string `json:"channel"`
	Requests    int64  `json:"requests"`
	Input       int64  `json:"input"`
	CachedInput int64  `json:"cached_input"`
	Output      int64  `json:"output"`
	Reasoning   int64  `json:"reasoning"`
	CostMicros  int64  `json:"cost_micros"`
	Estimated   int64  `json:"estimated"`
	CostText    string `json:"cost_text"`
}

type usageAnswer struct {
	From  string     `json:"from"`
	To    string     `json:"to"`
	Rows  []usageRow `json:"rows"`
	Total usageRow   `json:"total"`
}

// usageChart is one SVG chart of the Usage section.
type usageChart struct {
	Role  string `json:"role"`
	Label string `json:"label"`
	Days  []struct {
		Day    string   `json:"day"`
		Total  int64    `json:"total"`
		Title  string   `json:"title"`
		Series []string `json:"series"`
	} `json:"days"`
	YTicks []string `json:"y_ticks"`
	XTicks []string `json:"x_ticks"`
}

// usageShown is what the Usage section showed at one moment.
type usageShown struct {
	State         string      `json:"state"`
	From          string      `json:"from"`
	To            string      `json:"to"`
	Summary       string      `json:"summary"`
	Note          string      `json:"note"`
	Empty         string      `json:"empty"`
	ChartsVisible bool        `json:"charts_visible"`
	TableVisible  bool        `json:"table_visible"`
	StatCost      string      `json:"stat_cost"`
	StatRequests  string      `json:"stat_requests"`
	Models        []usageRow  `json:"models"`
	Supply        []usageRow  `json:"supply"`
	Total         *usageRow   `json:"total"`
	TokensChart   *usageChart `json:"tokens_chart"`
	CostChart     *usageChart `json:"cost_chart"`
	TokensLegend  []string    `json:"tokens_legend"`
	KeyOptions    []string    `json:"key_options"`
	ModelOptions  []string    `json:"model_options"`
}

// gatewayCalls are the two calls console.mjs makes with a key, as a client would.
type gatewayCalls struct {
	ModelsStatus int             `json:"models_status"`
	ModelsType   string          `json:"models_type"`
	ModelsBody   json.RawMessage `json:"models_body"`
	ChatStatus   int             `json:"chat_status"`
	ChatType     string          `json:"chat_type"`
	ChatBody     json.RawMessage `json:"chat_body"`
}

// results turns the two calls back into results for the envelope checks.
func (c gatewayCalls) results() []*result {
	return []*result{
		{Status: c.ModelsStatus, Header: http.Header{"Content-Type": {c.ModelsType}}, Body: c.ModelsBody},
		{Status: c.ChatStatus, Header: http.Header{"Content-Type": {c.ChatType}}, Body: c.ChatBody},
	}
}

// needBrowser finds node, Chromium and playwright-core, or skips when node or Chromium
// is missing (CI installs both, so there it fails instead).
func needBrowser(t *testing.T) (node string) {
	t.Helper()
	missing := func(what string) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s, but CI (.ci/run) installs it: the console's browser test must run in CI", what)
		}
		t.Skipf("skipping the console's browser test: %s. Install Node 22 or newer, and Chromium (apt-get install chromium).", what)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("Node.js (`node`) is not on PATH")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		missing("Chromium is not at " + chromiumPath)
	}
	if _, err := os.Stat(filepath.Join("node_modules", "playwright-core", "package.json")); err != nil {
		t.Fatal("playwright-core is not installed in integration/node_modules: run `npm ci --prefix integration` (make test does)")
	}
	return node
}

// startConsoleGateway runs the gateway with a SQLite store in the test's temporary
// directory and the console mounted at /console/ behind basic auth, as docs/security.md
// shows an operator to do. It returns the gateway and the database file.
func startConsoleGateway(t *testing.T, up *upstream) (*gateway, string) {
	t.Helper()
	a := "http://" + up.hostport() + "/v1"
	b := "http://" + up.hostport()
	db := filepath.Join(t.TempDir(), "keys.db")
	models := "" +
		"\t\tmodel chat-a {\n\t\t\tdisplay_name \"Chat A\"\n\t\t\tprotocols family_a\n\t\t\treasoning true\n\t\t\tcapability vision true\n" +
		"\t\t\tprice input 2.5 output 10\n" +
		candidate("main", "family_a", a, upstreamPrefix+"-a", "priority 1") +
		candidate("spare", "family_a", a, upstreamPrefix+"-a", "priority 2") + "\t\t}\n" +
		"\t\tmodel msg-b {\n\t\t\tprotocols family_b\n\t\t\tprice input 3 cached_input 0.3 output 15\n" +
		candidate("main", "family_b", b, upstreamPrefix+"-b") + "\t\t}\n"
	ports, caddyfile := startCaddy(t, 2, func(ports []int) string {
		return "{\n\tadmin 127.0.0.1:" + strconv.Itoa(ports[1]) + "\n\tdefault_bind 127.0.0.1\n" +
			"\tswitchyard {\n\t\tstore sqlite " + db + "\n" + models + "\t}\n}\n" +
			"http://127.0.0.1:" + strconv.Itoa(ports[0]) + " {\n" +
			"\thandle_path /console/* {\n\t\tbasic_auth {\n\t\t\t" + consoleUser + " " + consolePasswordHash + "\n\t\t}\n\t\tswitchyard_console\n\t}\n" +
			"\thandle {\n\t\tswitchyard_auth\n\t\tswitchyard_model\n\t\tswitchyard_proxy\n\t}\n" +
			"\thandle_errors {\n\t\tswitchyard_errors\n\t}\n}\n"
	})
	g := &gateway{
		base:      "http://127.0.0.1:" + strconv.Itoa(ports[0]),
		admin:     "http://127.0.0.1:" + strconv.Itoa(ports[1]),
		up:        up,
		caddyfile: caddyfile,
	}
	g.waitReady(t)
	return g, db
}

// historyKey is the key id of the usage written straight into the store: a key from
// the configuration, so that it is in no list of stored keys.
const historyKey = "static:history"

// seedUsageHistory writes a few weeks of usage into the store through its ledger side,
// as gateways' ledgers would have: some days used on both models, some on one, some not
// at all, one day beyond the last 30, one record partly estimated, and costs that need
// all six decimal places.
func seedUsageHistory(t *testing.T, db string) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, store.DriverSQLite, db)
	require.NoError(t, err)
	defer st.Close()
	today := time.Now().UTC().Truncate(24 * time.Hour)
	var records []metering.Record
	add := func(daysAgo int, model string, n int, u metering.Usage, cost int64) {
		for i := 0; i < n; i++ {
			records = append(records, metering.Record{
				RequestID: fmt.Sprintf("history-%d-%s-%d", daysAgo, model, i),
				KeyID:     historyKey, Model: model, Candidate: "main", Protocol: "family_a",
				Operation: "chat", Status: 200, Usage: u, CostMicros: cost, Attempts: 1,
				Time: today.AddDate(0, 0, -daysAgo).Add(time.Duration(9+i) * time.Hour),
			})
		}
	}
	chat := func(in, out int64) metering.Usage {
		return metering.Usage{Input: in, CachedInput: in / 4, Output: out, Reasoning: out / 5}
	}
	add(1, "chat-a", 3, chat(42_000, 6_100), 25_736)
	add(1, "msg-b", 2, chat(18_500, 2_400), 91_003)
	add(2, "chat-a", 5, chat(30_500, 4_000), 18_250)
	add(4, "msg-b", 4, chat(61_000, 9_900), 120_001)
	add(6, "chat-a", 2, chat(12_000, 800), 6_080)
	add(6, "msg-b", 1, metering.Usage{Input: 8_000, Output: 1_200, Estimated: true}, 42_000)
	add(9, "chat-a", 6, chat(25_000, 3_300), 15_500)
	add(13, "msg-b", 3, chat(40_000, 5_000), 97_777)
	add(20, "chat-a", 4, chat(51_000, 7_700), 33_333)
	add(20, "msg-b", 2, chat(22_000, 2_000), 69_900)
	add(27, "chat-a", 1, chat(9_000, 900), 4_567)
	add(45, "chat-a", 9, chat(99_000, 9_000), 999_999) // outside the last 30 days
	require.NoError(t, st.WriteUsage(ctx, "console-test-history", 1, records))
}

func TestConsoleInBrowser(t *testing.T) {
	node := needBrowser(t)
	g, db := startConsoleGateway(t, newUpstream(t))
	seedUsageHistory(t, db)

	var r consoleReport
	runBrowserScript(t, node, "console.mjs", g, 3*time.Minute, &r,
		"SY_GATEWAY_URL="+g.base, "SY_MODEL=chat-a", "SY_MESSAGES_MODEL=msg-b")

	t.Run("the page loads behind basic auth, under its CSP, without errors", func(t *testing.T) {
		assert.Equal(t, 401, r.UnauthenticatedStatus, "the console answered without credentials")
		assert.Equal(t, 200, r.PageStatus)
		assert.Equal(t, "Switchyard console", r.Title)
		assert.Contains(t, r.CSP, "default-src 'self'")
		assert.Empty(t, r.PageErrors, "uncaught errors in the page")
		// The one error the console may log is the 400 the script provokes on purpose
		// (a lifetime the API refuses); a CSP violation or a missing file would show here.
		for _, e := range r.ConsoleErrors {
			assert.Contains(t, e, "status of 400", "unexpected console error")
		}
		assert.Empty(t, r.Unlabelled, "form controls without a label, or buttons without a name")
	})

	t.Run("models are listed with protocols, capabilities and candidates", func(t *testing.T) {
		require.Len(t, r.ModelsSection, 2)
		chat := r.ModelsSection[0]
		assert.Equal(t, "chat-a", chat.ID)
		assert.Equal(t, []string{"Family A"}, chat.Protocols)
		assert.Equal(t, []string{"reasoning", "vision"}, chat.Capabilities)
		require.Len(t, chat.Candidates, 2)
		for i, want := range []string{"main", "spare"} {
			assert.Equal(t, want, chat.Candidates[i].Name)
			assert.Equal(t, i+1, chat.Candidates[i].Priority)
			assert.Equal(t, "closed", chat.Candidates[i].State)
			assert.Equal(t, "Closed", chat.Candidates[i].Shown)
		}
		assert.Equal(t, "msg-b", r.ModelsSection[1].ID)
		assert.Equal(t, []string{"Family B"}, r.ModelsSection[1].Protocols)
		// Candidates are named, never located: the page shows no upstream.
		raw, _ := json.Marshal(r.ModelsSection)
		assert.NotContains(t, string(raw), upstreamPrefix)
	})

	t.Run("mistakes are explained in the page", func(t *testing.T) {
		assert.Equal(t, "Give the key a name.", r.EmptyNameError)
		assert.Contains(t, r.ServerError, "expires_in: not a positive duration", "the API's own message")
	})

	t.Run("a key created in the page is shown once and works", func(t *testing.T) {
		assert.True(t, strings.HasPrefix(r.Secret, "sk-sy-") && len(r.Secret) > 40, "secret %q", r.Secret)
		assert.Contains(t, r.SecretTitle, r.KeyName)
		assert.Contains(t, r.SecretNote, "only time it is shown")
		assert.Equal(t, r.KeyName, r.CreatedRow.Name)
		assert.Equal(t, r.Secret[:12]+"…", r.CreatedRow.Prefix)
		assert.Equal(t, "active", r.CreatedRow.Status)
		assert.Equal(t, "Active", r.CreatedRow.StatusShown)
		assert.Equal(t, "chat-a", r.CreatedRow.Models, "the model ticked in the form")
		assert.Contains(t, r.CreatedRow.Expires, "in 30 days")
		assert.True(t, r.FormCleared, "the form is cleared after a create")
		assert.Equal(t, "Copied to the clipboard.", r.CopyStatus)
		assert.True(t, r.ClipboardMatches, "the Copy button put the secret on the clipboard")
		assert.Equal(t, []string{"html", "text"}, r.TracesWhileShown, "while shown, the secret is in the page and nowhere else")

		require.Equal(t, 200, r.BeforeRevoke.ModelsStatus, "GET /v1/models: %s", r.BeforeRevoke.ModelsBody)
		// The key was limited to chat-a in the form.
		ids := gjson.GetBytes(r.BeforeRevoke.ModelsBody, "data.#.id").Array()
		require.Len(t, ids, 1, "%s", r.BeforeRevoke.ModelsBody)
		assert.Equal(t, "chat-a", ids[0].Str)
		require.Equal(t, 200, r.BeforeRevoke.ChatStatus, "chat completion: %s", r.BeforeRevoke.ChatBody)
		assert.Equal(t, simulator.ReplyText, gjson.GetBytes(r.BeforeRevoke.ChatBody, "choices.0.message.content").Str)
	})

	t.Run("a dismissed secret is gone from the page, and a reload never shows it", func(t *testing.T) {
		assert.Empty(t, r.TracesAfterDismiss)
		assert.Empty(t, r.Rotate.TracesAfterDismiss)
		assert.Empty(t, r.TracesAfterReload)
		assert.Zero(t, r.SecretBoxAfterReload)
	})

	t.Run("revoked in the page, the key gets 401", func(t *testing.T) {
		assert.Contains(t, r.RevokeDialogText, r.KeyName, "the confirmation names the key")
		assert.Equal(t, "active", r.StatusAfterCancel, "cancelling the confirmation revokes nothing")
		assert.Equal(t, "Revoked", r.RevokedRow.StatusShown)
		assert.Zero(t, r.RevokedRow.Actions, "a revoked key offers no rotate or revoke")
		assert.Contains(t, r.StatusMessage, "revoked")
		assert.Equal(t, "revoked", r.StatusAfterReload)

		for _, res := range r.AfterRevoke.results() {
			e := familyA(t, res, 401, "authentication_error")
			assert.Equal(t, "invalid_api_key", e.Get("code").Str)
			assert.NotContains(t, string(res.Body), r.Secret)
		}
		// And from here too, with Go's client.
		res := g.call(t, "GET", "/v1/models", "", "Authorization", "Bearer "+r.Secret)
		familyA(t, res, 401, "authentication_error")
		assert.NotContains(t, string(res.Body), r.Secret)
	})

	t.Run("rotated in the page, the old secret stops and the new one works", func(t *testing.T) {
		assert.True(t, r.Rotate.Distinct)
		assert.True(t, r.Rotate.KeptEarlier, "a new secret does not take away one still shown")
		assert.True(t, r.Rotate.LeftAfterOne, "dismissing one secret leaves the other")
		assert.Contains(t, r.Rotate.Title, "New secret for")
		assert.Contains(t, r.Rotate.Extra, "was revoked")
		assert.Equal(t, "revoked", r.Rotate.OldStatus)
		assert.Equal(t, "active", r.Rotate.NewStatus)
		assert.Equal(t, 401, r.Rotate.OldCall)
		assert.Equal(t, 200, r.Rotate.NewCall)
	})

	t.Run("the usage section shows what the usage API counts", func(t *testing.T) {
		u := r.Usage
		assert.Equal(t, []int{200, 200, 200}, u.CallStatuses, "the calls made with the usage key")

		all := u.All
		require.Equal(t, "ready", all.State, "note: %q", all.Note)
		assert.Equal(t, u.APIAll.ByModel.From, all.From)
		assert.Equal(t, u.APIAll.ByModel.To, all.To)
		// The last 30 days by default, ending today (the page's today, in UTC).
		to, err := time.Parse(time.DateOnly, all.To)
		require.NoError(t, err)
		assert.WithinDuration(t, time.Now().UTC(), to, 48*time.Hour)
		assert.Equal(t, to.AddDate(0, 0, -29).Format(time.DateOnly), all.From)
		assert.Contains(t, all.KeyOptions, u.KeyID, "the key filter lists the keys")
		assert.Subset(t, all.ModelOptions, []string{"", "chat-a", "msg-b"})

		// The table: a row per model and the overall total, to the token and micro-unit.
		require.NotNil(t, all.Total)
		sameUsage(t, u.APIAll.ByModel.Total, *all.Total, "total")
		costShown(t, all.StatCost, u.APIAll.ByModel.Total.CostMicros)
		require.Len(t, all.Models, len(u.APIAll.ByModel.Rows))
		api := map[string]usageRow{}
		for _, row := range u.APIAll.ByModel.Rows {
			api[row.Model] = row
		}
		for _, shown := range all.Models {
			sameUsage(t, api[shown.Model], shown, shown.Model)
		}
		// Who served it: a row per model, candidate and channel, summing to the same total.
		require.NotEmpty(t, all.Supply)
		var supplied int64
		for _, row := range all.Supply {
			assert.NotEmpty(t, row.Candidate, "%+v", row)
			assert.Equal(t, "api", row.Channel, "%+v", row)
			supplied += row.Requests
		}
		assert.Equal(t, u.APIAll.ByModel.Total.Requests, supplied, "the supply table counts every request")
		// Both models were used today and in the seeded history, so both are shown.
		assert.ElementsMatch(t, []string{"chat-a", "msg-b"}, []string{all.Models[0].Model, all.Models[1].Model})

		// The charts: a group of bars for each day with usage, and nothing else.
		var days []string
		tokens := map[string]int64{}
		for _, row := range u.APIAll.ByDay.Rows {
			if row.Requests > 0 {
				days = append(days, row.Day)
				tokens[row.Day] = row.Input + row.Output
			}
		}
		require.GreaterOrEqual(t, len(days), 8, "today and the seeded days: %v", days)
		for name, chart := range map[string]*usageChart{"tokens": all.TokensChart, "cost": all.CostChart, "tokens by kind": u.ByKind.TokensChart} {
			require.NotNil(t, chart, "%s chart", name)
			assert.Equal(t, "img", chart.Role, "%s chart", name)
			assert.NotEmpty(t, chart.Label, "%s chart's aria-label", name)
			var shown []string
			for _, d := range chart.Days {
				shown = append(shown, d.Day)
				assert.NotEmpty(t, d.Series, "%s chart, %s: no bars", name, d.Day)
				assert.NotEmpty(t, d.Title, "%s chart, %s: no title", name, d.Day)
			}
			assert.Equal(t, days, shown, "%s chart: one group per day with usage", name)
			assert.NotEmpty(t, chart.XTicks, "%s chart: day labels", name)
			require.NotEmpty(t, chart.YTicks, "%s chart: value labels", name)
			assert.Equal(t, "0", chart.YTicks[0], "%s chart: the axis starts at 0", name)
		}
		for _, d := range all.TokensChart.Days {
			assert.Equal(t, tokens[d.Day], d.Total, "tokens on %s", d.Day)
		}
		assert.Contains(t, all.TokensChart.Label, "Tokens per day")
		assert.Contains(t, all.CostChart.Label, "Cost per day")
		assert.Equal(t, []string{all.Models[0].Model, all.Models[1].Model}, all.TokensLegend, "the legend follows the table")
		assert.Equal(t, []string{"input", "cached", "output", "reasoning"}, u.ByKind.TokensLegend)

		// The key alone: what the simulator reported for its three calls.
		mine := u.Key
		require.Equal(t, "ready", mine.State)
		require.NotNil(t, mine.Total)
		sameUsage(t, u.APIKey.Total, *mine.Total, "the key's total")
		assert.Equal(t, int64(3), mine.Total.Requests)
		assert.Equal(t, int64(10+16+10+10), mine.Total.Output, "10 tokens of text each, 16 of reasoning once")
		assert.Equal(t, int64(16), mine.Total.Reasoning)
		assert.Zero(t, mine.Total.Estimated)
		assert.Positive(t, mine.Total.CostMicros)
		assert.Contains(t, mine.Summary, "7 days")
		require.NotNil(t, mine.TokensChart)
		require.Len(t, mine.TokensChart.Days, 1, "the key was used today only")
		assert.Equal(t, mine.To, mine.TokensChart.Days[0].Day)

		// One model: its row alone.
		require.Len(t, u.Model.Models, 1)
		assert.Equal(t, "msg-b", u.Model.Models[0].Model)
		sameUsage(t, api["msg-b"], *u.Model.Total, "msg-b alone")

		// A key never used: a calm empty state, no chart, no table.
		assert.Equal(t, "empty", u.Unused.State)
		assert.Contains(t, u.Unused.Empty, "No usage in this period")
		assert.False(t, u.Unused.ChartsVisible)
		assert.False(t, u.Unused.TableVisible)
	})

	t.Run("screenshots were taken", func(t *testing.T) {
		require.NotEmpty(t, r.Screenshots)
		for _, shot := range r.Screenshots {
			info, err := os.Stat(shot)
			require.NoError(t, err)
			assert.Greater(t, info.Size(), int64(10_000), "%s is too small to be a page", shot)
		}
	})
}

// sameUsage compares a row of the usage API with the same row read from the page.
func sameUsage(t *testing.T, want, got usageRow, what string) {
	t.Helper()
	assert.Equal(t, want.Requests, got.Requests, "%s: requests", what)
	assert.Equal(t, want.Input, got.Input, "%s: input", what)
	assert.Equal(t, want.CachedInput, got.CachedInput, "%s: cached input", what)
	assert.Equal(t, want.Output, got.Output, "%s: output", what)
	assert.Equal(t, want.Reasoning, got.Reasoning, "%s: reasoning", what)
	assert.Equal(t, want.CostMicros, got.CostMicros, "%s: cost", what)
	assert.Equal(t, want.Estimated, got.Estimated, "%s: estimated", what)
	if got.CostText != "" {
		costShown(t, got.CostText, want.CostMicros)
	}
}

// costShown checks that a cost as the page writes it (en-GB: "1,234.025736") is exactly
// micros micro-units, with two to six decimal places.
func costShown(t *testing.T, text string, micros int64) {
	t.Helper()
	whole, frac, ok := strings.Cut(strings.ReplaceAll(text, ",", ""), ".")
	if !assert.True(t, ok, "cost %q has no decimal point", text) {
		return
	}
	assert.True(t, len(frac) >= 2 && len(frac) <= 6, "cost %q: want 2 to 6 decimal places", text)
	frac += strings.Repeat("0", max(0, 6-len(frac)))
	assert.Equal(t, fmt.Sprintf("%d.%06d", micros/1_000_000, micros%1_000_000), whole+"."+frac, "cost %q", text)
}

// limitsReport is what console/limits.mjs prints.
type limitsReport struct {
	browserReport
	ProjectLimits  string       `json:"project_limits"`
	ProjectName    string       `json:"project_name"`
	Secret         string       `json:"secret"`
	KeyID          string       `json:"key_id"`
	RowAfterCreate limitsKeyRow `json:"row_after_create"`
	FirstCall      limitsCall   `json:"first_call"`
	ProjectKeys    []string     `json:"project_keys"`
	ProjectSpend   string       `json:"project_spend"`
	DialogProject  string       `json:"dialog_project"`
	DialogError    string       `json:"dialog_error"`
	DialogOpen     bool         `json:"dialog_open_after_error"`
	DialogRPMError string       `json:"dialog_rpm_error"`
	RowAfterLimits limitsKeyRow `json:"row_after_limits"`
	Overflow       []string     `json:"overflow"`
	StatusMessage  string       `json:"status_message"`
	Audit          []struct {
		Action string `json:"action"`
		Target string `json:"target"`
		Actor  string `json:"actor"`
		Shown  string `json:"shown"`
		Detail string `json:"detail"`
	} `json:"audit"`
}

type limitsKeyRow struct {
	Project      string `json:"project"`
	ProjectShown string `json:"project_shown"`
	SpendText    string `json:"spend_text"`
	Limits       string `json:"limits"`
	HasMeter     bool   `json:"has_meter"`
}

type limitsCall struct {
	Status      int    `json:"status"`
	ShouldRetry string `json:"should_retry"`
	Body        string `json:"body"`
}

// An operator creates a project with a budget and a key in it in the console, sets the
// key's budget in its Limits dialog to less than one request costs, and the key's next
// request is refused with the budget's 429 before any upstream is called. The audit
// view lists each change with the console's user as the one who made it.
func TestConsoleInBrowserLimits(t *testing.T) {
	node := needBrowser(t)
	up := newUpstream(t)
	g, _ := startConsoleGateway(t, up)
	const keyBudget = "0.000001/day" // one micro-unit: less than any priced request

	var r limitsReport
	runBrowserScript(t, node, "limits.mjs", g, 2*time.Minute, &r,
		"SY_GATEWAY_URL="+g.base, "SY_MODEL=chat-a", "SY_BUDGET="+keyBudget)
	assert.Equal(t, 200, r.PageStatus)
	assert.Empty(t, r.PageErrors)
	for _, e := range r.ConsoleErrors {
		assert.Contains(t, e, "status of 400", "the one error expected is the refused budget")
	}

	t.Run("the project and the key are made in the page", func(t *testing.T) {
		assert.Equal(t, "Platform team", r.ProjectName)
		assert.Contains(t, r.ProjectLimits, "50/month")
		assert.Equal(t, "platform", r.RowAfterCreate.Project)
		assert.Equal(t, "platform", r.RowAfterCreate.ProjectShown)
		assert.Equal(t, []string{"limited-bot"}, r.ProjectKeys, "the project lists its key")
		assert.Equal(t, 200, r.FirstCall.Status, "before its budget the key works: %s", r.FirstCall.Body)
		assert.Equal(t, "platform", r.DialogProject, "the dialog starts from the key's project")
	})

	t.Run("the limits dialog explains a mistake and keeps what was typed", func(t *testing.T) {
		assert.Contains(t, r.DialogError, "budget: want <amount>/<day|month|total>, e.g. 50/month")
		assert.True(t, r.DialogOpen)
		assert.Contains(t, r.DialogRPMError, "Requests per minute: a whole number")
		assert.Contains(t, r.RowAfterLimits.Limits, keyBudget)
		assert.Contains(t, r.StatusMessage, "saved")
		assert.Empty(t, r.Overflow, "tables wider than their panel at 1366 pixels")
	})

	t.Run("the API shows what the page set", func(t *testing.T) {
		res := g.call(t, "GET", "/console/api/keys/"+r.KeyID, "", "Authorization", basicAuth(consoleUser, consolePassword))
		require.Equal(t, 200, res.Status, "%s", res.Body)
		assert.Equal(t, "platform", gjson.GetBytes(res.Body, "key.project_id").Str)
		assert.JSONEq(t, `{"budget":"`+keyBudget+`"}`, gjson.GetBytes(res.Body, "key.limits").Raw)
	})

	t.Run("the key's next request gets the budget's 429 before any upstream", func(t *testing.T) {
		before := up.count()
		res := g.call(t, "POST", "/v1/chat/completions", `{"model":"chat-a","messages":[{"role":"user","content":"Over budget?"}]}`,
			"Authorization", "Bearer "+r.Secret, "Content-Type", "application/json")
		e := familyA(t, res, http.StatusTooManyRequests, "insufficient_quota")
		assert.Equal(t, "budget_exceeded", e.Get("code").Str)
		assert.Equal(t, "false", res.Header.Get("x-should-retry"))
		assert.Contains(t, e.Get("message").Str, "key", "the message says whose budget was reached")
		assert.NotContains(t, string(res.Body), r.Secret)
		assert.Equal(t, before, up.count(), "no upstream was called")
	})

	t.Run("the audit view lists the changes with the console's user", func(t *testing.T) {
		type change struct{ action, target, actor string }
		var got []change
		for _, a := range r.Audit {
			got = append(got, change{a.Action, a.Target, a.Actor})
		}
		actor := "break-glass " + consoleUser + " from 127.0.0.1"
		assert.Subset(t, got, []change{
			{"project.create", "platform", actor},
			{"key.create", r.KeyID, actor},
			{"key.limits", r.KeyID, actor},
			{"candidate.reset", "chat-a/main", actor}, // the models view's Reset button
		})
		require.GreaterOrEqual(t, len(r.Audit), 2)
		assert.Equal(t, "candidate.reset", r.Audit[0].Action, "newest first")
		assert.Equal(t, "Reset candidate health", r.Audit[0].Shown)
		assert.Equal(t, "key.limits", r.Audit[1].Action)
		assert.Equal(t, "Set key limits", r.Audit[1].Shown)
		assert.Contains(t, r.Audit[1].Detail, keyBudget)
		for _, a := range r.Audit {
			assert.NotContains(t, a.Detail, r.Secret)
		}
	})

	t.Run("the CLI reaches the same projects, limits and audit trail", func(t *testing.T) {
		consoleLimitsCLI(t, g, r.KeyID)
	})
}

// The CLI reaches the same projects, limits and audit trail through the admin
// endpoint, and its changes are recorded as the admin API's.
func consoleLimitsCLI(t *testing.T, g *gateway, keyID string) {
	out := switchyardCLI(t, g, "projects", "show", "platform")
	assert.Contains(t, out, "name:       Platform team")
	assert.Contains(t, out, "limits:     budget 50/month")
	assert.Regexp(t, keyID+`\s+limited-bot\s+active`, out)

	out = switchyardCLI(t, g, "keys", "limits", keyID, "--rpm", "30")
	assert.Contains(t, out, "limits:     budget 0.000001/day, 30 rpm", "the budget set in the page is kept")
	out = switchyardCLI(t, g, "projects", "create", "ci", "--budget", "5/day", "--model-budget", "chat-a=1/day")
	assert.Contains(t, out, "limits:     budget 5/day; chat-a: budget 1/day")
	switchyardCLI(t, g, "keys", "project", keyID, "ci")
	assert.Contains(t, switchyardCLI(t, g, "keys", "show", keyID), "project:    ci")
	assert.Regexp(t, `ci\s+ci\s+1\s+`, switchyardCLI(t, g, "projects", "list"))

	out = switchyardCLI(t, g, "audit", "--limit", "3")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.GreaterOrEqual(t, len(lines), 4, out)
	assert.Regexp(t, `admin API\s+key.project\s+`+keyID+`\s+project platform → ci`, lines[1])
	assert.Regexp(t, `admin API\s+project.create\s+ci`, lines[2])
	assert.Regexp(t, `admin API\s+key.limits\s+`+keyID, lines[3])
	assert.Contains(t, out, "older entries: --before ")

	_, err := switchyardCLIErr(g, "keys", "limits", keyID, "--budget", "5/fortnight")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "want <amount>/<day|month|total>")
}

func basicAuth(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}
