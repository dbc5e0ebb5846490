// Package connect writes the configuration a client needs to use a Switchyard gateway:
// Codex CLI, Claude Code, and the OpenAI and Anthropic SDKs, for the models one key may
// call, with each model's context window and output cap where the client can be told
// them. The CLI (`caddy switchyard connect`), the console's "Connect a tool" view and the
// docs/clients.md all show what Generate returns. It knows nothing of Caddy.
//
// A key is never written: a set-up names the environment variable that holds it.
package connect

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The clients a set-up can be made for.
const (
	Codex      = "codex"
	ClaudeCode = "claude-code"
	OpenAI     = "openai"
	Anthropic  = "anthropic"
)

// Clients lists the clients in the order the CLI and the console offer them.
var Clients = []string{Codex, ClaudeCode, OpenAI, Anthropic}

// DefaultKeyEnv is the variable a set-up reads the key from when none is named.
const DefaultKeyEnv = "SWITCHYARD_API_KEY"

// The protocol tokens of GET /v1/models.
const (
	familyA = "family_a"
	familyB = "family_b"
)

// Model is a service model as a set-up needs it. Zero limits mean none was declared.
type Model struct {
	ID              string   `json:"id"`
	DisplayName     string   `json:"display_name,omitempty"`
	Protocols       []string `json:"protocols"`
	ContextWindow   int64    `json:"context_window,omitempty"`
	MaxOutputTokens int64    `json:"max_output_tokens,omitempty"`
}

func (m Model) offers(family string) bool { return slices.Contains(m.Protocols, family) }

// Request says what to set up.
type Request struct {
	Client string
	// BaseURL is the gateway's root, without /v1 (https://gateway.example.com).
	BaseURL string
	// KeyEnv names the environment variable holding the key (default DefaultKeyEnv).
	KeyEnv string
	// Model, when set, is the model the client starts with; by default the first model
	// of the client's family in Models.
	Model string
	// Models are the models the key may call, in the gateway's order.
	Models []Model
}

// File is one configuration file of a set-up.
type File struct {
	// Name is the file's name inside the client's configuration directory.
	Name string `json:"name"`
	// Path is where it goes by default, for people: ~/.codex/config.toml.
	Path    string `json:"path"`
	Content string `json:"content"`
}

// Var is one environment variable of a set-up; Value may refer to the key's variable
// ("$SWITCHYARD_API_KEY"), which a shell expands.
type Var struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Setup is a client's configuration for one gateway and key.
type Setup struct {
	Client string `json:"client"`
	Title  string `json:"title"`
	// Text is the whole set-up as `caddy switchyard connect` prints it.
	Text string `json:"text"`
	// Files are what `--write` writes into the client's configuration directory.
	Files []File `json:"files,omitempty"`
	// Env is the shell form of the set-up, for the clients configured by variables.
	Env []Var `json:"env,omitempty"`
	// Models are the models the set-up offers the client.
	Models []string `json:"models"`
}

// Title names each client with the version the set-up was checked against.
var titles = map[string]string{
	Codex:      "Codex CLI (@openai/codex 0.169)",
	ClaudeCode: "Claude Code (@anthropic-ai/claude-code 2.1)",
	OpenAI:     "OpenAI SDKs (npm openai 7.x; the Go and Python SDKs read the same variables)",
	Anthropic:  "Anthropic SDKs (npm @anthropic-ai/sdk 1.x; the Go and Python SDKs read the same variables)",
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Generate builds the set-up for r.Client, or says what is wrong with the request.
func Generate(r Request) (*Setup, error) {
	base, err := checkBaseURL(r.BaseURL)
	if err != nil {
		return nil, err
	}
	if r.KeyEnv == "" {
		r.KeyEnv = DefaultKeyEnv
	}
	if !envName.MatchString(r.KeyEnv) {
		return nil, fmt.Errorf("key variable: %q is not an environment variable name (letters, digits and _, not starting with a digit)", r.KeyEnv)
	}
	r.BaseURL = base
	switch r.Client {
	case Codex:
		return codex(r)
	case ClaudeCode:
		return claudeCode(r)
	case OpenAI:
		return sdk(r, familyA)
	case Anthropic:
		return sdk(r, familyB)
	}
	return nil, fmt.Errorf("client: %q is not one of %s", r.Client, strings.Join(Clients, ", "))
}

// checkBaseURL accepts the gateway's root address and returns it without a trailing
// slash. An address ending in /v1 is refused: Family A clients need /v1 and Family B
// clients must not have it, so the set-up adds it where it belongs.
func checkBaseURL(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", errors.New("base URL: required, the gateway's address such as https://gateway.example.com")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return "", fmt.Errorf("base URL: %q is not an http or https address such as https://gateway.example.com", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("base URL: %q must not have a query or fragment", raw)
	}
	path := strings.TrimRight(u.Path, "/")
	if path == "/v1" || strings.HasSuffix(path, "/v1") {
		return "", fmt.Errorf("base URL: give the gateway's root without /v1 (%s); each set-up adds /v1 where its client needs it",
			strings.TrimSuffix(strings.TrimRight(raw, "/"), "/v1"))
	}
	u.Path = path
	u.RawPath = ""
	return u.String(), nil
}

// pick returns the models offering family, and the one to start with.
func pick(r Request, family, client string) ([]Model, Model, error) {
	var offered []Model
	for _, m := range r.Models {
		if m.offers(family) {
			offered = append(offered, m)
		}
	}
	if len(offered) == 0 {
		return nil, Model{}, fmt.Errorf("%s needs a model that offers %s, and this key may call none", client, family)
	}
	if r.Model == "" {
		return offered, offered[0], nil
	}
	for _, m := range offered {
		if m.ID == r.Model {
			return offered, m, nil
		}
	}
	return nil, Model{}, fmt.Errorf("model: %q is not a %s model this key may call (%s)", r.Model, family, strings.Join(ids(offered), ", "))
}

func ids(models []Model) []string {
	out := make([]string, len(models))
	for i, m := range models {
		out[i] = m.ID
	}
	return out
}

// limits describes a model's declared limits for a comment.
func limits(m Model) string {
	switch {
	case m.ContextWindow > 0 && m.MaxOutputTokens > 0:
		return fmt.Sprintf("context window %d, output cap %d", m.ContextWindow, m.MaxOutputTokens)
	case m.ContextWindow > 0:
		return fmt.Sprintf("context window %d, no output cap declared", m.ContextWindow)
	case m.MaxOutputTokens > 0:
		return fmt.Sprintf("no context window declared, output cap %d", m.MaxOutputTokens)
	}
	return "no context window or output cap declared"
}

// modelList is a comment block listing models and their limits.
func modelList(models []Model) string {
	width := 0
	for _, m := range models {
		width = max(width, len(m.ID))
	}
	var b strings.Builder
	for _, m := range models {
		fmt.Fprintf(&b, "#   %-*s  %s\n", width, oneLine(m.ID), limits(m))
	}
	return b.String()
}

// oneLine keeps a configured text from ending a comment line early.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == 0x2028 || r == 0x2029 {
			return '?'
		}
		return r
	}, s)
}

// shellWord quotes s for a POSIX shell when it needs it.
func shellWord(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_./:@%+=,-", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// exports renders variables as shell export lines. A value of the form $NAME is
// written "$NAME", so the shell expands it.
func exports(vars []Var, comments map[string]string) string {
	width := 0
	lines := make([]string, len(vars))
	for i, v := range vars {
		value := shellWord(v.Value)
		if strings.HasPrefix(v.Value, "$") && envName.MatchString(v.Value[1:]) {
			value = `"` + v.Value + `"`
		}
		lines[i] = "export " + v.Name + "=" + value
		width = max(width, len(lines[i]))
	}
	var b strings.Builder
	for i, v := range vars {
		if c := comments[v.Name]; c != "" {
			fmt.Fprintf(&b, "%-*s  # %s\n", width, lines[i], c)
		} else {
			b.WriteString(lines[i] + "\n")
		}
	}
	return b.String()
}

// tomlString is s as a TOML basic string (JSON's string escapes are TOML's).
func tomlString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
