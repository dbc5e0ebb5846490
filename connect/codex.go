package connect

import (
	"fmt"
	"slices"
	"strings"
)

// CodexMarker starts every file the Codex set-up writes; --write replaces only files
// that start with it.
const CodexMarker = "# Written by `caddy switchyard connect codex`"

// codexProvider is the provider entry's name in config.toml.
const codexProvider = "switchyard"

// codexMaxWindow is the largest window Codex 0.169 works with for a model it has no
// metadata for (every gateway model): a larger model_context_window is cut to it
// (measured: 400000 and 300000 both give 272000, of which it counts 95% as usable).
const codexMaxWindow = 272000

// codexCompactLimit is where Codex compacts a conversation: at 90% of the window it
// works with, the share Codex itself uses for the models it knows, which leaves the
// rest for the answer and the summary.
func codexCompactLimit(window int64) int64 { return min(window, codexMaxWindow) * 9 / 10 }

// codex is Codex CLI's set-up: config.toml with a custom provider on the Responses API
// (the only wire API Codex 0.169 accepts) and the first model as the default, and one
// profile file per Family A model (Codex 0.169 keeps profiles in
// $CODEX_HOME/<name>.config.toml and refuses --profile while config.toml has a legacy
// [profiles] table), each with the model's window where the gateway declares one.
func codex(r Request) (*Setup, error) {
	models, main, err := pick(r, familyA, "Codex (Responses API only)")
	if err != nil {
		return nil, err
	}
	s := &Setup{Client: Codex, Title: titles[Codex], Models: ids(models)}

	used := map[string]bool{"config": true}
	profiles := make([]string, len(models))
	for i, m := range models {
		profiles[i] = codexProfileName(m.ID, used)
	}
	mainProfile := profiles[slices.IndexFunc(models, func(m Model) bool { return m.ID == main.ID })]

	var cfg strings.Builder
	fmt.Fprintf(&cfg, "%s for the Switchyard gateway at %s.\n", CodexMarker, r.BaseURL)
	fmt.Fprintf(&cfg, "model = %s\n", tomlString(main.ID))
	fmt.Fprintf(&cfg, "model_provider = %s\n", tomlString(codexProvider))
	// A profile cannot unset a key of config.toml: a window written there would also
	// apply to a profile whose model declares none. So the default model's window goes
	// there only when every model's profile sets its own.
	everyWindow := true
	for _, m := range models {
		everyWindow = everyWindow && m.ContextWindow > 0
	}
	if everyWindow || main.ContextWindow <= 0 {
		cfg.WriteString(codexWindow(main))
	} else {
		fmt.Fprintf(&cfg, "# The window of %s is in its profile (codex --profile %s): a window here would\n# also apply to the models that declare none.\n",
			oneLine(main.ID), mainProfile)
	}
	cfg.WriteString("\n[model_providers." + codexProvider + "]\n")
	cfg.WriteString("name = \"Switchyard\"\n")
	fmt.Fprintf(&cfg, "base_url = %s\n", tomlString(r.BaseURL+"/v1"))
	fmt.Fprintf(&cfg, "env_key = %s  # the variable's name; Codex sends its value as a Bearer token\n", tomlString(r.KeyEnv))
	cfg.WriteString("wire_api = \"responses\"  # the only value Codex still accepts\n")
	s.Files = append(s.Files, File{Name: "config.toml", Path: "~/.codex/config.toml", Content: cfg.String()})

	for i, m := range models {
		name := profiles[i]
		var p strings.Builder
		fmt.Fprintf(&p, "%s: codex --profile %s\n", CodexMarker, name)
		fmt.Fprintf(&p, "model = %s\n", tomlString(m.ID))
		fmt.Fprintf(&p, "model_provider = %s\n", tomlString(codexProvider))
		p.WriteString(codexWindow(m))
		s.Files = append(s.Files, File{Name: name + ".config.toml", Path: "~/.codex/" + name + ".config.toml", Content: p.String()})
	}

	var t strings.Builder
	fmt.Fprintf(&t, "# %s for the Switchyard gateway at %s.\n", s.Title, r.BaseURL)
	t.WriteString("# Codex speaks only the Responses API, so its provider lists the Family A models\n")
	t.WriteString("# this key may call:\n")
	t.WriteString(modelList(models))
	fmt.Fprintf(&t, "# The key is read from $%s; no file holds it.\n", r.KeyEnv)
	t.WriteString("# Codex 0.169 has no setting for a model's output cap, so none is written.\n")
	t.WriteString("# Files go in $CODEX_HOME (default ~/.codex); --write writes them there.\n")
	for _, f := range s.Files {
		fmt.Fprintf(&t, "\n# ---- %s\n%s", f.Path, f.Content)
	}
	s.Text = t.String()
	return s, nil
}

// codexWindow is the window lines of a model, or a comment saying there is none.
func codexWindow(m Model) string {
	if m.ContextWindow <= 0 {
		return "# The gateway declares no context window for this model: Codex uses its fallback.\n"
	}
	if m.ContextWindow > codexMaxWindow {
		return fmt.Sprintf("model_context_window = %d  # Codex 0.169 uses at most %d of it for a model it has no metadata for\n"+
			"model_auto_compact_token_limit = %d  # 90%% of %d\n", m.ContextWindow, codexMaxWindow, codexCompactLimit(m.ContextWindow), codexMaxWindow)
	}
	return fmt.Sprintf("model_context_window = %d\nmodel_auto_compact_token_limit = %d  # 90%% of the window\n",
		m.ContextWindow, codexCompactLimit(m.ContextWindow))
}

// codexProfileName makes a model id into a profile name Codex accepts (letters, digits,
// - and _; it refuses `--profile gpt-5.1`), unique among used.
func codexProfileName(id string, used map[string]bool) string {
	var b strings.Builder
	dash := false
	for _, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
		switch {
		case ok:
			b.WriteRune(r)
			dash = false
		case !dash && b.Len() > 0:
			b.WriteByte('-')
			dash = true
		}
	}
	name := strings.TrimRight(b.String(), "-")
	if name == "" {
		name = "model"
	}
	candidate := name
	for i := 2; used[candidate]; i++ {
		candidate = fmt.Sprintf("%s-%d", name, i)
	}
	used[candidate] = true
	return candidate
}
