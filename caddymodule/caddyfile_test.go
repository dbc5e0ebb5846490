package caddymodule

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/relay"
	"github.com/switchyard-gw/switchyard/routing"
)

func adapt(t *testing.T, src string) ([]byte, error) {
	t.Helper()
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
	return cfg, err
}

// validate adapts and provisions a Caddyfile without serving it, as `caddy validate` does.
func validate(t *testing.T, src string) error {
	t.Helper()
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	cfg, err := adapt(t, src)
	if err != nil {
		return err
	}
	var c caddy.Config
	require.NoError(t, json.Unmarshal(cfg, &c))
	return caddy.Validate(&c)
}

// errorCase is a Caddyfile that must be refused and the words its error must hold.
type errorCase struct {
	src  string
	want []string
}

// refusedNaming loads each case with load (adaptErr or validate) and checks that it is
// refused with an error that names what is wrong.
func refusedNaming(t *testing.T, cases map[string]errorCase, load func(*testing.T, string) error) {
	t.Helper()
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			err := load(t, c.src)
			require.Error(t, err)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// adaptErr is adapt's error alone, for refusedNaming.
func adaptErr(t *testing.T, src string) error {
	t.Helper()
	_, err := adapt(t, src)
	return err
}

// adaptedApp is the switchyard app an adapted Caddyfile configures, not provisioned.
func adaptedApp(t *testing.T, cfg []byte) *App {
	t.Helper()
	var parsed struct {
		Apps struct {
			Switchyard App `json:"switchyard"`
		} `json:"apps"`
	}
	require.NoError(t, json.Unmarshal(cfg, &parsed))
	return &parsed.Apps.Switchyard
}

// provisionedApp adapts a Caddyfile and provisions its switchyard app, with Caddy's data
// directory in the test's own, as a start would; the app is cleaned up with the test.
func provisionedApp(t *testing.T, src string) *App {
	t.Helper()
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	cfg, err := adapt(t, src)
	require.NoError(t, err)
	app := adaptedApp(t, cfg)
	ctx, cancel := caddy.NewContext(caddy.Context{Context: t.Context()})
	t.Cleanup(cancel)
	require.NoError(t, app.Provision(ctx))
	t.Cleanup(func() { _ = app.Cleanup() })
	return app
}

func TestExampleCaddyfileValidates(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir()) // the default SQLite store goes in Caddy's data dir
	src, err := os.ReadFile("../Caddyfile.example")
	require.NoError(t, err)
	// Caddy warns at every start when its input is not as `caddy fmt` would write it.
	assert.Equal(t, string(caddyfile.Format(src)), string(src), "Caddyfile.example is not formatted (caddy fmt)")
	cfg, err := adapt(t, string(src))
	require.NoError(t, err)
	app := adaptedApp(t, cfg)
	require.NotEmpty(t, app.Models)
	assert.Equal(t, "sim-gpt", app.Models[0].ID)
	assert.Equal(t, []string{"family_a"}, app.Models[0].Protocols)
	assert.Equal(t, "1.25", app.Models[0].Prices.Input)
	assert.Equal(t, "family_a", app.Models[0].Candidates[0].Protocol)
	assert.Equal(t, "http://127.0.0.1:8081/v1", app.Models[0].Candidates[0].URL)
	assert.True(t, app.Models[0].Capabilities["reasoning"])

	require.NoError(t, validate(t, string(src)))
}

func TestCandidateCredentialPlaceholderIsKeptOutOfTheConfig(t *testing.T) {
	t.Setenv("SWITCHYARD_TEST_UPSTREAM_KEY", "sk-upstream-from-env-123")
	src := `{
	switchyard {
		model m {
			candidate c {
				protocol family_a
				url https://api.example.com/v1
				upstream_model real
				credential {env.SWITCHYARD_TEST_UPSTREAM_KEY}
			}
		}
	}
}`
	cfg, err := adapt(t, src)
	require.NoError(t, err)
	assert.NotContains(t, string(cfg), "sk-upstream-from-env-123", "the adapted JSON holds the placeholder, not the secret")

	app := provisionedApp(t, src)
	m, ok := app.catalog.Lookup("m")
	require.True(t, ok)
	assert.Equal(t, "sk-upstream-from-env-123", m.Candidates[0].Credential, "the placeholder is replaced when the config loads")
}

func TestBadConfigNamesModelCandidateAndField(t *testing.T) {
	const head = "{\n\tswitchyard {\n"
	const tail = "\t}\n}\n"
	candidate := func(body string) string {
		return head + "\t\tmodel gpt-x {\n\t\t\tcandidate east {\n" + body + "\t\t\t}\n\t\t}\n" + tail
	}
	full := "\t\t\t\tprotocol family_a\n\t\t\t\turl http://127.0.0.1:9/v1\n\t\t\t\tupstream_model up\n"
	cases := map[string]errorCase{
		"unknown protocol": {
			candidate("\t\t\t\tprotocol openai\n\t\t\t\turl http://127.0.0.1:9/v1\n\t\t\t\tupstream_model up\n"),
			[]string{`"gpt-x"`, `"east"`, "protocol"},
		},
		"relative url": {
			candidate("\t\t\t\tprotocol family_a\n\t\t\t\turl /v1\n\t\t\t\tupstream_model up\n"),
			[]string{`"gpt-x"`, `"east"`, "url"},
		},
		"missing upstream model": {
			candidate("\t\t\t\tprotocol family_a\n\t\t\t\turl http://127.0.0.1:9/v1\n"),
			[]string{`"gpt-x"`, `"east"`, "upstream_model"},
		},
		"bad timeout": {
			candidate(full + "\t\t\t\theader_timeout soon\n"),
			[]string{`"gpt-x"`, `"east"`, "header_timeout"},
		},
		"unknown candidate option": {
			candidate(full + "\t\t\t\tretry_budget 3\n"),
			[]string{`"gpt-x"`, `"east"`, `"retry_budget"`},
		},
		"retries past the bound": {
			candidate(full + "\t\t\t\tretries 11\n"),
			[]string{`"gpt-x"`, `"east"`, "retries", `"11"`, "0 to 10"},
		},
		"negative retries": {
			candidate(full + "\t\t\t\tretries -1\n"),
			[]string{`"gpt-x"`, `"east"`, "retries", `"-1"`},
		},
		"first token timeout not a duration": {
			candidate(full + "\t\t\t\tfirst_token_timeout soon\n"),
			[]string{`"gpt-x"`, `"east"`, "first_token_timeout", `"soon"`},
		},
		"protocol declared without a candidate": {
			head + "\t\tmodel gpt-x {\n\t\t\tprotocols family_a family_b\n\t\t\tcandidate east {\n" + full + "\t\t\t}\n\t\t}\n" + tail,
			[]string{`"gpt-x"`, "protocols", "family_b"},
		},
		"bad price": {
			head + "\t\tmodel gpt-x {\n\t\t\tprice input cheap\n\t\t\tcandidate east {\n" + full + "\t\t\t}\n\t\t}\n" + tail,
			[]string{`"gpt-x"`, "prices", "input"},
		},
		"key for an undeclared model": {
			head + "\t\tkey ops sk-0123456789abcdef0123 {\n\t\t\tmodels nope\n\t\t}\n" + tail,
			[]string{`"ops"`, "models", `"nope"`},
		},
		"key name with an escape sequence": {
			head + "\t\tkey \"ops\x1b[31m\" sk-0123456789abcdef0123\n" + tail,
			[]string{`"ops\x1b[31m"`, "U+001B", "control character"},
		},
		"short key": {
			head + "\t\tkey ops short\n" + tail,
			[]string{`"ops"`, "16"},
		},
		// An unset variable would otherwise start a candidate that fails every request
		// upstream with 401 (SWITCHYARD_TEST_UNSET_CREDENTIAL is emptied below).
		"credential from an unset variable": {
			candidate(full + "\t\t\t\tcredential {env.SWITCHYARD_TEST_UNSET_CREDENTIAL}\n"),
			[]string{`"gpt-x"`, `"east"`, "credential", "{env.SWITCHYARD_TEST_UNSET_CREDENTIAL}", "empty"},
		},
		"credential of placeholders that are all empty": {
			candidate(full + "\t\t\t\tcredential \"{env.SWITCHYARD_TEST_UNSET_CREDENTIAL} {env.SWITCHYARD_TEST_UNSET_CREDENTIAL}\"\n"),
			[]string{`"gpt-x"`, `"east"`, "credential", "empty"},
		},
		"budget without a period": {
			head + "\t\tkey ops sk-0123456789abcdef0123 {\n\t\t\tbudget 50\n\t\t}\n" + tail,
			[]string{`"ops"`, "budget", "50/month"},
		},
		"per-model limit for an undeclared model": {
			head + "\t\tkey ops sk-0123456789abcdef0123 {\n\t\t\tmodel nope {\n\t\t\t\tbudget 1/day\n\t\t\t}\n\t\t}\n" + tail,
			[]string{`"ops"`, `"nope"`, "not a declared model"},
		},
		"default limit for an undeclared model": {
			head + "\t\tlimits {\n\t\t\tkey_defaults {\n\t\t\t\tmodel nope {\n\t\t\t\t\trpm 5\n\t\t\t\t}\n\t\t\t}\n\t\t}\n" + tail,
			[]string{"key_defaults", `"nope"`},
		},
		"unknown unreachable policy": {
			head + "\t\tlimits {\n\t\t\twhen_unreachable overspend\n\t\t}\n" + tail,
			[]string{"when_unreachable", `"overspend"`},
		},
		"redis url that is not one": {
			head + "\t\tlimits {\n\t\t\tredis http://user:hunter2@cache:6379\n\t\t}\n" + tail,
			[]string{"limits: redis", "redis://"},
		},
		"redis cluster url that is not one": {
			head + "\t\tlimits {\n\t\t\tredis_cluster rediss://gw:hunter2@a:6379 http://gw:hunter2@b:6379\n\t\t}\n" + tail,
			[]string{"limits: redis_cluster", "URL 2 of 2", "redis://"},
		},
		"redis cluster nodes with other passwords": {
			head + "\t\tlimits {\n\t\t\tredis_cluster rediss://gw:hunter2@a:6379 rediss://gw:hunter3@b:6379\n\t\t}\n" + tail,
			[]string{"limits: redis_cluster", "URL 2 of 2", "password"},
		},
		"redis sentinel without a sentinel": {
			head + "\t\tlimits {\n\t\t\tredis_sentinel counters\n\t\t}\n" + tail,
			[]string{"limits: redis_sentinel", "<master-name> <sentinel-url>"},
		},
		"counters in two places": {
			head + "\t\tlimits {\n\t\t\tredis redis://cache:6379\n\t\t\tredis_sentinel counters redis://s1:26379\n\t\t}\n" + tail,
			[]string{"redis, redis_cluster and redis_sentinel", "set one"},
		},
		"redis prefix with a hash tag": {
			head + "\t\tlimits {\n\t\t\tredis_prefix {gw}\n\t\t}\n" + tail,
			[]string{"redis_prefix", "hash tags"},
		},
		"model declared twice": {
			head + "\t\tmodel a {\n\t\t\tcandidate c {\n" + full + "\t\t\t}\n\t\t}\n\t\tmodel a {\n\t\t\tcandidate c {\n" + full + "\t\t\t}\n\t\t}\n" + tail,
			[]string{`"a"`, "twice"},
		},
	}
	t.Setenv("SWITCHYARD_TEST_UNSET_CREDENTIAL", "")
	refusedNaming(t, cases, validate)
	for name, c := range cases {
		if err := validate(t, c.src); err != nil {
			assert.NotContains(t, err.Error(), "hunter2", "%s: a Redis URL's password is never echoed", name)
		}
	}
}

// A candidate may have no credential at all (a local upstream without auth), and a
// credential from a variable that is set loads; only one that comes out empty is refused.
func TestCredentialMayBeAbsentButNotEmpty(t *testing.T) {
	src := func(cred string) string {
		return "{\n\tswitchyard {\n\t\tmodel m {\n\t\t\tcandidate c {\n\t\t\t\tprotocol family_a\n" +
			"\t\t\t\turl http://127.0.0.1:9/v1\n\t\t\t\tupstream_model up\n" + cred + "\t\t\t}\n\t\t}\n\t}\n}\n"
	}
	require.NoError(t, validate(t, src("")), "no credential line")
	t.Setenv("SWITCHYARD_TEST_CREDENTIAL", "sk-upstream-secret-value-42")
	require.NoError(t, validate(t, src("\t\t\t\tcredential {env.SWITCHYARD_TEST_CREDENTIAL}\n")))

	t.Setenv("SWITCHYARD_TEST_CREDENTIAL", "   ")
	err := validate(t, src("\t\t\t\tcredential {env.SWITCHYARD_TEST_CREDENTIAL}\n"))
	require.Error(t, err, "a credential of blanks is as empty as none")
	assert.Contains(t, err.Error(), `model "m", candidate "c": credential: {env.SWITCHYARD_TEST_CREDENTIAL} resolves to an empty value`)
}

// A directive refuses what it does not take, naming it; what each one adapts to is in
// testdata/caddyfile_adapt/directive_*.caddyfiletest.
func TestDirectivesRefuseWhatTheyDoNotTake(t *testing.T) {
	site := func(body string) string { return ":8080 {\n" + body + "}\n" }
	cases := map[string]errorCase{
		"simulator unknown option": {site("\tswitchyard_simulator {\n\t\tcolour blue\n\t}\n"), []string{"colour"}},
		"auth with an argument":    {site("\tswitchyard_auth strict\n"), []string{"switchyard_auth", "strict"}},
		"console with a block":     {site("\tswitchyard_console {\n\t\ttitle Ops\n\t}\n"), []string{"switchyard_console", "unknown option \"title\""}},
		"member without projects":  {site("\tswitchyard_console {\n\t\trole member group eng\n\t}\n"), []string{"role member needs the projects"}},
		"unknown role":             {site("\tswitchyard_console {\n\t\trole root group eng\n\t}\n"), []string{"unknown role"}},
		"break_glass maybe":        {site("\tswitchyard_console {\n\t\tbreak_glass maybe\n\t}\n"), []string{"want on or off"}},
		"sign_in unknown option":   {site("\tswitchyard_console {\n\t\tsign_in {\n\t\t\tpassword x\n\t\t}\n\t}\n"), []string{"sign_in: unknown option \"password\""}},
	}
	refusedNaming(t, cases, adaptErr)
}

func TestHealthAndAffinityBlocksIntoApp(t *testing.T) {
	cfg, err := adapt(t, `{
	switchyard {
		health {
			failure_threshold 4
			cooldown 1s
		}
		affinity {
			ttl 90s
		}
	}
}`)
	require.NoError(t, err)
	app := adaptedApp(t, cfg)
	require.NotNil(t, app.Health)
	require.NotNil(t, app.Affinity)

	// What is left unset falls back to the defaults in the policy the circuits use.
	p := app.Health.policy()
	assert.Equal(t, 4, p.FailureThreshold)
	assert.Equal(t, time.Second, p.Cooldown)
	assert.Equal(t, routing.DefaultHealthPolicy.Window, p.Window)
	assert.Equal(t, routing.DefaultHealthPolicy.MaxCooldown, p.MaxCooldown)
	assert.Equal(t, routing.DefaultHealthPolicy.HalfOpenProbes, p.HalfOpenProbes)
	assert.Equal(t, routing.DefaultProbeInterval, p.ProbeInterval, "probes are on by default")
	assert.Equal(t, routing.DefaultProbeMaxInterval, p.ProbeMaxInterval)
	assert.Equal(t, caddy.Duration(90*time.Second), app.Affinity.TTL)
	assert.False(t, app.Affinity.Disabled)
}

func TestBadHealthAffinityAndTimeoutValuesNameTheOption(t *testing.T) {
	global := func(body string) string { return "{\n\tswitchyard {\n" + body + "\t}\n}\n" }
	health := func(line string) string { return global("\t\thealth {\n\t\t\t" + line + "\n\t\t}\n") }
	affinity := func(line string) string { return global("\t\taffinity {\n\t\t\t" + line + "\n\t\t}\n") }
	candidate := func(line string) string {
		return global("\t\tmodel gpt-x {\n\t\t\tcandidate east {\n\t\t\t\tprotocol family_a\n\t\t\t\turl http://127.0.0.1:9/v1\n\t\t\t\tupstream_model up\n\t\t\t\t" +
			line + "\n\t\t\t}\n\t\t}\n")
	}
	cases := map[string]errorCase{
		"threshold not a number":   {health("failure_threshold many"), []string{"failure_threshold", `"many"`}},
		"threshold zero":           {health("failure_threshold 0"), []string{"failure_threshold"}},
		"threshold missing":        {health("failure_threshold"), []string{"failure_threshold"}},
		"probes negative":          {health("half_open_probes -1"), []string{"half_open_probes"}},
		"window not a duration":    {health("window soon"), []string{"window", `"soon"`}},
		"window zero":              {health("window 0s"), []string{"window"}},
		"cooldown negative":        {health("cooldown -5s"), []string{"cooldown"}},
		"max_cooldown bad":         {health("max_cooldown forever"), []string{"max_cooldown", `"forever"`}},
		"health two values":        {health("cooldown 1s 2s"), []string{"health", "cooldown", "one value"}},
		"health unknown option":    {health("retries 3"), []string{"health", `"retries"`}},
		"health takes no argument": {global("\t\thealth on {\n\t\t}\n"), []string{"health", "no arguments"}},
		"probe kind unknown":       {health("probe generate"), []string{"probe", `"generate"`, "models or off"}},
		"probe interval zero":      {health("probe_interval 0s"), []string{"probe_interval"}},
		"probe max not a duration": {health("probe_max_interval often"), []string{"probe_max_interval", `"often"`}},
		"probe max below interval": {global("\t\thealth {\n\t\t\tprobe_interval 3s\n\t\t\tprobe_max_interval 2s\n\t\t}\n"), []string{"probe_max_interval 2s", "probe_interval 3s"}},
		"probe max below default":  {health("probe_max_interval 500ms"), []string{"probe_max_interval 500ms", "probe_interval 1s"}},
		"ttl not a duration":       {affinity("ttl long"), []string{"ttl", `"long"`}},
		"ttl zero":                 {affinity("ttl 0"), []string{"ttl"}},
		"max_entries zero":         {affinity("max_entries 0"), []string{"max_entries"}},
		"max_entries not a number": {affinity("max_entries lots"), []string{"max_entries", `"lots"`}},
		"header missing":           {affinity("header"), []string{"header"}},
		"affinity unknown option":  {affinity("sticky yes"), []string{"affinity", `"sticky"`}},
		"affinity bad argument":    {global("\t\taffinity on\n"), []string{"affinity"}},
		"max_body_memory bad":      {global("\t\tmax_body_memory plenty\n"), []string{"max_body_memory", `"plenty"`}},
		"max_body_memory missing":  {global("\t\tmax_body_memory\n"), []string{"max_body_memory"}},
		"first_byte_timeout bad":   {candidate("first_byte_timeout later"), []string{`"gpt-x"`, `"east"`, "first_byte_timeout", `"later"`}},
		"first_byte_timeout zero":  {candidate("first_byte_timeout 0s"), []string{`"east"`, "first_byte_timeout"}},
		"idle_timeout bad":         {candidate("idle_timeout never"), []string{`"gpt-x"`, `"east"`, "idle_timeout", `"never"`}},
		"idle_timeout negative":    {candidate("idle_timeout -1s"), []string{`"east"`, "idle_timeout"}},
		"idle_timeout two values":  {candidate("idle_timeout 1s 2s"), []string{`"east"`, "idle_timeout"}},
	}
	refusedNaming(t, cases, adaptErr)
}

// The adapted numbers are in option_switchyard_model.caddyfiletest; provisioned, they
// reach the catalog the handlers read.
func TestModelWindowAndOutputCapReachTheCatalog(t *testing.T) {
	got, ok := provisionedApp(t, `{
	switchyard {
		model m {
			context_window 200000
			max_output_tokens 64000
			candidate c {
				protocol family_b
				url https://api.example.com
				upstream_model real
			}
		}
	}
}`).catalog.Lookup("m")
	require.True(t, ok)
	assert.Equal(t, int64(200000), got.ContextWindow)
	assert.Equal(t, int64(64000), got.MaxOutputTokens)
}

// `caddy validate` refuses limits that are not positive whole numbers, and an output cap
// above the window, naming the model and the field.
func TestBadModelLimitsNameModelAndField(t *testing.T) {
	model := func(lines string) string {
		return "{\n\tswitchyard {\n\t\tmodel gpt-x {\n" + lines +
			"\t\t\tcandidate east {\n\t\t\t\tprotocol family_a\n\t\t\t\turl http://127.0.0.1:9/v1\n\t\t\t\tupstream_model up\n\t\t\t}\n\t\t}\n\t}\n}\n"
	}
	cases := map[string]errorCase{
		"window zero":             {model("\t\t\tcontext_window 0\n"), []string{`"gpt-x"`, "context_window", `"0"`, "positive"}},
		"window negative":         {model("\t\t\tcontext_window -5\n"), []string{`"gpt-x"`, "context_window", `"-5"`}},
		"window with a unit":      {model("\t\t\tcontext_window 200k\n"), []string{`"gpt-x"`, "context_window", `"200k"`}},
		"window fraction":         {model("\t\t\tcontext_window 1.5\n"), []string{`"gpt-x"`, "context_window"}},
		"window missing":          {model("\t\t\tcontext_window\n"), []string{`"gpt-x"`, "context_window"}},
		"window two values":       {model("\t\t\tcontext_window 1 2\n"), []string{`"gpt-x"`, "context_window", "one number"}},
		"cap zero":                {model("\t\t\tmax_output_tokens 0\n"), []string{`"gpt-x"`, "max_output_tokens", `"0"`}},
		"cap not a number":        {model("\t\t\tmax_output_tokens lots\n"), []string{`"gpt-x"`, "max_output_tokens", `"lots"`}},
		"cap above the window":    {model("\t\t\tcontext_window 8000\n\t\t\tmax_output_tokens 16000\n"), []string{`"gpt-x"`, "max_output_tokens", "16000", "context_window", "8000"}},
		"cap above, window after": {model("\t\t\tmax_output_tokens 16000\n\t\t\tcontext_window 8000\n"), []string{`"gpt-x"`, "max_output_tokens", "above"}},
	}
	refusedNaming(t, cases, validate)
	// At the window is allowed.
	require.NoError(t, validate(t, model("\t\t\tcontext_window 8000\n\t\t\tmax_output_tokens 8000\n")))
}

// JSON configuration (caddy run --config x.json) skips the Caddyfile's checks; the same
// limits are refused when the app is provisioned.
func TestBadModelLimitsInJSONAreRefusedAtProvision(t *testing.T) {
	for name, c := range map[string]struct {
		window, limit int64
		want          string
	}{
		"negative window": {-1, 0, "context_window"},
		"negative cap":    {0, -1, "max_output_tokens"},
		"cap above":       {100, 200, "above the model's context_window of 100"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("XDG_DATA_HOME", t.TempDir())
			a := App{Models: []ModelConfig{{
				ID: "m", ContextWindow: c.window, MaxOutputTokens: c.limit,
				Candidates: []CandidateConfig{{Name: "c", Protocol: "family_a", URL: "http://127.0.0.1:9/v1", UpstreamModel: "u"}},
			}}}
			ctx, cancel := caddy.NewContext(caddy.Context{Context: t.Context()})
			defer cancel()
			err := a.Provision(ctx)
			require.Error(t, err)
			assert.Contains(t, err.Error(), `model "m"`)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// Each candidate gets the retry block's policy unless it sets its own count; each model
// the block's deadline unless it sets its own; a model with the reasoning capability gives
// its candidates the longer wait for a first event.
func TestRetryAndDeadlineDefaultsReachTheCandidates(t *testing.T) {
	cand := func(name, extra string) string {
		return "\t\t\tcandidate " + name + " {\n\t\t\t\tprotocol family_a\n\t\t\t\turl http://127.0.0.1:9/v1\n\t\t\t\tupstream_model m\n" + extra + "\t\t\t}\n"
	}
	app := provisionedApp(t, "{\n\tswitchyard {\n\t\tstore off\n"+
		"\t\tretry {\n\t\t\tretries 2\n\t\t\tbackoff 250ms 4s\n\t\t\trequest_timeout 90s\n\t\t}\n"+
		"\t\tmodel plain {\n\t\t\trequest_timeout 2m\n"+cand("own", "\t\t\t\tretries 0\n\t\t\t\tfirst_token_timeout 3s\n")+cand("inherits", "")+"\t\t}\n"+
		"\t\tmodel thinker {\n\t\t\treasoning true\n"+cand("a", "")+"\t\t}\n"+
		"\t}\n}\n:0 {\n\tswitchyard_proxy\n}\n")
	plain, ok := app.catalog.Lookup("plain")
	require.True(t, ok)
	assert.Equal(t, 2*time.Minute, plain.RequestTimeout, "the model's own deadline")
	assert.Equal(t, routing.Retry{Retries: 0, Backoff: 250 * time.Millisecond, MaxBackoff: 4 * time.Second}, plain.Candidates[0].Retry)
	assert.Equal(t, 3*time.Second, plain.Candidates[0].Timeouts.FirstToken)
	assert.Equal(t, 2, plain.Candidates[1].Retry.Retries, "the block's count")
	assert.Zero(t, plain.Candidates[1].Timeouts.FirstToken, "the relay's default (15 s)")

	thinker, ok := app.catalog.Lookup("thinker")
	require.True(t, ok)
	assert.Equal(t, 90*time.Second, thinker.RequestTimeout, "the block's deadline")
	assert.Equal(t, relay.DefaultReasoningFirstToken, thinker.Candidates[0].Timeouts.FirstToken)

	bare := provisionedApp(t, "{\n\tswitchyard {\n\t\tstore off\n\t\tmodel m {\n"+cand("a", "")+"\t\t}\n\t}\n}\n:0 {\n\tswitchyard_proxy\n}\n")
	m, _ := bare.catalog.Lookup("m")
	assert.Equal(t, routing.DefaultRetry, m.Candidates[0].Retry, "one retry, 500 ms to 8 s, without a retry block")
	assert.Equal(t, routing.DefaultRequestTimeout, m.RequestTimeout)
	assert.False(t, m.FailoverAfterTimeout, "off unless asked for")
}

// failover_after_timeout in the retry block reaches every model that does not set its
// own; a model's own wins either way.
func TestFailoverAfterTimeoutReachesTheModels(t *testing.T) {
	cand := "\t\t\tcandidate a {\n\t\t\t\tprotocol family_a\n\t\t\t\turl http://127.0.0.1:9/v1\n\t\t\t\tupstream_model m\n\t\t\t}\n"
	app := provisionedApp(t, "{\n\tswitchyard {\n\t\tstore off\n"+
		"\t\tretry {\n\t\t\tfailover_after_timeout\n\t\t}\n"+
		"\t\tmodel inherits {\n"+cand+"\t\t}\n"+
		"\t\tmodel declines {\n\t\t\tfailover_after_timeout false\n"+cand+"\t\t}\n"+
		"\t}\n}\n:0 {\n\tswitchyard_proxy\n}\n")
	inherits, _ := app.catalog.Lookup("inherits")
	declines, _ := app.catalog.Lookup("declines")
	assert.True(t, inherits.FailoverAfterTimeout)
	assert.False(t, declines.FailoverAfterTimeout)

	for _, bad := range []string{"failover_after_timeout maybe", "failover_after_timeout true false"} {
		_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte("{\n\tswitchyard {\n\t\tretry {\n\t\t\t"+bad+"\n\t\t}\n\t}\n}\n"), nil)
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), "failover_after_timeout")
	}
}
