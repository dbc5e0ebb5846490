package integration

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace collector in the test: it keeps every span it is
// sent, and every byte, for the leak check.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
	raw   bytes.Buffer
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	rc := &otlpReceiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = http.MaxBytesReader(w, r.Body, 16<<20)
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(io.LimitReader(body, 64<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		rc.raw.Write(b)
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				rc.spans = append(rc.spans, ss.Spans...)
			}
		}
		rc.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// inTrace is the spans received so far of one trace.
func (rc *otlpReceiver) inTrace(traceID string) []*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range rc.spans {
		if hex.EncodeToString(s.TraceId) == traceID {
			out = append(out, s)
		}
	}
	return out
}

func (rc *otlpReceiver) exported() string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.raw.String()
}

// attrs flattens a span's attributes to strings, for assertions.
func attrs(s *tracepb.Span) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes {
		m[kv.Key] = anyValue(kv.Value)
	}
	return m
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.Value.(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_ArrayValue:
		var vs []string
		for _, e := range x.ArrayValue.Values {
			vs = append(vs, anyValue(e))
		}
		return strings.Join(vs, ",")
	}
	return v.String()
}

// tracedCall is one request of the test, in a trace of its own started by the caller.
type tracedCall struct {
	traceID, parentID string
}

func (c tracedCall) header() string { return "00-" + c.traceID + "-" + c.parentID + "-01" }

// spanTree is a request's spans as the test reads them: Caddy's server span under the
// caller's span, the gateway's span under it, the attempts under the gateway's.
type spanTree struct {
	server, gateway *tracepb.Span
	attempts        []*tracepb.Span
}

// waitForTrace waits until the trace holds the gateway's span and want attempt spans,
// and checks their parentage.
func (rc *otlpReceiver) waitForTrace(t *testing.T, c tracedCall, want int) spanTree {
	t.Helper()
	var tree spanTree
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		tree = spanTree{}
		spans := rc.inTrace(c.traceID)
		for _, s := range spans {
			if _, ok := attrs(s)["switchyard.request_id"]; ok {
				tree.gateway = s
			}
		}
		if !assert.NotNil(ct, tree.gateway, "the gateway's span") {
			return
		}
		for _, s := range spans {
			switch {
			case bytes.Equal(s.SpanId, tree.gateway.ParentSpanId):
				tree.server = s
			case bytes.Equal(s.ParentSpanId, tree.gateway.SpanId):
				tree.attempts = append(tree.attempts, s)
			}
		}
		assert.NotNil(ct, tree.server, "Caddy's server span, the gateway span's parent")
		assert.Len(ct, tree.attempts, want, "attempt spans")
	}, waitShort, pollEvery)
	assert.Equal(t, c.parentID, hex.EncodeToString(tree.server.ParentSpanId), "Caddy's span is a child of the caller's")
	assert.Equal(t, tracepb.Span_SPAN_KIND_SERVER, tree.server.Kind)
	for _, a := range tree.attempts {
		assert.GreaterOrEqual(t, a.StartTimeUnixNano, tree.gateway.StartTimeUnixNano, "an attempt starts within its request")
		assert.LessOrEqual(t, a.EndTimeUnixNano, tree.gateway.EndTimeUnixNano, "an attempt ends within its request")
	}
	return tree
}

// TestTracesFollowRequestsThroughTheGateway runs the gateway with Caddy's `tracing` and an
// OTLP/HTTP receiver, and follows four requests in the callers' traces: a chat completion
// that fails over, a Messages stream, a Responses request refused by the key's rate limit,
// and one with a wrong key. Each is a span in its caller's trace with the GenAI
// attributes and the verdict, the relayed ones with a span per upstream attempt, and
// nothing exported names a secret, an upstream or a prompt.
func TestTracesFollowRequestsThroughTheGateway(t *testing.T) {
	rc := exportTracesTo(t)

	up := newUpstream(t)
	const rpmKey = "sk-rpm-one-0123456789abcdef"
	store := storeOption(t, "")
	ports, _ := startCaddy(t, 2, func(ports []int) string {
		return "{\n\tadmin 127.0.0.1:" + strconv.Itoa(ports[1]) + "\n\tdefault_bind 127.0.0.1\n\tswitchyard {\n" +
			"\t\tkey test " + testKey + "\n" +
			"\t\tkey one-a-minute " + rpmKey + " {\n\t\t\trpm 1\n\t\t}\n" +
			store + standardModels(up) +
			"\t\tmodel retried {\n" + candidate("once", "family_a", "http://"+up.hostport()+"/v1", upstreamPrefix+"-r+fail-500+first-1") + "\t\t}\n" +
			"\t}\n}\n" +
			"http://127.0.0.1:" + strconv.Itoa(ports[0]) + " {\n\ttracing {\n\t\tspan gateway\n\t}\n" +
			"\tswitchyard_auth\n\tswitchyard_model\n\tswitchyard_proxy\n" +
			"\thandle_errors {\n\t\tswitchyard_errors\n\t}\n}\n"
	})
	g := &gateway{base: "http://127.0.0.1:" + strconv.Itoa(ports[0]), up: up}
	g.waitReady(t)

	const prompt = "PROMPT-TEXT-never-in-a-span-7f3a"
	calls := map[string]tracedCall{
		"failover": {"11111111111111111111111111111111", "1111111111111111"},
		"stream":   {"22222222222222222222222222222222", "2222222222222222"},
		"admitted": {"33333333333333333333333333333333", "3333333333333333"},
		"limited":  {"44444444444444444444444444444444", "4444444444444444"},
		"bad-key":  {"55555555555555555555555555555555", "5555555555555555"},
		"retry":    {"66666666666666666666666666666666", "6666666666666666"},
		"cut":      {"77777777777777777777777777777777", "7777777777777777"},
	}

	r := g.call(t, "POST", "/v1/chat/completions",
		`{"model":"failover-a","max_tokens":50,"messages":[{"role":"user","content":"`+prompt+`"}]}`,
		"traceparent", calls["failover"].header())
	require.Equal(t, 200, r.Status, "%s", r.Body)
	r = g.call(t, "POST", "/v1/messages",
		`{"model":"msg-b","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"`+prompt+`"}]}`,
		"traceparent", calls["stream"].header(), "anthropic-version", "2023-06-01")
	require.Equal(t, 200, r.Status, "%s", r.Body)
	responses := `{"model":"chat-a","input":"` + prompt + `"}`
	r = g.call(t, "POST", "/v1/responses", responses, "traceparent", calls["admitted"].header(), "Authorization", "Bearer "+rpmKey)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	r = g.call(t, "POST", "/v1/responses", responses, "traceparent", calls["limited"].header(), "Authorization", "Bearer "+rpmKey)
	require.Equal(t, 429, r.Status, "%s", r.Body)
	r = g.call(t, "POST", "/v1/chat/completions", `{"model":"chat-a","messages":[]}`,
		"traceparent", calls["bad-key"].header(), "Authorization", "Bearer sk-not-a-key-00000000000000")
	require.Equal(t, 401, r.Status, "%s", r.Body)

	r = g.call(t, "POST", "/v1/chat/completions", `{"model":"retried","messages":[{"role":"user","content":"hi"}]}`,
		"traceparent", calls["retry"].header())
	require.Equal(t, 200, r.Status, "%s", r.Body)

	r = g.call(t, "POST", "/v1/chat/completions", `{"model":"cut-stream","stream":true,"messages":[]}`,
		"traceparent", calls["cut"].header())
	require.Equal(t, 200, r.Status, "%s", r.Body)

	// The failover: every candidate before "good" fails in its own way, each an attempt.
	tree := rc.waitForTrace(t, calls["failover"], 5)
	a := attrs(tree.gateway)
	assert.Equal(t, "chat failover-a", tree.gateway.Name)
	for k, v := range map[string]string{
		"gen_ai.operation.name": "chat", "gen_ai.request.model": "failover-a", "gen_ai.response.model": "failover-a",
		"gen_ai.provider.name": "openai", "gen_ai.request.max_tokens": "50",
		"switchyard.candidate": "good", "switchyard.channel": "api", "switchyard.attempts": "5",
		"switchyard.verdict": "admitted", "switchyard.status": "200", "switchyard.key_id": a["switchyard.key_id"],
	} {
		assert.Equal(t, v, a[k], "failover: %s", k)
	}
	assert.NotEmpty(t, a["switchyard.key_id"])
	assert.NotEmpty(t, a["gen_ai.usage.input_tokens"])
	assert.NotEmpty(t, a["gen_ai.usage.output_tokens"])
	assert.Equal(t, "stop", a["gen_ai.response.finish_reasons"], "the chat answer's finish_reason")
	var tried []string
	status := map[string]string{}
	for _, s := range tree.attempts {
		at := attrs(s)
		tried = append(tried, at["switchyard.candidate"]+":"+at["switchyard.failover_reason"])
		status[at["switchyard.candidate"]] = at["http.response.status_code"]
		assert.Equal(t, "upstream "+at["switchyard.candidate"], s.Name)
		assert.Equal(t, "openai", at["gen_ai.provider.name"])
		assert.Equal(t, "api", at["switchyard.channel"])
	}
	assert.ElementsMatch(t, []string{"refused:connect", "broken:status", "limited:rate_limit", "inband:status", "good:"},
		tried, "one span per attempt, with its failover reason")
	// As they happened: one after another, in the order the candidates were tried.
	slices.SortFunc(tree.attempts, func(x, y *tracepb.Span) int { return cmp.Compare(x.StartTimeUnixNano, y.StartTimeUnixNano) })
	for i := 1; i < len(tree.attempts); i++ {
		assert.GreaterOrEqual(t, tree.attempts[i].StartTimeUnixNano, tree.attempts[i-1].EndTimeUnixNano, "attempt %d began before the one before it ended", i)
	}
	assert.Equal(t, "refused", attrs(tree.attempts[0])["switchyard.candidate"])
	assert.Equal(t, "", status["refused"], "a refused connection received no status")
	assert.Equal(t, "503", status["broken"])
	assert.Equal(t, "429", status["limited"])
	assert.Equal(t, "200", status["good"])

	// A retry on the model's only candidate: the second attempt after its back-off.
	tree = rc.waitForTrace(t, calls["retry"], 2)
	slices.SortFunc(tree.attempts, func(x, y *tracepb.Span) int { return cmp.Compare(x.StartTimeUnixNano, y.StartTimeUnixNano) })
	first, second := attrs(tree.attempts[0]), attrs(tree.attempts[1])
	assert.Equal(t, "0", first["switchyard.retry"])
	assert.Equal(t, "500", first["http.response.status_code"])
	assert.Equal(t, "status", first["switchyard.failover_reason"])
	assert.Equal(t, "1", second["switchyard.retry"])
	assert.Equal(t, "200", second["http.response.status_code"])
	wait, err := strconv.ParseFloat(second["switchyard.retry_wait_s"], 64)
	require.NoError(t, err, "the retry's wait")
	assert.Greater(t, wait, 0.0)
	assert.GreaterOrEqual(t, tree.attempts[1].StartTimeUnixNano-tree.attempts[0].EndTimeUnixNano, uint64(wait*1e9*0.9),
		"the retry began once its wait was over")

	// The stream: Messages on the Anthropic family, its time to first token recorded.
	tree = rc.waitForTrace(t, calls["stream"], 1)
	a = attrs(tree.gateway)
	assert.Equal(t, "chat msg-b", tree.gateway.Name)
	assert.Equal(t, "anthropic", a["gen_ai.provider.name"])
	assert.Equal(t, "true", a["switchyard.stream"])
	assert.Equal(t, "64", a["gen_ai.request.max_tokens"])
	assert.NotEmpty(t, a["switchyard.time_to_first_token_s"])
	assert.NotEmpty(t, a["gen_ai.usage.output_tokens"])
	assert.Equal(t, "end_turn", a["gen_ai.response.finish_reasons"], "message_delta's stop_reason")

	// A stream cut after its first byte: 200 on the wire, an error in the trace.
	tree = rc.waitForTrace(t, calls["cut"], 1)
	a = attrs(tree.gateway)
	assert.Equal(t, "true", a["switchyard.stream_interrupted"])
	assert.Equal(t, "stream_interrupted", a["error.type"])
	assert.Equal(t, tracepb.Status_STATUS_CODE_ERROR, tree.gateway.Status.GetCode())

	// Responses, admitted then refused by the key's requests-per-minute limit before any
	// upstream call.
	tree = rc.waitForTrace(t, calls["admitted"], 1)
	assert.Equal(t, "admitted", attrs(tree.gateway)["switchyard.verdict"])
	assert.Equal(t, "completed", attrs(tree.gateway)["gen_ai.response.finish_reasons"], "a whole response's status")
	assert.Equal(t, "chat chat-a", tree.gateway.Name)
	tree = rc.waitForTrace(t, calls["limited"], 0)
	a = attrs(tree.gateway)
	assert.Equal(t, "refused", a["switchyard.verdict"])
	assert.Equal(t, "key_requests", a["switchyard.refused_by"])
	assert.Equal(t, "429", a["error.type"])
	assert.Equal(t, tracepb.Status_STATUS_CODE_ERROR, tree.gateway.Status.GetCode())

	// A wrong key: refused before anything else, with nothing of the key.
	tree = rc.waitForTrace(t, calls["bad-key"], 0)
	a = attrs(tree.gateway)
	assert.Equal(t, "refused", a["switchyard.verdict"])
	assert.Equal(t, "key", a["switchyard.refused_by"])
	assert.Equal(t, "401", a["switchyard.status"])
	assert.NotContains(t, a, "switchyard.key_id")

	up.assertNoLeakIn(t, "the exported spans", rc.exported(), rpmKey, "sk-not-a-key", prompt)
}

// exportTracesTo starts an OTLP/HTTP receiver and points Caddy's tracing at it (through
// the OpenTelemetry environment, for this test), exporting every 20 ms.
func exportTracesTo(t *testing.T) *otlpReceiver {
	t.Helper()
	rc := newOTLPReceiver(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", rc.URL+"/v1/traces")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	t.Setenv("OTEL_SERVICE_NAME", "switchyard-test")
	return rc
}
