package relay

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

const chatAnswer = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`

func newBenchUpstream(b *testing.B) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(chatAnswer))
	}))
	b.Cleanup(srv.Close)
	return srv
}

// refusedAddr is a loopback port with nothing listening: a dial there is refused.
func refusedAddr(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func benchUpstream(b *testing.B, name, base string, priority int) *Upstream {
	u, err := url.Parse(base)
	if err != nil {
		b.Fatal(err)
	}
	up := NewUpstream("m", &routing.Candidate{Name: name, Protocol: protocols.FamilyA, BaseURL: u, UpstreamModel: "up-model", Priority: priority}, Options{})
	// A threshold no benchmark reaches keeps the dead candidate in play: this measures
	// the cost of failing over, not of skipping an open circuit.
	up.Health = routing.NewHealth(routing.HealthPolicy{FailureThreshold: 1 << 30})
	b.Cleanup(up.Close)
	return up
}

// BenchmarkFailoverToDeadPort reports what a failover to a refused port adds to a
// request, against the same request served directly.
func BenchmarkFailoverToDeadPort(b *testing.B) {
	good := newBenchUpstream(b)
	direct := []*Upstream{benchUpstream(b, "good", good.URL+"/v1", 1)}
	viaDead := []*Upstream{benchUpstream(b, "dead", "http://"+refusedAddr(b)+"/v1", 0), benchUpstream(b, "good", good.URL+"/v1", 1)}
	parsed, apiErr := protocols.ParseRequest(protocols.FamilyA, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if apiErr != nil {
		b.Fatal(apiErr)
	}
	op := protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindChat}
	req := &Request{Op: op, ServiceModel: "m", Body: WholeBody(op, parsed), Header: http.Header{}}
	serve := func(ups []*Upstream) time.Duration {
		w := httptest.NewRecorder()
		start := time.Now()
		out, e := Serve(context.Background(), w, req, ups)
		elapsed := time.Since(start)
		if e != nil || w.Code != 200 || out.Served.Candidate.Name != "good" {
			b.Fatalf("not served by the good candidate: %v %d", e, w.Code)
		}
		return elapsed
	}
	serve(direct) // warm the connection pools
	serve(viaDead)

	var directTotal, failoverTotal time.Duration
	for b.Loop() {
		directTotal += serve(direct)
		failoverTotal += serve(viaDead)
	}
	n := float64(b.N)
	b.ReportMetric(float64(directTotal.Microseconds())/n, "direct-µs/op")
	b.ReportMetric(float64(failoverTotal.Microseconds())/n, "with-failover-µs/op")
	b.ReportMetric(float64((failoverTotal-directTotal).Microseconds())/n, "failover-added-µs/op")
}

// discardWriter is a client that takes every byte at once: what the relay costs without
// a client's own writes.
type discardWriter struct {
	h       http.Header
	written int
}

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Write(p []byte) (int, error) { d.written += len(p); return len(p), nil }
func (d *discardWriter) Flush()                      {}

// BenchmarkStreamRelay relays make bench's own 48-event streams, one per shape, each event
// flushed by the upstream as it is there, from the upstream's bytes over loopback to the
// client's: the stream path as a whole (the copy
// loop, cutting events, reading them, the splice and the secret search with a
// candidate's real secrets), per event.
func BenchmarkStreamRelay(b *testing.B) {
	shapes := []struct {
		name, file string
		family     protocols.Family
		kind       protocols.Kind
		body       string
	}{
		{"chat", "chat.sse", protocols.FamilyA, protocols.KindChat,
			`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`},
		{"responses", "responses.sse", protocols.FamilyA, protocols.KindResponses,
			`{"model":"m","stream":true,"input":"hi"}`},
		{"messages", "messages.sse", protocols.FamilyB, protocols.KindMessages,
			`{"model":"m","stream":true,"max_tokens":256,"messages":[{"role":"user","content":"hi"}]}`},
	}
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			stream, err := os.ReadFile(filepath.Join("..", "bench", "testdata", sh.file))
			if err != nil {
				b.Fatal(err)
			}
			events := bytes.Count(stream, []byte("\ndata:")) + 1
			// Sent as make bench's upstream sends it: each event written and flushed.
			var parts [][]byte
			for rest := stream; len(rest) > 0; {
				n := bytes.Index(rest, []byte("\n\n")) + 2
				if n < 2 {
					n = len(rest)
				}
				parts, rest = append(parts, rest[:n]), rest[n:]
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				if strings.HasPrefix(r.URL.Path, "/burst/") {
					_, _ = w.Write(stream)
					return
				}
				rc := http.NewResponseController(w)
				for _, p := range parts {
					_, _ = w.Write(p)
					_ = rc.Flush()
				}
			}))
			b.Cleanup(srv.Close)
			parsed, apiErr := protocols.ParseRequest(sh.family, []byte(sh.body))
			if apiErr != nil {
				b.Fatal(apiErr)
			}
			op := protocols.Operation{Family: sh.family, Kind: sh.kind}
			req := &Request{Op: op, ServiceModel: "m", Body: WholeBody(op, parsed), Header: http.Header{}}
			// flushed: each event a read of its own, as the gateway mostly reads them;
			// burst: the whole stream at once, where the gateway's own work weighs most.
			for _, mode := range []string{"flushed", "burst"} {
				b.Run(mode, func(b *testing.B) {
					base := srv.URL + "/v1"
					if mode == "burst" {
						base = srv.URL + "/burst/v1"
					}
					u, _ := url.Parse(base)
					up := NewUpstream("m", &routing.Candidate{Name: "c", Protocol: sh.family, BaseURL: u,
						UpstreamModel: "up-model", Credential: "sk-proj-Zx81kQ2vN5bT7wYc3LmR9pHd"}, Options{})
					b.Cleanup(up.Close)
					ups := []*Upstream{up}
					serve := func() {
						w := &discardWriter{h: http.Header{}}
						out, e := Serve(context.Background(), w, req, ups)
						if e != nil || !out.Obs.Complete || w.written < len(stream)/2 {
							b.Fatalf("stream not relayed whole: %v, %d bytes", e, w.written)
						}
					}
					serve() // warm the connection pool
					b.ReportAllocs()
					b.SetBytes(int64(len(stream)))
					for b.Loop() {
						serve()
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*events), "ns/event")
				})
			}
		})
	}
}
