package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// tracingOn is Switchyard with Caddy's `tracing` in its site, exporting every span over
// OTLP/HTTP to a sink in this process: the cost of traces against the same Switchyard
// without them, in the same interleaved rounds.
const tracingOn = "tracing"

// benchTracing says whether the tracing variant runs (-tracing).
var benchTracing = true

// otlpSink takes OTLP/HTTP exports and counts them, as a collector would take them,
// without decoding: what it costs the gateway to make and send spans is what is measured.
type otlpSink struct {
	srv     *http.Server
	addr    string
	exports atomic.Int64
	bytes   atomic.Int64
}

func startOTLPSink() (*otlpSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &otlpSink{addr: ln.Addr().String()}
	s.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		s.exports.Add(1)
		s.bytes.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *otlpSink) stop() {
	if s != nil {
		_ = s.srv.Close()
	}
}

// tracingEnv points the exporter of the tracing variant at the sink, every request sampled.
func (s *otlpSink) env() []string {
	return []string{
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://" + s.addr + "/v1/traces",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf",
		"OTEL_TRACES_SAMPLER=always_on",
		"OTEL_SERVICE_NAME=switchyard-bench",
	}
}

// withTracing puts Caddy's tracing directive in front of the gateway's handlers.
func withTracing(caddyfile string) string {
	return strings.Replace(caddyfile, "\tswitchyard_auth\n", "\ttracing {\n\t\tspan gateway\n\t}\n\tswitchyard_auth\n", 1)
}

// startTracingVariant starts the sink and Switchyard with tracing, and checks that spans
// reach the sink before any figure is taken.
func startTracingVariant(ctx context.Context, o options, tmp, upAddr string) (*target, *otlpSink, error) {
	sink, err := startOTLPSink()
	if err != nil {
		return nil, nil, err
	}
	t, err := startProxy(ctx, tracingOn, o.switchyard, filepath.Join(tmp, tracingOn), "http://"+upAddr, "", sink.env()...)
	if err != nil {
		sink.stop()
		return nil, nil, err
	}
	deadline := time.Now().Add(15 * time.Second)
	for sink.exports.Load() == 0 {
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.proc.stop()
			sink.stop()
			return nil, nil, fmt.Errorf("Switchyard with tracing answered, but no span reached the OTLP sink in 15 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return t, sink, nil
}

// tracingResult is what traces cost: Switchyard with every request traced and exported,
// against Switchyard without `tracing` (whose own cost of not tracing is nil checks).
type tracingResult struct {
	Exports       int64          `json:"otlp_exports"`
	ExportedBytes int64          `json:"otlp_bytes"`
	Off           *limitsVariant `json:"off"`
	On            *limitsVariant `json:"on"`
	OnOverOff     *limitRatios   `json:"on_over_off"`
}

// summarizeTracing compares the tracing variant with Switchyard as in the main table.
func summarizeTracing(r *results, sink *otlpSink) *tracingResult {
	off, okOff := variantOf(r, "switchyard")
	on, okOn := variantOf(r, tracingOn)
	if !okOff || !okOn {
		return nil
	}
	return &tracingResult{Exports: sink.exports.Load(), ExportedBytes: sink.bytes.Load(),
		Off: off, On: on, OnOverOff: on.ratios(off)}
}

func (t *tracingResult) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nTracing: Switchyard with `tracing` in its site, every request sampled and exported over OTLP/HTTP (%d exports, %.1f MB), against Switchyard without it\n\n",
		t.Exports, float64(t.ExportedBytes)/1e6)
	b.WriteString("| Measure | Tracing off | Tracing on | On ÷ off |\n|---|---|---|---|\n")
	row := func(measure, off, on string, r float64) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", measure, off, on, times(r))
	}
	off, on, q := t.Off, t.On, t.OnOverOff
	row("Added latency p50, concurrency 1", us(off.AddedP50Us), us(on.AddedP50Us), q.AddedP50)
	row("CPU per request, concurrency 1", us(off.CPUc1Us), us(on.CPUc1Us), q.CPUc1)
	row("Bytes allocated per request", fmt.Sprintf("%.0f B", off.AllocPerRequest), fmt.Sprintf("%.0f B", on.AllocPerRequest),
		round(ratio(on.AllocPerRequest, off.AllocPerRequest), 3))
	row("CPU per request, concurrency 32", us(off.CPUUs), us(on.CPUUs), q.CPU)
	row("Requests per second, concurrency 32", fmt.Sprintf("%.0f", off.RPS), fmt.Sprintf("%.0f", on.RPS), q.Throughput)
	row("CPU per stream", us(off.CPUPerStreamUs), us(on.CPUPerStreamUs), q.CPUPerStream)
	return b.String()
}
