package caddymodule

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/switchyard-gw/switchyard/connect"
	"github.com/switchyard-gw/switchyard/console"
)

// connectCommand is `caddy switchyard connect <client>`.
func (c *cli) connectCommand() *cobra.Command {
	var baseURL, keyEnv, keyID, model, dir string
	var write, force bool
	cmd := &cobra.Command{
		Use:   "connect <" + strings.Join(connect.Clients, "|") + "> --base-url <url>",
		Short: "Prints (or writes) a client's configuration for this gateway",
		Long: `Prints the configuration a client needs for this gateway, for the models a key may
call (--key) or for every model: the base address of the client's protocol family,
the models with their context windows and output caps where the client can be told
them, and the name of the environment variable that holds the key. The key itself
is never printed or written.

  codex        config.toml with a Responses provider, and a profile per model
  claude-code  the environment (--write: the env block of settings.json)
  openai       OPENAI_BASE_URL and OPENAI_API_KEY
  anthropic    ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY

--write puts Codex's files in $CODEX_HOME (default ~/.codex) and Claude Code's in
$CLAUDE_CONFIG_DIR (default ~/.claude), or in --dir.`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: connect.Clients,
		RunE: func(cmd *cobra.Command, args []string) error {
			setup, err := c.fetchSetup(args[0], baseURL, keyEnv, keyID, model)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if !write {
				_, err := io.WriteString(out, setup.Text)
				return err
			}
			if dir == "" {
				home, _ := os.UserHomeDir()
				if dir, err = connect.DefaultDir(setup.Client, os.Getenv, home); err != nil {
					return err
				}
			}
			done, err := connect.Write(setup, dir, force)
			for _, line := range done {
				fmt.Fprintln(out, line)
			}
			if err == nil {
				fmt.Fprintf(out, "The key is read from $%s; set it before starting %s.\n", keyEnvOrDefault(keyEnv), setup.Client)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&baseURL, "base-url", "", "the gateway's address as clients reach it, without /v1 (required)")
	f.StringVar(&keyEnv, "key-env", connect.DefaultKeyEnv, "the environment variable that holds the key")
	f.StringVar(&keyID, "key", "", "a key id: set up only the models this key may call (default: every model)")
	f.StringVar(&model, "model", "", "the model the client starts with (default: the first of its family)")
	f.BoolVar(&write, "write", false, "write the files instead of printing them (codex, claude-code)")
	f.StringVar(&dir, "dir", "", "the directory --write writes into")
	f.BoolVar(&force, "force", false, "with --write, replace a Codex file this command did not write")
	_ = cmd.MarkFlagRequired("base-url")
	return cmd
}

func keyEnvOrDefault(v string) string {
	if v == "" {
		return connect.DefaultKeyEnv
	}
	return v
}

// fetchSetup asks the gateway for a set-up.
func (c *cli) fetchSetup(client, baseURL, keyEnv, keyID, model string) (*connect.Setup, error) {
	q := url.Values{"base_url": {baseURL}, "key_env": {keyEnv}}
	if keyID != "" {
		q.Set("key", keyID)
	}
	if model != "" {
		q.Set("model", model)
	}
	status, raw, err := c.send("GET", routePath("connect", client)+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	var answer console.SetupAnswer
	if json.Unmarshal(raw, &answer) != nil || answer.Setup == nil {
		return nil, unexpected(status, raw)
	}
	return answer.Setup, nil
}
