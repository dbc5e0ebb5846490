package caddymodule

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/relay"
)

// bodyGateway is the gateway's body path (key check, body read, model check) ending in a
// handler that waits for the whole body, as the proxy does before admission.
type bodyGateway struct {
	app  *App
	auth *Auth
	next caddyhttp.Handler
	// metrics is the registry of the app's configuration, as Caddy's /metrics serves it.
	metrics prometheus.Gatherer
}

func newBodyGateway(t *testing.T, ceiling int64) *bodyGateway {
	app := &App{
		Store: &StoreConfig{Driver: "off"},
		Keys:  []KeyConfig{{Name: "k", Secret: "sk-body-0123456789abcdef"}},
		Models: []ModelConfig{{
			ID:        "m",
			Protocols: []string{"family_a", "family_b"},
			Candidates: []CandidateConfig{{
				Name: "a", Protocol: "family_a", URL: "http://127.0.0.1:9/v1", UpstreamModel: "up",
			}, {
				Name: "b", Protocol: "family_b", URL: "http://127.0.0.1:9/v1", UpstreamModel: "up",
			}},
		}},
		MaxBodyMemory: ceiling,
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	require.NoError(t, app.Provision(ctx))
	require.Equal(t, ceiling, app.bodyMemory.Limit())
	// The same ceiling, with a shorter wait for room than the gateway's second.
	app.bodyMemory = relay.NewBodyMemory(ceiling, 50*time.Millisecond)
	model := &Model{app: app}
	whole := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		rt := caddyhttp.GetVar(r.Context(), varRoute).(*route)
		if rt.parsed == nil {
			if _, err := rt.body.Wait(); err != nil {
				return fail(err)
			}
		}
		w.WriteHeader(http.StatusOK)
		return nil
	})
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error { return model.ServeHTTP(w, r, whole) })
	return &bodyGateway{app: app, auth: &Auth{app: app}, next: next, metrics: ctx.GetMetricsRegistry()}
}

// send runs a request whose body comes from body, declaring length bytes; the error the
// gateway answered with, rendered as the client sees it, or the recorder of a success.
func (g *bodyGateway) send(path string, body io.Reader, length int64) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", path, body)
	req.ContentLength = length
	req.Header.Set("Authorization", "Bearer sk-body-0123456789abcdef")
	req.Header.Set("anthropic-version", "2023-06-01")
	c := context.WithValue(req.Context(), caddyhttp.VarsCtxKey, map[string]any{})
	c = context.WithValue(c, caddyhttp.ExtraLogFieldsCtxKey, new(caddyhttp.ExtraLogFields))
	w := httptest.NewRecorder()
	if err := g.auth.ServeHTTP(w, req.WithContext(c), g.next); err != nil {
		var apiErr *protocols.APIError
		if !errors.As(err, &apiErr) {
			apiErr = protocols.ErrGeneric(protocols.FamilyOfPath(path), http.StatusInternalServerError)
		}
		w = httptest.NewRecorder()
		apiErr.Write(w, "id")
	}
	return w
}

// slowBody is a client body that sends its first part and then waits to be told to
// send the rest.
type slowBody struct {
	pr   *io.PipeReader
	pw   *io.PipeWriter
	rest []byte
}

func sendSlowly(t *testing.T, body []byte, first int) *slowBody {
	pr, pw := io.Pipe()
	t.Cleanup(func() { pr.Close() })
	s := &slowBody{pr: pr, pw: pw, rest: body[first:]}
	go func() { _, _ = pw.Write(body[:first]) }()
	return s
}

// finish sends the rest; a body the gateway stopped reading ends there.
func (s *slowBody) finish() {
	go func() {
		_, _ = s.pw.Write(s.rest)
		s.pw.Close()
	}()
}

func chatBody(n int) []byte {
	return []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", n) + `"}]}`)
}

func messagesBody(n int) []byte {
	return []byte(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"` + strings.Repeat("x", n) + `"}]}`)
}

func TestBodiesPastTheCeilingGet503InTheirFamilyWhileMemoryStaysUnderIt(t *testing.T) {
	const ceiling = 576 << 10
	g := newBodyGateway(t, ceiling)
	mem := g.app.bodyMemory
	gauge := func() int64 { return gaugeValue(t, g.metrics, "switchyard_body_memory_bytes") }
	mostHeld := int64(0)
	watch := func() {
		mostHeld = max(mostHeld, mem.Held())
		require.LessOrEqual(t, gauge(), int64(ceiling))
	}

	// Three clients send the start of long bodies and stall. Each holds buffers for what
	// came, no more: the first promised 300 KiB and sent 100 KiB, so it grew from 64 KiB
	// to 128 KiB and holds both (192 KiB) until it is let go.
	run := func(path string, body []byte, first int, holdsThen int64) (*slowBody, chan *httptest.ResponseRecorder) {
		slow := sendSlowly(t, body, first)
		done := make(chan *httptest.ResponseRecorder, 1)
		go func() { done <- g.send(path, slow.pr, int64(len(body))) }()
		require.Eventually(t, func() bool { return gauge() == holdsThen }, 10*time.Second, time.Millisecond,
			"the stalled bodies hold %d bytes", mem.Held())
		watch()
		return slow, done
	}
	slowA, doneA := run("/v1/chat/completions", chatBody(300<<10), 100<<10, 192<<10)
	slowB, doneB := run("/v1/messages", messagesBody(120<<10), 100<<10, 384<<10)
	slowC, doneC := run("/v1/chat/completions", chatBody(120<<10), 70<<10, ceiling)

	// The gateway is full: new bodies, small or large, are refused in their own family.
	for _, c := range []struct {
		path   string
		body   []byte
		family protocols.Family
	}{
		{"/v1/chat/completions", chatBody(100), protocols.FamilyA},
		{"/v1/messages", messagesBody(100), protocols.FamilyB},
		{"/v1/chat/completions", chatBody(200 << 10), protocols.FamilyA},
		{"/v1/messages", messagesBody(200 << 10), protocols.FamilyB},
	} {
		w := g.send(c.path, bytes.NewReader(c.body), int64(len(c.body)))
		assertBusy(t, w, c.family)
		watch()
	}

	// The first client goes on: its body cannot grow, and it is refused mid-way.
	slowA.finish()
	assertBusy(t, <-doneA, protocols.FamilyA)
	watch()
	// The others fit in what is left and are served.
	slowB.finish()
	assert.Equal(t, http.StatusOK, (<-doneB).Code)
	slowC.finish()
	assert.Equal(t, http.StatusOK, (<-doneC).Code)
	// Now there is room again.
	w := g.send("/v1/chat/completions", bytes.NewReader(chatBody(100)), int64(len(chatBody(100))))
	assert.Equal(t, http.StatusOK, w.Code)

	assert.LessOrEqual(t, mostHeld, int64(ceiling))
	// A body refused mid-way gives its bytes back once its reader has stopped, which may
	// come a moment after its 503 was written.
	assert.Eventually(t, func() bool { return mem.Held() == 0 }, 5*time.Second, time.Millisecond,
		"bytes of finished requests are still counted: %d", mem.Held())
	assert.Zero(t, gauge())
}

func assertBusy(t *testing.T, w *httptest.ResponseRecorder, family protocols.Family) {
	t.Helper()
	require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	body := w.Body.String()
	if family == protocols.FamilyA {
		assert.Equal(t, protocols.CodeBodyMemoryFull, gjson.Get(body, "error.code").String(), body)
	} else {
		assert.Equal(t, "error", gjson.Get(body, "type").String(), body)
		assert.True(t, gjson.Get(body, "error.type").Exists(), body)
	}
}

// gaugeValue is what a scrape of reg reads for the gauge name.
func gaugeValue(t *testing.T, reg prometheus.Gatherer, name string) int64 {
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			require.Len(t, f.GetMetric(), 1)
			return int64(f.GetMetric()[0].GetGauge().GetValue())
		}
	}
	require.Failf(t, "no such metric", "%s is not in the registry", name)
	return 0
}

// A key's share of the body memory is half the ceiling unless set, never less than one
// body of the largest size needs at worst (while the ceiling holds that), and never more
// than the ceiling.
func TestAKeysShareOfBodyMemory(t *testing.T) {
	provision := func(ceiling, perKey, maxBody int64) (*App, error) {
		app := &App{
			Store:         &StoreConfig{Driver: "off"},
			Keys:          []KeyConfig{{Name: "k", Secret: "sk-body-0123456789abcdef"}},
			Models:        []ModelConfig{{ID: "m", Candidates: []CandidateConfig{{Name: "a", Protocol: "family_a", URL: "http://127.0.0.1:9/v1", UpstreamModel: "up"}}}},
			MaxBodyMemory: ceiling, MaxBodyMemoryPerKey: perKey, MaxRequestBody: maxBody,
		}
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		t.Cleanup(cancel)
		return app, app.Provision(ctx)
	}
	for _, c := range []struct {
		ceiling, perKey, maxBody, want int64
	}{
		{1 << 30, 0, 32 << 20, 512 << 20},  // the defaults: half
		{64 << 20, 0, 32 << 20, 64 << 20},  // half would not hold one 32 MiB body at worst
		{100 << 20, 0, 32 << 20, 64 << 20}, // twice the largest body, more than half
		{1 << 30, 100 << 20, 32 << 20, 100 << 20},
	} {
		app, err := provision(c.ceiling, c.perKey, c.maxBody)
		require.NoError(t, err)
		assert.Equal(t, c.want, app.bodyMemory.PerKey(), "ceiling %d, per key %d", c.ceiling, c.perKey)
		assert.Equal(t, c.want, app.MaxBodyMemoryPerKey)
	}
	_, err := provision(64<<20, 128<<20, 1<<20)
	assert.ErrorContains(t, err, "max_body_memory_per_key")
}
