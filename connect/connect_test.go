package connect_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/connect"
)

var models = []connect.Model{
	{ID: "gpt-big", Protocols: []string{"family_a"}, ContextWindow: 400000, MaxOutputTokens: 128000},
	{ID: "claude-like", Protocols: []string{"family_b"}, ContextWindow: 200000, MaxOutputTokens: 64000},
	{ID: "omni.v2", Protocols: []string{"family_a", "family_b"}, ContextWindow: 1000000, MaxOutputTokens: 32000},
	{ID: "bare", Protocols: []string{"family_a", "family_b"}},
}

const base = "https://gw.example.com"

func gen(t *testing.T, r connect.Request) *connect.Setup {
	t.Helper()
	if r.BaseURL == "" {
		r.BaseURL = base
	}
	if r.Models == nil {
		r.Models = models
	}
	s, err := connect.Generate(r)
	require.NoError(t, err)
	return s
}

func file(t *testing.T, s *connect.Setup, name string) string {
	t.Helper()
	for _, f := range s.Files {
		if f.Name == name {
			return f.Content
		}
	}
	t.Fatalf("no file %s in %v", name, s.Files)
	return ""
}

// assertNoKey: a set-up names the key's variable and never holds a key.
func assertNoKey(t *testing.T, s *connect.Setup) {
	t.Helper()
	all := s.Text
	for _, f := range s.Files {
		all += f.Content
	}
	assert.NotContains(t, all, "sk-", "a set-up never holds a key")
}

func TestCodexSetup(t *testing.T) {
	s := gen(t, connect.Request{Client: connect.Codex, KeyEnv: "GW_KEY"})
	assert.Equal(t, []string{"gpt-big", "omni.v2", "bare"}, s.Models, "Family A models only, in the gateway's order")
	assertNoKey(t, s)

	var cfg struct {
		Model                      string                    `toml:"model"`
		ModelProvider              string                    `toml:"model_provider"`
		ModelContextWindow         int64                     `toml:"model_context_window"`
		ModelAutoCompactTokenLimit int64                     `toml:"model_auto_compact_token_limit"`
		ModelProviders             map[string]map[string]any `toml:"model_providers"`
	}
	_, err := toml.Decode(file(t, s, "config.toml"), &cfg)
	require.NoError(t, err, "config.toml is TOML")
	assert.Equal(t, "gpt-big", cfg.Model, "the first Family A model is the default")
	assert.Equal(t, "switchyard", cfg.ModelProvider)
	// bare declares no window, and its profile could not unset one set here.
	assert.Zero(t, cfg.ModelContextWindow, "no window in config.toml while a model declares none")
	assert.Contains(t, file(t, s, "config.toml"), "codex --profile gpt-big")
	p := cfg.ModelProviders["switchyard"]
	assert.Equal(t, base+"/v1", p["base_url"], "Family A base: {base_url}/v1")
	assert.Equal(t, "responses", p["wire_api"])
	assert.Equal(t, "GW_KEY", p["env_key"], "the variable's name, not a key")
	assert.True(t, strings.HasPrefix(file(t, s, "config.toml"), connect.CodexMarker))

	// One profile per Family A model; names Codex accepts (it refuses dots).
	names := []string{}
	for _, f := range s.Files[1:] {
		names = append(names, f.Name)
		assert.True(t, strings.HasPrefix(f.Content, connect.CodexMarker), f.Name)
	}
	assert.Equal(t, []string{"gpt-big.config.toml", "omni-v2.config.toml", "bare.config.toml"}, names)
	var prof map[string]any
	_, err = toml.Decode(file(t, s, "omni-v2.config.toml"), &prof)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{
		"model": "omni.v2", "model_provider": "switchyard",
		"model_context_window": int64(1000000), "model_auto_compact_token_limit": int64(244800),
	}, prof)
	prof = nil
	_, err = toml.Decode(file(t, s, "bare.config.toml"), &prof)
	require.NoError(t, err)
	assert.NotContains(t, prof, "model_context_window", "no window declared, none written")
	assert.Contains(t, file(t, s, "bare.config.toml"), "declares no context window")

	assert.Contains(t, s.Text, "no setting for a model's output cap", "says why no output cap is written")
	for _, f := range s.Files {
		assert.Contains(t, s.Text, f.Content, "the printed text holds every file")
	}

	// When every model declares its window, the default's goes in config.toml too, so
	// that plain `codex` knows it.
	all := gen(t, connect.Request{Client: connect.Codex, Models: models[:3]})
	_, err = toml.Decode(file(t, all, "config.toml"), &cfg)
	require.NoError(t, err)
	assert.Equal(t, int64(400000), cfg.ModelContextWindow)
	// Codex 0.169 works with at most 272000 tokens of an unknown model's window, so the
	// compaction limit is 90% of that.
	assert.Equal(t, int64(244800), cfg.ModelAutoCompactTokenLimit, "a little under the window Codex uses")
	assert.Contains(t, file(t, all, "config.toml"), "uses at most 272000")
	small := gen(t, connect.Request{Client: connect.Codex, Models: []connect.Model{{ID: "s", Protocols: []string{"family_a"}, ContextWindow: 128000}}})
	_, err = toml.Decode(file(t, small, "config.toml"), &cfg)
	require.NoError(t, err)
	assert.Equal(t, int64(128000), cfg.ModelContextWindow)
	assert.Equal(t, int64(115200), cfg.ModelAutoCompactTokenLimit)

	// A chosen model becomes the default.
	s = gen(t, connect.Request{Client: connect.Codex, Model: "bare"})
	assert.Contains(t, file(t, s, "config.toml"), "model = \"bare\"\n")
	assert.Contains(t, file(t, s, "config.toml"), "env_key = \"SWITCHYARD_API_KEY\"", "the default variable")
}

func TestClaudeCodeSetup(t *testing.T) {
	s := gen(t, connect.Request{Client: connect.ClaudeCode})
	assert.Equal(t, []string{"claude-like", "omni.v2", "bare"}, s.Models, "Family B models only")
	assertNoKey(t, s)
	env := map[string]string{}
	for _, v := range s.Env {
		env[v.Name] = v.Value
	}
	assert.Equal(t, map[string]string{
		"ANTHROPIC_BASE_URL":                         base, // without /v1
		"ANTHROPIC_AUTH_TOKEN":                       "$SWITCHYARD_API_KEY",
		"ANTHROPIC_MODEL":                            "claude-like",
		"ANTHROPIC_DEFAULT_OPUS_MODEL":               "claude-like",
		"ANTHROPIC_DEFAULT_SONNET_MODEL":             "claude-like",
		"ANTHROPIC_DEFAULT_HAIKU_MODEL":              "claude-like",
		"CLAUDE_CODE_MAX_CONTEXT_TOKENS":             "200000",
		"CLAUDE_CODE_AUTO_COMPACT_WINDOW":            "200000",
		"CLAUDE_CODE_MAX_OUTPUT_TOKENS":              "64000",
		"CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY": "1",
		"CLAUDE_CODE_MAX_RETRIES":                    "2",
	}, env)
	assert.Contains(t, s.Text, `export ANTHROPIC_AUTH_TOKEN="$SWITCHYARD_API_KEY"`, "the shell expands the variable")
	assert.Contains(t, s.Text, "export ANTHROPIC_BASE_URL=https://gw.example.com ")

	var settings struct {
		Env          map[string]string `json:"env"`
		APIKeyHelper string            `json:"apiKeyHelper"`
	}
	require.NoError(t, json.Unmarshal([]byte(file(t, s, "settings.json")), &settings))
	assert.Equal(t, "printenv SWITCHYARD_API_KEY", settings.APIKeyHelper, "the key comes from the variable")
	delete(env, "ANTHROPIC_AUTH_TOKEN")
	assert.Equal(t, env, settings.Env, "the same variables, less the key")

	// A main model without limits: no window variables, and the text says what follows.
	s = gen(t, connect.Request{Client: connect.ClaudeCode, Model: "bare"})
	for _, v := range s.Env {
		assert.NotContains(t, v.Name, "CONTEXT_TOKENS")
		assert.NotContains(t, v.Name, "COMPACT_WINDOW")
		assert.NotContains(t, v.Name, "OUTPUT_TOKENS")
	}
	assert.Contains(t, s.Text, "declares no context window for bare")
}

func TestSDKSetups(t *testing.T) {
	s := gen(t, connect.Request{Client: connect.OpenAI, KeyEnv: "K"})
	assert.Equal(t, []connect.Var{{Name: "OPENAI_BASE_URL", Value: base + "/v1"}, {Name: "OPENAI_API_KEY", Value: "$K"}}, s.Env)
	assert.Equal(t, []string{"gpt-big", "omni.v2", "bare"}, s.Models)
	assert.Contains(t, s.Text, "gpt-big  context window 400000, output cap 128000")
	assert.Empty(t, s.Files)

	s = gen(t, connect.Request{Client: connect.Anthropic, KeyEnv: "K"})
	assert.Equal(t, []connect.Var{{Name: "ANTHROPIC_BASE_URL", Value: base}, {Name: "ANTHROPIC_API_KEY", Value: "$K"}}, s.Env)
	assert.Equal(t, []string{"claude-like", "omni.v2", "bare"}, s.Models)
	assert.Contains(t, s.Text, "export ANTHROPIC_API_KEY=\"$K\"\n")
}

func TestGenerateRefuses(t *testing.T) {
	onlyA := []connect.Model{{ID: "a", Protocols: []string{"family_a"}}}
	for name, c := range map[string]struct {
		r    connect.Request
		want string
	}{
		"unknown client":            {connect.Request{Client: "cursor", BaseURL: base, Models: models}, `"cursor" is not one of codex, claude-code, openai, anthropic`},
		"no base URL":               {connect.Request{Client: connect.Codex, Models: models}, "base URL: required"},
		"relative base URL":         {connect.Request{Client: connect.Codex, BaseURL: "gw.example.com", Models: models}, "not an http or https address"},
		"base URL with /v1":         {connect.Request{Client: connect.Codex, BaseURL: base + "/v1/", Models: models}, "without /v1 (https://gw.example.com)"},
		"base URL with query":       {connect.Request{Client: connect.Codex, BaseURL: base + "?x=1", Models: models}, "query"},
		"base URL with a user":      {connect.Request{Client: connect.Codex, BaseURL: "https://u:p@gw.example.com", Models: models}, "base URL"},
		"variable name":             {connect.Request{Client: connect.Codex, BaseURL: base, KeyEnv: "$(rm -rf ~)", Models: models}, "not an environment variable name"},
		"no family B model":         {connect.Request{Client: connect.ClaudeCode, BaseURL: base, Models: onlyA}, "offers family_b, and this key may call none"},
		"no family A model":         {connect.Request{Client: connect.Codex, BaseURL: base, Models: models[1:2]}, "offers family_a"},
		"model of the other family": {connect.Request{Client: connect.Codex, BaseURL: base, Model: "claude-like", Models: models}, `"claude-like" is not a family_a model`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := connect.Generate(c.r)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	// A path prefix is kept, a trailing slash is not.
	s, err := connect.Generate(connect.Request{Client: connect.OpenAI, BaseURL: "https://gw.example.com/llm/", Models: models})
	require.NoError(t, err)
	assert.Equal(t, "https://gw.example.com/llm/v1", s.Env[0].Value)
}

// Model ids and addresses reach shell and TOML text quoted: an id with a quote, a space
// or a newline cannot end a string or a line early.
func TestOddModelIDsAreQuoted(t *testing.T) {
	odd := []connect.Model{{ID: "we\"ird id\nx", Protocols: []string{"family_a", "family_b"}, ContextWindow: 1000}}
	s := gen(t, connect.Request{Client: connect.Codex, Models: odd})
	var cfg map[string]any
	_, err := toml.Decode(file(t, s, "config.toml"), &cfg)
	require.NoError(t, err)
	assert.Equal(t, "we\"ird id\nx", cfg["model"])
	assert.Equal(t, "we-ird-id-x.config.toml", s.Files[1].Name)

	s = gen(t, connect.Request{Client: connect.ClaudeCode, Models: odd})
	assert.Contains(t, s.Text, "export ANTHROPIC_MODEL='we\"ird id\nx'")
	for _, line := range strings.Split(s.Text, "\n") {
		if strings.HasPrefix(line, "#   we") {
			assert.Contains(t, line, "we\"ird id?x", "comments stay on one line")
		}
	}
}

func TestWriteCodex(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "codex")
	s := gen(t, connect.Request{Client: connect.Codex})
	done, err := connect.Write(s, dir, false)
	require.NoError(t, err)
	assert.Len(t, done, len(s.Files))
	for _, f := range s.Files {
		got, err := os.ReadFile(filepath.Join(dir, f.Name))
		require.NoError(t, err)
		assert.Equal(t, f.Content, string(got))
		info, err := os.Stat(filepath.Join(dir, f.Name))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	}
	// Written again: replaced, since this command wrote them.
	done, err = connect.Write(s, dir, false)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(done[0], "replaced "), done[0])

	// A hand-written config.toml is kept unless --force.
	mine := "model = \"o3\"\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.toml"), []byte(mine), 0o600))
	_, err = connect.Write(s, dir, false)
	require.ErrorContains(t, err, "was not written by this command")
	got, _ := os.ReadFile(filepath.Join(dir, "config.toml"))
	assert.Equal(t, mine, string(got))
	_, err = connect.Write(s, dir, true)
	require.NoError(t, err)
	got, _ = os.ReadFile(filepath.Join(dir, "config.toml"))
	assert.Equal(t, s.Files[0].Content, string(got))
}

// Without --force, a hand-written Codex file stops --write before anything is written:
// the file is as it was, and no other file of the set-up appears beside it.
func TestWriteWithoutForceChangesNothing(t *testing.T) {
	dir := t.TempDir()
	s := gen(t, connect.Request{Client: connect.Codex})
	require.Greater(t, len(s.Files), 1)
	profile := s.Files[len(s.Files)-1].Name
	mine := "model = \"o3\"\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, profile), []byte(mine), 0o600))

	done, err := connect.Write(s, dir, false)
	require.ErrorContains(t, err, filepath.Join(dir, profile)+" exists and was not written by this command")
	require.ErrorContains(t, err, "--force")
	assert.Empty(t, done)
	got, err := os.ReadFile(filepath.Join(dir, profile))
	require.NoError(t, err)
	assert.Equal(t, mine, string(got), "the hand-written file is kept")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "nothing else was written")

	done, err = connect.Write(s, dir, true)
	require.NoError(t, err)
	assert.Contains(t, done, "replaced "+filepath.Join(dir, profile))
	got, _ = os.ReadFile(filepath.Join(dir, profile))
	assert.Equal(t, s.Files[len(s.Files)-1].Content, string(got))
}

// Claude Code sends a key from settings.json's env block instead of the key helper's,
// so each key variable found there is taken out, and the answer says so.
func TestWriteClaudeCodeTakesOutEachKeyVariable(t *testing.T) {
	for _, name := range []string{"ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			old := `{"env":{"` + name + `":"sk-stale-secret","FOO":"bar"}}`
			require.NoError(t, os.WriteFile(filepath.Join(dir, "settings.json"), []byte(old), 0o600))
			done, err := connect.Write(gen(t, connect.Request{Client: connect.ClaudeCode}), dir, false)
			require.NoError(t, err)
			require.Len(t, done, 1)
			assert.Contains(t, done[0], "removed the key variables "+name)

			raw, err := os.ReadFile(filepath.Join(dir, "settings.json"))
			require.NoError(t, err)
			assert.NotContains(t, string(raw), "sk-stale-secret")
			var got struct {
				Env          map[string]string `json:"env"`
				APIKeyHelper string            `json:"apiKeyHelper"`
			}
			require.NoError(t, json.Unmarshal(raw, &got))
			assert.NotContains(t, got.Env, name)
			assert.Equal(t, "bar", got.Env["FOO"])
			assert.Equal(t, "printenv SWITCHYARD_API_KEY", got.APIKeyHelper, "the helper gives the key")
		})
	}
}

func TestWriteClaudeCodeMergesSettings(t *testing.T) {
	dir := t.TempDir()
	old := `{"theme":"dark","env":{"FOO":"bar","ANTHROPIC_API_KEY":"sk-ant-old-secret","ANTHROPIC_MODEL":"old"},"permissions":{"allow":["Bash(ls)"]}}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "settings.json"), []byte(old), 0o600))
	s := gen(t, connect.Request{Client: connect.ClaudeCode})
	done, err := connect.Write(s, dir, false)
	require.NoError(t, err)
	assert.Contains(t, done[0], "removed the key variables ANTHROPIC_API_KEY")

	raw, err := os.ReadFile(filepath.Join(dir, "settings.json"))
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "sk-ant-old-secret", "a key found in the file is taken out")
	var got map[string]any
	require.NoError(t, json.Unmarshal(raw, &got))
	assert.Equal(t, "dark", got["theme"], "other settings stay")
	assert.Equal(t, map[string]any{"allow": []any{"Bash(ls)"}}, got["permissions"])
	env := got["env"].(map[string]any)
	assert.Equal(t, "bar", env["FOO"], "other variables stay")
	assert.Equal(t, "claude-like", env["ANTHROPIC_MODEL"])
	assert.Equal(t, "200000", env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"])
	assert.Equal(t, "printenv SWITCHYARD_API_KEY", got["apiKeyHelper"])

	require.NoError(t, os.WriteFile(filepath.Join(dir, "settings.json"), []byte("not json"), 0o600))
	_, err = connect.Write(s, dir, false)
	require.ErrorContains(t, err, "not a JSON object")
}

func TestWriteSDKSaysWhy(t *testing.T) {
	_, err := connect.Write(gen(t, connect.Request{Client: connect.OpenAI}), t.TempDir(), false)
	require.ErrorContains(t, err, "configured by environment variables")
}

func TestDefaultDir(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	d, err := connect.DefaultDir(connect.Codex, getenv, "/home/u")
	require.NoError(t, err)
	assert.Equal(t, "/home/u/.codex", d)
	env["CODEX_HOME"] = "/x/codex"
	d, _ = connect.DefaultDir(connect.Codex, getenv, "/home/u")
	assert.Equal(t, "/x/codex", d)
	d, _ = connect.DefaultDir(connect.ClaudeCode, getenv, "/home/u")
	assert.Equal(t, "/home/u/.claude", d)
	env["CLAUDE_CONFIG_DIR"] = "/y"
	d, _ = connect.DefaultDir(connect.ClaudeCode, getenv, "/home/u")
	assert.Equal(t, "/y", d)
	_, err = connect.DefaultDir(connect.Anthropic, getenv, "/home/u")
	require.Error(t, err)
}
