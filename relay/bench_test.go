package relay

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
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
