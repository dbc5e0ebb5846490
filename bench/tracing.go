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
	Exports       int64 `json:"otlp_exports"`
	ExportedBytes int64 `json:"otlp_bytes"`
	Off           tracingFigures
	On            tracingFigures
	// OnOverOff are On's figures divided by Off's.
	OnOverOff tracingFigures `json:"on_over_off"`
}

type tracingFigures struct {
	AddedP50Us      float64 `json:"added_latency_p50_us"`
	CPUc1Us         float64 `json:"cpu_per_request_concurrency_1_us"`
	AllocPerRequest float64 `json:"alloc_bytes_per_request"`
	CPUUs           float64 `json:"cpu_per_request_us"`
	RPS             float64 `json:"requests_per_second"`
	CPUPerStreamUs  float64 `json:"cpu_per_stream_us"`
}

func figuresOf(r *results, name string) (f tracingFigures, ok bool) {
	if lat := r.Latency; lat != nil && lat.Targets[name] != nil {
		t := lat.Targets[name]
		f.AddedP50Us, f.CPUc1Us, f.AllocPerRequest, ok = t.AddedP50, t.CPUPerRequestUs, t.AllocPerRequest, true
	}
	if tp := r.Throughput; tp != nil && tp.Targets[name] != nil {
		f.CPUUs, f.RPS, ok = tp.Targets[name].CPUPerRequestUs, tp.Targets[name].RPS, true
	}
	if st := r.Stream; st != nil && st.Targets[name] != nil {
		f.CPUPerStreamUs, ok = st.Targets[name].CPUPerStreamUs, true
	}
	return f, ok
}

// summarizeTracing compares the tracing variant with Switchyard as in the main table.
func summarizeTracing(r *results, sink *otlpSink) *tracingResult {
	off, okOff := figuresOf(r, "switchyard")
	on, okOn := figuresOf(r, tracingOn)
	if !okOff || !okOn {
		return nil
	}
	q := func(a, b float64) float64 { return round(ratio(a, b), 3) }
	return &tracingResult{
		Exports: sink.exports.Load(), ExportedBytes: sink.bytes.Load(),
		Off: off, On: on,
		OnOverOff: tracingFigures{
			AddedP50Us: q(on.AddedP50Us, off.AddedP50Us), CPUc1Us: q(on.CPUc1Us, off.CPUc1Us),
			AllocPerRequest: q(on.AllocPerRequest, off.AllocPerRequest), CPUUs: q(on.CPUUs, off.CPUUs),
			RPS: q(on.RPS, off.RPS), CPUPerStreamUs: q(on.CPUPerStreamUs, off.CPUPerStreamUs),
		},
	}
}

func (t *tracingResult) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nTracing: Switchyard with `tracing` in its site, every request sampled and exported over OTLP/HTTP (%d exports, %.1f MB), against Switchyard without it\n\n",
		t.Exports, float64(t.ExportedBytes)/1e6)
	b.WriteString("| Measure | Tracing off | Tracing on | On ÷ off |\n|---|---|---|---|\n")
	row := func(measure, off, on string, r float64) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", measure, off, on, times(r))
	}
	row("Added latency p50, concurrency 1", us(t.Off.AddedP50Us), us(t.On.AddedP50Us), t.OnOverOff.AddedP50Us)
	row("CPU per request, concurrency 1", us(t.Off.CPUc1Us), us(t.On.CPUc1Us), t.OnOverOff.CPUc1Us)
	row("Bytes allocated per request", fmt.Sprintf("%.0f B", t.Off.AllocPerRequest), fmt.Sprintf("%.0f B", t.On.AllocPerRequest), t.OnOverOff.AllocPerRequest)
	row("CPU per request, concurrency 32", us(t.Off.CPUUs), us(t.On.CPUUs), t.OnOverOff.CPUUs)
	row("Requests per second, concurrency 32", fmt.Sprintf("%.0f", t.Off.RPS), fmt.Sprintf("%.0f", t.On.RPS), t.OnOverOff.RPS)
	row("CPU per stream", us(t.Off.CPUPerStreamUs), us(t.On.CPUPerStreamUs), t.OnOverOff.CPUPerStreamUs)
	return b.String()
}
