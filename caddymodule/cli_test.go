package caddymodule

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A name stored before names were checked (or by a store edited by hand) may hold NUL,
// terminal escape sequences or a bidi override: `keys list`, `keys show` and the
// rotation summary print it escaped, never raw.
func TestKeysListAndShowEscapeStoredNames(t *testing.T) {
	const hostile = "ops\x1b[2J\x1b[31m\x00\u202eevil"
	const escaped = `"ops\x1b[2J\x1b[31m\x00\u202eevil"`
	key := `{"id":"key_1","name":"ops\u001b[2J\u001b[31m\u0000\u202eevil","prefix":"sk-sy-ab","status":"active",` +
		`"models":["m\u001b[0m"],"created_at":"2026-11-01T00:00:00Z"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/switchyard/keys":
			_, _ = w.Write([]byte(`{"keys":[` + key + `]}`))
		case "/switchyard/keys/key_1":
			_, _ = w.Write([]byte(`{"key":` + key + `}`))
		case "/switchyard/keys/key_1/rotate":
			_, _ = w.Write([]byte(`{"key":` + key + `,"secret":"sk-sy-new","replaced":` + key + `}`))
		}
	}))
	defer srv.Close()

	for _, args := range [][]string{{"keys", "list"}, {"keys", "show", "key_1"}, {"keys", "rotate", "key_1"}} {
		t.Run(args[1], func(t *testing.T) {
			var out bytes.Buffer
			root := &cobra.Command{Use: "switchyard", SilenceUsage: true, SilenceErrors: true}
			buildCLIWith(root, &out)
			root.SetArgs(append(args, "--address", srv.URL))
			require.NoError(t, root.Execute())
			got := out.String()
			assert.Contains(t, got, escaped)
			assert.Contains(t, got, `"m\x1b[0m"`)
			for _, raw := range []string{"\x1b", "\x00", "\u202e"} {
				assert.NotContains(t, got, raw)
			}
			assert.NotContains(t, got, hostile)
		})
	}
}

// `keys create` refuses a name the gateway would refuse, without calling it.
func TestKeysCreateRefusesUnprintableNames(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"key":{"id":"key_1","name":"ok","status":"active"},"secret":"sk-sy-x"}`))
	}))
	defer srv.Close()
	run := func(name string) error {
		root := &cobra.Command{Use: "switchyard", SilenceUsage: true, SilenceErrors: true}
		buildCLI(root)
		root.SetArgs([]string{"keys", "create", "--address", srv.URL, "--name", name})
		return root.Execute()
	}
	for name, want := range map[string]string{
		"bad\x00name":            "U+0000",
		"red\x1b[31malert":       "U+001B",
		"admin\u202egnp.exe":     "U+202E",
		strings.Repeat("n", 101): "at most 100 characters",
		" ":                      "name: required",
	} {
		err := run(name)
		require.Error(t, err, "%q", name)
		assert.Contains(t, err.Error(), want)
	}
	assert.Zero(t, calls.Load(), "a refused name never reaches the gateway")
	require.NoError(t, run("ci-bot"))
	assert.Equal(t, int32(1), calls.Load())
}

// fakeAdmin records what the CLI sends and answers each "METHOD path" from answers.
type fakeAdmin struct {
	srv     *httptest.Server
	mu      sync.Mutex
	calls   []string // "METHOD path body"
	answers map[string]string
}

func newFakeAdmin(t *testing.T, answers map[string]string) *fakeAdmin {
	f := &fakeAdmin{answers: answers}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.calls = append(f.calls, strings.TrimSpace(r.Method+" "+r.URL.RequestURI()+" "+string(body)))
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		answer, ok := answers[r.Method+" "+r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			answer = `{"error":"no such route"}`
		}
		_, _ = w.Write([]byte(answer))
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// run runs `caddy switchyard args...` against the fake and returns what it printed.
func (f *fakeAdmin) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := &cobra.Command{Use: "switchyard", SilenceUsage: true, SilenceErrors: true}
	buildCLIWith(root, &out)
	// --address goes before a "--", after which nothing is a flag.
	at := len(args)
	for i, a := range args {
		if a == "--" {
			at = i
			break
		}
	}
	root.SetArgs(append(append(append([]string{}, args[:at]...), "--address", f.srv.URL), args[at:]...))
	err := root.Execute()
	return out.String(), err
}

func (f *fakeAdmin) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

const limitedKey = `{"id":"key_1","name":"ci","prefix":"sk-sy-ab","status":"active","project_id":"platform",` +
	`"limits":{"rpm":60,"budget":"50/month","models":{"sim-gpt":{"budget":"5/day"}}},` +
	`"standing":{"budget":"50/month","spent":"12.5","spent_micros":12500000,"reserved":"0.25","reserved_micros":250000,` +
	`"remaining":"37.25","remaining_micros":37250000,"reset_at":"2026-12-01T00:00:00Z",` +
	`"requests":{"limit":60,"remaining":42,"reset_seconds":12},"in_flight":1,` +
	`"models":{"sim-gpt":{"budget":"5/day","spent":"1","spent_micros":1000000,"reserved":"0","reserved_micros":0,"in_flight":0}}}}`

// `keys create` sends the project and the limits as operators write them.
func TestCLIKeysCreateWithProjectAndLimits(t *testing.T) {
	f := newFakeAdmin(t, map[string]string{"POST /switchyard/keys": `{"key":` + limitedKey + `,"secret":"sk-sy-new"}`})
	out, err := f.run(t, "keys", "create", "--name", "ci", "--project", "platform", "--budget", "50/month", "--rpm", "60",
		"--tpm", "100000", "--concurrency", "4", "--model-budget", "sim-gpt=5/day", "--model-budget", "m2=1/total")
	require.NoError(t, err)
	require.Len(t, f.sent(), 1)
	body := strings.TrimPrefix(f.sent()[0], "POST /switchyard/keys ")
	assert.JSONEq(t, `{"name":"ci","project_id":"platform","limits":{"budget":"50/month","rpm":60,"tpm":100000,"concurrency":4,
		"models":{"sim-gpt":{"budget":"5/day"},"m2":{"budget":"1/total"}}}}`, body)
	assert.Contains(t, out, "project:    platform\n")
	assert.Contains(t, out, "limits:     budget 50/month, 60 rpm; sim-gpt: budget 5/day\n")
	assert.Contains(t, out, "spend:      12.5 of 50/month (0.25 reserved)\n")
	assert.Contains(t, out, "requests:   42 of 60 left this minute\n")
	assert.Contains(t, out, "resets:     2026-12-01 00:00 UTC\n")
	assert.Contains(t, out, "sim-gpt: 1 of 5/day\n")
	assert.Contains(t, out, "secret (shown this once, store it now): sk-sy-new")

	// Malformed limits are refused before any call, saying how to write them.
	for args, want := range map[string]string{
		"--budget 50/week":            "--budget: want <amount>/<day|month|total>, e.g. 50/month",
		"--budget fifty":              "--budget: want",
		"--rpm -5":                    "--rpm: must be 0 (not limited) or more",
		"--model-budget sim-gpt":      "--model-budget: want <model>=<amount>/<day|month|total>",
		"--model-budget sim-gpt=5/yr": "--model-budget sim-gpt: want <amount>/<day|month|total>",
	} {
		_, err := f.run(t, append([]string{"keys", "create", "--name", "x"}, strings.Fields(args)...)...)
		require.Error(t, err, args)
		assert.Contains(t, err.Error(), want, args)
	}
	assert.Len(t, f.sent(), 1, "no refused create reached the gateway")
}

// `keys limits` changes only the limits named on the command line: it reads the key's
// limits and puts them back changed; "none" and 0 remove one limit, --clear all of them.
func TestCLIKeysLimitsChangesOnlyWhatIsGiven(t *testing.T) {
	f := newFakeAdmin(t, map[string]string{
		"GET /switchyard/keys/key_1":        `{"key":` + limitedKey + `}`,
		"PUT /switchyard/keys/key_1/limits": `{"key":` + limitedKey + `}`,
	})
	put := func(args ...string) string {
		t.Helper()
		before := len(f.sent())
		_, err := f.run(t, append([]string{"keys", "limits", "key_1"}, args...)...)
		require.NoError(t, err)
		calls := f.sent()[before:]
		last := calls[len(calls)-1]
		require.True(t, strings.HasPrefix(last, "PUT /switchyard/keys/key_1/limits "), "%v", calls)
		return strings.TrimPrefix(last, "PUT /switchyard/keys/key_1/limits ")
	}
	assert.JSONEq(t, `{"rpm":30,"budget":"50/month","models":{"sim-gpt":{"budget":"5/day"}}}`, put("--rpm", "30"))
	assert.JSONEq(t, `{"rpm":60,"models":{"sim-gpt":{"budget":"5/day"}}}`, put("--budget", "none"))
	assert.JSONEq(t, `{"rpm":60,"budget":"50/month"}`, put("--model-budget", "sim-gpt=none"))
	assert.JSONEq(t, `{"budget":"50/month","models":{"sim-gpt":{"budget":"5/day"}}}`, put("--rpm", "0"))
	before := len(f.sent())
	assert.JSONEq(t, `{}`, put("--clear"))
	assert.Len(t, f.sent()[before:], 1, "--clear reads nothing first")
	assert.JSONEq(t, `{"tpm":500}`, put("--clear", "--tpm", "500"))

	// Without flags it only shows the limits.
	before = len(f.sent())
	out, err := f.run(t, "keys", "limits", "key_1")
	require.NoError(t, err)
	assert.Equal(t, []string{"GET /switchyard/keys/key_1"}, f.sent()[before:])
	assert.Contains(t, out, "limits:     budget 50/month, 60 rpm; sim-gpt: budget 5/day")

	// An empty budget (a variable that expanded to nothing) removes nothing: only
	// "none" does; a rate the counters cannot hold exactly is refused; nothing is sent.
	for _, c := range []struct{ cmd, flag, want string }{
		{"keys", "--budget=", "--budget: empty; want <amount>/<day|month|total>, e.g. 50/month, or \"none\" to remove the budget"},
		{"keys", "--model-budget=sim-gpt=", "--model-budget sim-gpt: empty"},
		{"projects", "--budget=", "--budget: empty"},
		{"keys", "--tpm=9223372036854775807", "--tpm: must be 0 (not limited) or more, at most 1000000000000"},
		{"projects", "--budget=1000000001/month", "more than the most a budget may be"},
	} {
		before = len(f.sent())
		_, err := f.run(t, c.cmd, "limits", "key_1", c.flag)
		require.Error(t, err, c.flag)
		assert.Contains(t, err.Error(), c.want, c.flag)
		for _, call := range f.sent()[before:] {
			assert.False(t, strings.HasPrefix(call, "PUT "), "%s %s: nothing is changed: %s", c.cmd, c.flag, call)
		}
	}
}

func TestCLIKeysProject(t *testing.T) {
	f := newFakeAdmin(t, map[string]string{"PUT /switchyard/keys/key_1/project": `{"key":` + limitedKey + `}`})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"platform"}, `{"project_id":"platform"}`},
		{[]string{"-"}, `{"project_id":""}`},
		{[]string{"--"}, `{"project_id":""}`},
	} {
		before := len(f.sent())
		_, err := f.run(t, append([]string{"keys", "project", "key_1"}, c.args...)...)
		require.NoError(t, err, c.args)
		require.Len(t, f.sent()[before:], 1)
		assert.JSONEq(t, c.want, strings.TrimPrefix(f.sent()[before], "PUT /switchyard/keys/key_1/project "), "%v", c.args)
	}
	_, err := f.run(t, "keys", "project", "key_1")
	require.Error(t, err, "a project, or - to remove it, must be given")
}

func TestCLIProjectsAndAudit(t *testing.T) {
	project := `{"id":"platform","name":"Platform team","limits":{"budget":"50/month","tpm":100000},"key_count":1,` +
		`"standing":{"budget":"50/month","spent":"12.5","spent_micros":12500000,"reserved":"0","reserved_micros":0,` +
		`"tokens":{"limit":100000,"remaining":99000,"reset_seconds":30},"in_flight":0}`
	f := newFakeAdmin(t, map[string]string{
		"GET /switchyard/projects":                 `{"projects":[` + project + `}]}`,
		"POST /switchyard/projects":                `{"project":` + project + `,"keys":[]}}`,
		"GET /switchyard/projects/platform":        `{"project":` + project + `,"keys":[` + limitedKey + `]}}`,
		"PUT /switchyard/projects/platform/limits": `{"project":` + project + `,"keys":[]}}`,
		"GET /switchyard/audit": `{"more":true,"entries":[` +
			`{"id":7,"at":"2026-11-02T10:00:00Z","actor":"console:ana\u001b[31m","action":"key.limits","target":"key_1","detail":"budget 5/day"},` +
			`{"id":6,"at":"2026-11-02T09:00:00Z","actor":"admin API","action":"project.create","target":"platform","detail":"name \"Platform team\""}]}`,
	})
	out, err := f.run(t, "projects", "create", "platform", "--name", "Platform team", "--budget", "50/month", "--tpm", "100000")
	require.NoError(t, err)
	assert.JSONEq(t, `{"id":"platform","name":"Platform team","limits":{"budget":"50/month","tpm":100000}}`,
		strings.TrimPrefix(f.sent()[0], "POST /switchyard/projects "))
	assert.Contains(t, out, "limits:     budget 50/month, 100000 tpm\n")
	assert.Contains(t, out, "tokens:     99000 of 100000 left this minute\n")

	out, err = f.run(t, "projects", "list")
	require.NoError(t, err)
	assert.Regexp(t, `platform\s+Platform team\s+1\s+12.5 of 50/month\s+budget 50/month, 100000 tpm`, out)

	out, err = f.run(t, "projects", "show", "platform")
	require.NoError(t, err)
	assert.Contains(t, out, "keys (1):")
	assert.Regexp(t, `key_1\s+ci\s+active\s+12.5 of 50/month \(0.25 reserved\)\s+budget 50/month, 60 rpm`, out)

	_, err = f.run(t, "projects", "limits", "platform", "--rpm", "10")
	require.NoError(t, err)
	calls := f.sent()
	assert.Equal(t, "GET /switchyard/projects/platform", calls[len(calls)-2])
	assert.JSONEq(t, `{"budget":"50/month","tpm":100000,"rpm":10}`, strings.TrimPrefix(calls[len(calls)-1], "PUT /switchyard/projects/platform/limits "))

	out, err = f.run(t, "audit", "--limit", "2")
	require.NoError(t, err)
	assert.Equal(t, "GET /switchyard/audit?limit=2", f.sent()[len(f.sent())-1])
	assert.Regexp(t, `7\s+2026-11-02 10:00:00Z\s+"console:ana\\x1b\[31m"\s+key.limits\s+key_1\s+budget 5/day`, out)
	assert.NotContains(t, out, "\x1b", "an actor's escape sequence is shown, not obeyed")
	assert.Contains(t, out, "older entries: --before 6")

	// The key list shows project and spend.
	f2 := newFakeAdmin(t, map[string]string{"GET /switchyard/keys": `{"keys":[` + limitedKey + `]}`})
	out, err = f2.run(t, "keys", "list")
	require.NoError(t, err)
	assert.Regexp(t, `PROJECT\s+SPEND`, out)
	assert.Regexp(t, `key_1\s+ci\s+sk-sy-ab…\s+active\s+platform\s+12.5 of 50/month \(0.25 reserved\)`, out)
}

// `requests` prints names and reasons from the store escaped, never raw terminal codes,
// and shows each attempt of a request that did not go straight through.
func TestRequestsListEscapesStoredNamesAndShowsAttempts(t *testing.T) {
	rows := `{"requests":[{"time":"2026-11-25T14:02:00Z","request_id":"sy_1","key_id":"key_1","key_name":"ops\u001b[2J",` +
		`"model":"m","candidate":"good","operation":"chat_completions","status":200,"ttfb_ms":12,"duration_ms":90,"input":5,"output":7,` +
		`"cost_micros":1500,"outcome":"served","failed_over":true,"retried":false,"attempts":2,` +
		`"tries":[{"candidate":"bad\u001b[31m","reason":"status","status":503,"duration_ms":4},{"candidate":"good","status":200,"duration_ms":80}]},` +
		`{"time":"2026-11-25T14:01:00Z","request_id":"sy_0","key_id":"key_1","key_name":"ops","model":"","operation":"messages",` +
		`"status":429,"ttfb_ms":0,"duration_ms":0,"input":0,"output":0,"cost_micros":0,"outcome":"refused","refused_by":"key_requests",` +
		`"failed_over":false,"retried":false,"attempts":0,"tries":[]}],"next":"abc"}`
	var asked string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = r.URL.RawQuery
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(rows))
	}))
	defer srv.Close()
	var out bytes.Buffer
	root := &cobra.Command{Use: "switchyard"}
	buildCLIWith(root, &out)
	root.SetArgs([]string{"requests", "--address", srv.URL, "--model", "m", "--status", "429"})
	require.NoError(t, root.Execute())
	got := out.String()
	t.Logf("\n%s", got)
	assert.Contains(t, asked, "model=m")
	assert.Contains(t, asked, "status=429")
	assert.NotContains(t, got, "\x1b")
	assert.Contains(t, got, `"ops\x1b[2J"`)
	assert.Contains(t, got, "failed-over")
	assert.Contains(t, got, "refused:key_requests")
	assert.Equal(t, 2, strings.Count(got, "attempt"), "the failed-over request's two attempts")
	assert.Contains(t, got, "0.001500")
	assert.Contains(t, got, "--cursor abc")
}

// An id is one path segment whatever it holds: unescaped, "key_1/revoke" would show
// a different route's answer, "k?x=1" would lose all after "?", and "100%" or "a b"
// would not be a URL at all.
func TestEveryIDInAPathIsEscaped(t *testing.T) {
	ids := map[string]string{"key_1/revoke": "key_1%2Frevoke", "k?x=1": "k%3Fx=1", "100%": "100%25", "a b": "a%20b"}
	for id, escaped := range ids {
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"keys", "show", id}, "GET /switchyard/keys/" + escaped},
			{[]string{"keys", "limits", id}, "GET /switchyard/keys/" + escaped},
			{[]string{"keys", "limits", id, "--clear"}, "PUT /switchyard/keys/" + escaped + "/limits {}"},
			{[]string{"keys", "project", id, "p1"}, `PUT /switchyard/keys/` + escaped + `/project {"project_id":"p1"}`},
			{[]string{"keys", "rotate", id}, `POST /switchyard/keys/` + escaped + `/rotate {"grace":""}`},
			{[]string{"keys", "revoke", id}, "POST /switchyard/keys/" + escaped + "/revoke"},
			{[]string{"projects", "show", id}, "GET /switchyard/projects/" + escaped},
			{[]string{"projects", "limits", id, "--rpm", "5"}, "GET /switchyard/projects/" + escaped},
			{[]string{"health", "reset", id, id}, "POST /switchyard/health/" + escaped + "/" + escaped + "/reset"},
			{[]string{"tokens", "revoke", id}, "POST /switchyard/tokens/" + escaped + "/revoke"},
			{[]string{"people", "disable", id}, "POST /switchyard/people/" + escaped + "/disable"},
			{[]string{"people", "enable", id}, "POST /switchyard/people/" + escaped + "/enable"},
			{[]string{"sessions", "revoke", id}, "POST /switchyard/sessions/" + escaped + "/revoke"},
			{[]string{"connect", id, "--base-url", "http://gw"}, "GET /switchyard/connect/" + escaped + "?base_url=http%3A%2F%2Fgw&key_env=SWITCHYARD_API_KEY"},
		} {
			f := newFakeAdmin(t, nil)
			_, _ = f.run(t, c.args...)
			sent := f.sent()
			require.NotEmpty(t, sent, "%q", c.args)
			assert.Equal(t, c.want, sent[0], "%q", c.args)
		}
	}
}

// `health` lists each candidate's state and what keeps it out; `health reset` posts to the
// candidate's reset route and says what it was.
func TestCLIHealthAndReset(t *testing.T) {
	f := newFakeAdmin(t, map[string]string{
		"GET /switchyard/health": `{"candidates":[` +
			`{"model":"m","candidate":"primary","protocol":"family_a","priority":0,"state":"open","success_rate":0.8,"recent_failures":0,` +
			`"cooldown_remaining_s":299.5,"paused":true,"probing":true,"next_probe_s":299.5,"last_failure":"rate_limit"},` +
			`{"model":"m","candidate":"backup\u001b[31m","protocol":"family_a","priority":1,"state":"closed","success_rate":1}]}`,
		"POST /switchyard/health/m/primary/reset": `{"model":"m","was":"open","candidate":{"name":"primary","protocol":"family_a","priority":0,"state":"closed"}}`,
	})
	out, err := f.run(t, "health")
	require.NoError(t, err)
	assert.Regexp(t, `m\s+primary\s+family_a\s+open\s+0.8\s+0\s+299.5s \(paused by the upstream\)\s+rate_limit`, out)
	assert.NotContains(t, out, "\x1b")

	out, err = f.run(t, "health", "reset", "m", "primary")
	require.NoError(t, err)
	assert.Equal(t, "POST /switchyard/health/m/primary/reset", f.sent()[len(f.sent())-1])
	assert.Contains(t, out, "m / primary: health reset (was open, now closed)")
}
