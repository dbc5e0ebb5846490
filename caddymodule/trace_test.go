package caddymodule

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard-gw/switchyard/channel"
	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/relay"
	"github.com/switchyard-gw/switchyard/routing"
)

const traceTestKey = "sk-trace-0123456789abcdef"

// tracedChain is switchyard_auth and switchyard_model in front of next, as Caddy runs
// them, over a configuration with one model.
func tracedChain(t testing.TB, next caddyhttp.Handler) func(r *http.Request) (status int, err error) {
	app := &App{
		Store: &StoreConfig{Driver: "off"},
		Keys:  []KeyConfig{{Name: "tracer", Secret: traceTestKey}},
		Models: []ModelConfig{{
			ID: "trace-model",
			Candidates: []CandidateConfig{{
				Name: "c", Protocol: "family_a", URL: "http://127.0.0.1:9/v1", UpstreamModel: "upstream-secret-model",
			}},
		}},
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	require.NoError(t, app.Provision(ctx))
	authH, modelH := &Auth{app: app}, &Model{app: app}
	chain := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		return modelH.ServeHTTP(w, r, next)
	})
	return func(r *http.Request) (int, error) {
		c := context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{})
		c = context.WithValue(c, caddyhttp.ExtraLogFieldsCtxKey, new(caddyhttp.ExtraLogFields))
		w := httptest.NewRecorder()
		err := authH.ServeHTTP(w, r.WithContext(c), chain)
		return w.Code, err
	}
}

// inServerSpan puts a recording span in r's context, as Caddy's tracing handler does.
func inServerSpan(r *http.Request, rec *tracetest.SpanRecorder) (*http.Request, trace.Span) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, span := tp.Tracer("caddy").Start(r.Context(), "server", trace.WithSpanKind(trace.SpanKindServer))
	return r.WithContext(ctx), span
}

func attributesOf(s sdktrace.ReadOnlySpan) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value.Emit()
	}
	return m
}

// gatewaySpan is the one span the gateway ended under Caddy's.
func gatewaySpan(t *testing.T, rec *tracetest.SpanRecorder) sdktrace.ReadOnlySpan {
	t.Helper()
	ended := rec.Ended()
	require.Len(t, ended, 1, "the gateway's span")
	return ended[0]
}

func TestRefusedRequestsHaveTheirSpanWithTheVerdict(t *testing.T) {
	serve := tracedChain(t, caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		t.Fatal("a refused request went on")
		return nil
	}))
	for _, c := range []struct {
		name, key, body, spanName, refusedBy, status string
	}{
		{"wrong key", "sk-wrong-0123456789abcdef", `{"model":"trace-model","messages":[]}`, "switchyard", "key", "401"},
		{"unknown model", traceTestKey, `{"model":"no-such-model","messages":[{"role":"user","content":"hi"}]}`, "chat", "request", "404"},
		{"invalid body", traceTestKey, `{"model":"trace-model","messages":"not a list"}`, "chat trace-model", "request", "400"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			r := httptest.NewRequest("POST", "/v1/chat/completions", bytes.NewReader([]byte(c.body)))
			r.Header.Set("Authorization", "Bearer "+c.key)
			r, server := inServerSpan(r, rec)
			status, err := serve(r)
			require.NoError(t, err, "the gateway writes its own error answers")
			assert.Equal(t, c.status, strconv.Itoa(status))
			s := gatewaySpan(t, rec)
			assert.Equal(t, server.SpanContext().SpanID(), s.Parent().SpanID(), "a child of Caddy's span")
			assert.Equal(t, c.spanName, s.Name())
			a := attributesOf(s)
			assert.Equal(t, "refused", a["switchyard.verdict"])
			assert.Equal(t, c.refusedBy, a["switchyard.refused_by"])
			assert.Equal(t, c.status, a["switchyard.status"])
			assert.Equal(t, c.status, a["error.type"])
			assert.Equal(t, codes.Error, s.Status().Code)
			for k, v := range a {
				assert.NotContains(t, v, c.key, "%s holds the key", k)
				assert.NotContains(t, v, "upstream-secret-model", "%s holds the upstream model", k)
			}
		})
	}
}

// A request without a recording span in its context makes no span and no trace state.
func TestNoSpanWithoutTracing(t *testing.T) {
	var seen *requestTrace
	seenOne := false
	serve := tracedChain(t, caddyhttp.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) error {
		seen, seenOne = logOf(r).trace, true
		return nil
	}))
	r := httptest.NewRequest("POST", "/v1/chat/completions", bytes.NewReader([]byte(`{"model":"trace-model","messages":[{"role":"user","content":"hi"}]}`)))
	r.Header.Set("Authorization", "Bearer "+traceTestKey)
	_, err := serve(r)
	require.NoError(t, err)
	require.True(t, seenOne)
	assert.Nil(t, seen)
}

// fakeChannel is a cloud channel as far as its name goes.
type fakeChannel struct {
	channel.Channel
	name string
}

func (c fakeChannel) Name() string      { return c.name }
func (c fakeChannel) Secrets() []string { return nil }
func (c fakeChannel) Names() []string   { return nil }

func TestProviderNames(t *testing.T) {
	base, _ := url.Parse("http://127.0.0.1:9/v1")
	for _, c := range []struct {
		family  protocols.Family
		channel string
		want    string
	}{
		{protocols.FamilyA, "", "openai"},
		{protocols.FamilyB, "", "anthropic"},
		{protocols.FamilyB, "bedrock", "aws.bedrock"},
		{protocols.FamilyB, "vertex", "gcp.vertex_ai"},
		{protocols.FamilyA, "azure", "azure.ai.openai"},
	} {
		opts := relay.Options{}
		if c.channel != "" {
			opts.Channel = fakeChannel{name: c.channel}
		}
		up := relay.NewUpstream("m", &routing.Candidate{Name: "c", Protocol: c.family, BaseURL: base}, opts)
		assert.Equal(t, c.want, providerName(up), "%v over %q", c.family, c.channel)
	}
}

// BenchmarkTracing is the gateway's resolution path (key, operation, model, body) for a
// 2 KB chat request, without a span in its context and under a recording one: what the
// gateway's span costs when `tracing` is on, and that it costs nothing when it is off.
func BenchmarkTracing(b *testing.B) {
	body := chatRequest(2 << 10)
	body = bytes.Replace(body, []byte(`"bench-model"`), []byte(`"trace-model"`), 1)
	serve := tracedChain(b, caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil }))
	// Sampled and recording, exported nowhere: the cost is the spans' own.
	tp := sdktrace.NewTracerProvider()
	for _, traced := range []bool{false, true} {
		name := "off"
		if traced {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest("POST", "/v1/chat/completions", bytes.NewReader(body))
				r.Header.Set("Authorization", "Bearer "+traceTestKey)
				var span trace.Span
				if traced {
					var ctx context.Context
					ctx, span = tp.Tracer("caddy").Start(r.Context(), "server")
					r = r.WithContext(ctx)
				}
				if status, err := serve(r); err != nil || status != http.StatusOK {
					b.Fatal(status, err)
				}
				if span != nil {
					span.End()
				}
			}
		})
	}
}

// The served request's span carries the usage the upstream reported, cache and reasoning
// included, and the candidate that served; its attempts carry their channel and reason.
func TestServedSpanCarriesUsageAndAttempts(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, server := tp.Tracer("caddy").Start(context.Background(), "server")
	tr := startTrace(ctx, "sy_test")
	require.NotNil(t, tr)
	tr.operationKnown(protocols.Operation{Family: protocols.FamilyB, Kind: protocols.KindMessages})
	tr.modelKnown("claude-ish")

	base, _ := url.Parse("http://127.0.0.1:9")
	up := relay.NewUpstream("claude-ish", &routing.Candidate{Name: "on-bedrock", Protocol: protocols.FamilyB, BaseURL: base,
		UpstreamModel: "upstream-secret-model"}, relay.Options{Channel: fakeChannel{name: "bedrock"}})
	out := &relay.Outcome{
		Served: up, Status: 200,
		Attempts: []relay.Attempt{{Candidate: "on-bedrock", Status: 200}},
		Obs: protocols.Observation{UsageReported: true, Usage: protocols.Usage{
			Input: 1200, CachedInput: 1000, CacheWrite: 100, Output: 300, Reasoning: 120,
		}},
	}
	tr.served(&route{op: protocols.Operation{Family: protocols.FamilyB, Kind: protocols.KindMessages},
		model: &routing.Model{ID: "claude-ish"}}, out, []*relay.Upstream{up})
	tr.end(nil)
	server.End()

	var gw, attempt sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "chat claude-ish":
			gw = s
		case "upstream on-bedrock":
			attempt = s
		}
	}
	require.NotNil(t, gw)
	require.NotNil(t, attempt)
	a := attributesOf(gw)
	for k, v := range map[attribute.Key]string{
		"gen_ai.usage.input_tokens": "1200", "gen_ai.usage.output_tokens": "300",
		"gen_ai.usage.cache_read.input_tokens": "1000", "gen_ai.usage.cache_creation.input_tokens": "100",
		"gen_ai.usage.reasoning.output_tokens": "120", "gen_ai.provider.name": "aws.bedrock",
		"gen_ai.response.model": "claude-ish", "switchyard.channel": "bedrock", "switchyard.candidate": "on-bedrock",
		"switchyard.verdict": "admitted", "switchyard.status": "200",
	} {
		assert.Equal(t, v, a[k], "%s", k)
	}
	assert.Equal(t, codes.Unset, gw.Status().Code)
	assert.Equal(t, gw.SpanContext().SpanID(), attempt.Parent().SpanID())
	assert.Equal(t, "bedrock", attributesOf(attempt)["switchyard.channel"])
	for _, s := range rec.Ended() {
		for k, v := range attributesOf(s) {
			assert.NotContains(t, v, "upstream-secret-model", "%s holds the upstream model", k)
			assert.NotContains(t, v, "127.0.0.1:9", "%s holds the upstream host", k)
		}
	}
}
