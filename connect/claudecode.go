package connect

import (
	"encoding/json"
	"fmt"
	"strings"
)

// claudeCode is Claude Code's set-up: its environment, as shell exports to print and as
// the env block of settings.json to write. Both carry the gateway's root address (Claude
// Code adds /v1 itself), one Family B model for the main model and for every alias
// (opus, sonnet, haiku: the small model of background tasks, and subagents that name an
// alias), the model's window and output cap in the variables Claude Code 2.1 reads, and
// gateway model discovery so its model picker lists the gateway's models.
//
// The key: the shell form passes $KEYENV as ANTHROPIC_AUTH_TOKEN (sent as Bearer);
// settings.json cannot refer to a variable in its env block, so it names a command that
// prints the variable (apiKeyHelper), and the file holds no key either way.
func claudeCode(r Request) (*Setup, error) {
	models, main, err := pick(r, familyB, "Claude Code")
	if err != nil {
		return nil, err
	}
	s := &Setup{Client: ClaudeCode, Title: titles[ClaudeCode], Models: ids(models)}

	key := Var{"ANTHROPIC_AUTH_TOKEN", "$" + r.KeyEnv}
	vars := []Var{
		{"ANTHROPIC_BASE_URL", r.BaseURL},
		{"ANTHROPIC_MODEL", main.ID},
		{"ANTHROPIC_DEFAULT_OPUS_MODEL", main.ID},
		{"ANTHROPIC_DEFAULT_SONNET_MODEL", main.ID},
		{"ANTHROPIC_DEFAULT_HAIKU_MODEL", main.ID},
	}
	comments := map[string]string{
		"ANTHROPIC_BASE_URL":                         "the gateway's root: Claude Code adds /v1 itself",
		"ANTHROPIC_AUTH_TOKEN":                       "the key, sent as Bearer; no file holds it",
		"ANTHROPIC_MODEL":                            "a model the gateway serves on Family B",
		"ANTHROPIC_DEFAULT_HAIKU_MODEL":              "the small model of background tasks",
		"CLAUDE_CODE_MAX_CONTEXT_TOKENS":             "the model's window: without it Claude Code does not know the model",
		"CLAUDE_CODE_AUTO_COMPACT_WINDOW":            "the window auto-compaction works against",
		"CLAUDE_CODE_MAX_OUTPUT_TOKENS":              "its output cap: the gateway refuses a larger max_tokens",
		"CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY": "the model picker lists the gateway's models",
		"CLAUDE_CODE_MAX_RETRIES":                    "give up within seconds on an answer retrying cannot change",
	}
	if main.ContextWindow > 0 {
		vars = append(vars,
			Var{"CLAUDE_CODE_MAX_CONTEXT_TOKENS", itoa(main.ContextWindow)},
			Var{"CLAUDE_CODE_AUTO_COMPACT_WINDOW", itoa(main.ContextWindow)})
	}
	if main.MaxOutputTokens > 0 {
		vars = append(vars, Var{"CLAUDE_CODE_MAX_OUTPUT_TOKENS", itoa(main.MaxOutputTokens)})
	}
	vars = append(vars,
		Var{"CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY", "1"},
		Var{"CLAUDE_CODE_MAX_RETRIES", "2"})
	s.Env = append([]Var{vars[0], key}, vars[1:]...)

	env := map[string]string{}
	for _, v := range vars {
		env[v.Name] = v.Value
	}
	settings, _ := json.MarshalIndent(map[string]any{"env": env, "apiKeyHelper": "printenv " + r.KeyEnv}, "", "  ")
	s.Files = []File{{Name: "settings.json", Path: "~/.claude/settings.json", Content: string(settings) + "\n"}}

	var t strings.Builder
	fmt.Fprintf(&t, "# %s for the Switchyard gateway at %s.\n", s.Title, r.BaseURL)
	t.WriteString("# Family B models this key may call:\n")
	t.WriteString(modelList(models))
	if main.ContextWindow <= 0 {
		fmt.Fprintf(&t, "# The gateway declares no context window for %s: Claude Code will say it does\n# not recognize the model and assume one.\n", oneLine(main.ID))
	}
	t.WriteString(exports(s.Env, comments))
	fmt.Fprintf(&t, "# --write puts the same variables in the env block of %s, with\n", s.Files[0].Path)
	fmt.Fprintf(&t, "# \"apiKeyHelper\": \"printenv %s\" for the key.\n", r.KeyEnv)
	s.Text = t.String()
	return s, nil
}
