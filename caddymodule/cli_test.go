package caddymodule

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
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

	for _, c := range []struct{ name, method, path string }{
		{"list", "GET", "/switchyard/keys"},
		{"show", "GET", "/switchyard/keys/key_1"},
		{"rotate", "POST", "/switchyard/keys/key_1/rotate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			cl := &cli{address: srv.URL, out: &out, client: srv.Client()}
			show := map[string]func(map[string]json.RawMessage) error{
				"list": cl.printKeys, "show": cl.printKey, "rotate": cl.printSecret,
			}[c.name]
			require.NoError(t, cl.call(c.method, c.path, nil, show))
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
