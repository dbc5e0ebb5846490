package connect

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// DefaultDir is where a client reads its configuration: $CODEX_HOME or ~/.codex for
// Codex, $CLAUDE_CONFIG_DIR or ~/.claude for Claude Code.
func DefaultDir(client string, getenv func(string) string, home string) (string, error) {
	switch client {
	case Codex:
		if d := getenv("CODEX_HOME"); d != "" {
			return d, nil
		}
		return filepath.Join(home, ".codex"), nil
	case ClaudeCode:
		if d := getenv("CLAUDE_CONFIG_DIR"); d != "" {
			return d, nil
		}
		return filepath.Join(home, ".claude"), nil
	}
	return "", errNoFiles(client)
}

func errNoFiles(client string) error {
	return fmt.Errorf("%s is configured by environment variables, not files: put the printed lines in your shell's profile, or run eval \"$(caddy switchyard connect %s ...)\"", client, client)
}

// Write puts a set-up's files into dir and returns what it did, one line per file.
//
// Codex's files are replaced only when they were written by this command before (they
// start with CodexMarker) or force is set, so a hand-written config.toml is never lost.
// Claude Code's settings.json is merged: the set-up's variables go into its env block,
// apiKeyHelper is set, and everything else in the file stays. A key found in that env
// block (ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN) is removed: a key does not belong in a
// file, and it would take precedence over the helper. When a file is refused, none is
// written.
func Write(s *Setup, dir string, force bool) ([]string, error) {
	if len(s.Files) == 0 {
		return nil, errNoFiles(s.Client)
	}
	// Every file is checked before any is written, so that a refusal leaves the
	// directory as it was, not half set up.
	type change struct {
		path, what string
		content    []byte
	}
	changes := make([]change, 0, len(s.Files))
	for _, f := range s.Files {
		path := filepath.Join(dir, f.Name)
		old, err := os.ReadFile(path)
		exists := err == nil
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		content := []byte(f.Content)
		what := "wrote"
		switch {
		case s.Client == ClaudeCode && exists:
			merged, removed, err := mergeSettings(old, f.Content)
			if err != nil {
				return nil, fmt.Errorf("%s: %v; fix or move the file, then run this again", path, err)
			}
			content, what = merged, "updated the env block and apiKeyHelper of"
			if len(removed) > 0 {
				what += " (removed the key variables " + strings.Join(removed, ", ") + " from it)"
			}
		case exists && !force && !bytes.HasPrefix(old, []byte(CodexMarker)):
			return nil, fmt.Errorf("%s exists and was not written by this command; merge the printed set-up by hand, or pass --force to replace it", path)
		case exists:
			what = "replaced"
		}
		changes = append(changes, change{path: path, what: what, content: content})
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var done []string
	for _, c := range changes {
		if err := writeFile(c.path, c.content); err != nil {
			return done, err
		}
		done = append(done, c.what+" "+c.path)
	}
	return done, nil
}

// writeFile replaces path atomically, readable by its owner only.
func writeFile(path string, content []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(content); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// mergeSettings puts the set-up's env block and apiKeyHelper into an existing
// settings.json, keeping every other setting.
func mergeSettings(old []byte, fresh string) ([]byte, []string, error) {
	var current map[string]any
	if len(bytes.TrimSpace(old)) > 0 {
		if err := json.Unmarshal(old, &current); err != nil {
			return nil, nil, fmt.Errorf("not a JSON object (%v)", err)
		}
	}
	if current == nil {
		current = map[string]any{}
	}
	var add struct {
		Env          map[string]string `json:"env"`
		APIKeyHelper string            `json:"apiKeyHelper"`
	}
	if err := json.Unmarshal([]byte(fresh), &add); err != nil {
		return nil, nil, err
	}
	env, ok := current["env"].(map[string]any)
	if current["env"] != nil && !ok {
		return nil, nil, errors.New(`"env" is not an object`)
	}
	if env == nil {
		env = map[string]any{}
	}
	var removed []string
	for _, name := range []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"} {
		if _, ok := env[name]; ok {
			delete(env, name)
			removed = append(removed, name)
		}
	}
	for k, v := range add.Env {
		env[k] = v
	}
	current["env"] = env
	current["apiKeyHelper"] = add.APIKeyHelper
	sort.Strings(removed)
	out, err := json.MarshalIndent(current, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	return append(out, '\n'), removed, nil
}
