package caddymodule

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func adapt(t *testing.T, src string) ([]byte, error) {
	t.Helper()
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
	return cfg, err
}

// validate adapts and provisions a Caddyfile without serving it, as `caddy validate` does.
func validate(t *testing.T, src string) error {
	t.Helper()
	cfg, err := adapt(t, src)
	if err != nil {
		return err
	}
	var c caddy.Config
	require.NoError(t, json.Unmarshal(cfg, &c))
	return caddy.Validate(&c)
}

func TestExampleCaddyfileValidates(t *testing.T) {
	src, err := os.ReadFile("../Caddyfile.example")
	require.NoError(t, err)
	cfg, err := adapt(t, string(src))
	require.NoError(t, err)

	var parsed struct {
		Apps struct {
			Switchyard App `json:"switchyard"`
		} `json:"apps"`
	}
	require.NoError(t, json.Unmarshal(cfg, &parsed))
	app := parsed.Apps.Switchyard
	require.NotEmpty(t, app.Models)
	assert.Equal(t, "sim-gpt", app.Models[0].ID)
	assert.Equal(t, []string{"family_a"}, app.Models[0].Protocols)
	assert.Equal(t, "1.25", app.Models[0].Prices.Input)
	assert.Equal(t, "family_a", app.Models[0].Candidates[0].Protocol)
	assert.Equal(t, "http://127.0.0.1:8081/v1", app.Models[0].Candidates[0].URL)
	assert.True(t, app.Models[0].Capabilities["reasoning"])

	require.NoError(t, validate(t, string(src)))
}

func TestHandlerOrderNeedsNoRouteBlock(t *testing.T) {
	// Written in a scrambled order, the handlers still run auth → model → proxy.
	cfg, err := adapt(t, `{
	switchyard {
		key k sk-0123456789abcdef0123
	}
}
http://127.0.0.1:9 {
	switchyard_proxy
	switchyard_model
	switchyard_auth
}`)
	require.NoError(t, err)
	s := string(cfg)
	auth, model, proxy := strings.Index(s, `"switchyard_auth"`), strings.Index(s, `"switchyard_model"`), strings.Index(s, `"switchyard_proxy"`)
	require.True(t, auth > 0 && model > 0 && proxy > 0, "%s", s)
	assert.Less(t, auth, model)
	assert.Less(t, model, proxy)
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

	var parsed struct {
		Apps struct {
			Switchyard App `json:"switchyard"`
		} `json:"apps"`
	}
	require.NoError(t, json.Unmarshal(cfg, &parsed))
	ctx, cancel := caddy.NewContext(caddy.Context{Context: t.Context()})
	defer cancel()
	app := parsed.Apps.Switchyard
	require.NoError(t, app.Provision(ctx))
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
	cases := map[string]struct {
		src  string
		want []string
	}{
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
			candidate(full + "\t\t\t\tretries 3\n"),
			[]string{`"gpt-x"`, `"east"`, `"retries"`},
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
		"short key": {
			head + "\t\tkey ops short\n" + tail,
			[]string{`"ops"`, "16"},
		},
		"model declared twice": {
			head + "\t\tmodel a {\n\t\t\tcandidate c {\n" + full + "\t\t\t}\n\t\t}\n\t\tmodel a {\n\t\t\tcandidate c {\n" + full + "\t\t\t}\n\t\t}\n" + tail,
			[]string{`"a"`, "twice"},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			err := validate(t, c.src)
			require.Error(t, err)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestSimulatorDirective(t *testing.T) {
	d := caddyfile.NewTestDispenser(`switchyard_simulator {
		api_key sk-sim
	}`)
	d.Next()
	var s Simulator
	require.NoError(t, s.UnmarshalCaddyfile(d))
	assert.Equal(t, "sk-sim", s.APIKey)

	d = caddyfile.NewTestDispenser(`switchyard_simulator {
		colour blue
	}`)
	d.Next()
	assert.ErrorContains(t, new(Simulator).UnmarshalCaddyfile(d), "colour")
}
