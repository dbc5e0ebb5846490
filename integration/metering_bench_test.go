package integration

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// BenchmarkMeteringCost serves the same chat completion through the gateway with the
// usage ledger on (SQLite store) and off, and reports both latencies and their ratio:
// metering must not change what a request costs the client.
func BenchmarkMeteringCost(b *testing.B) {
	var perReq [2]time.Duration
	for i, store := range []string{"", "\t\tstore off\n"} {
		name := map[int]string{0: "metered", 1: "unmetered"}[i]
		b.Run(name, func(b *testing.B) {
			up := newUpstream(b)
			g := startGatewayWith(b, up, standardModels(up), store)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			body := `{"model":"chat-a","messages":[{"role":"user","content":"hi"}]}`
			call := func() {
				req, _ := http.NewRequest("POST", g.base+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+testKey)
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			for range 200 {
				call() // warm connections and the ledger
			}
			start := time.Now()
			for b.Loop() {
				call()
			}
			perReq[i] = time.Since(start) / time.Duration(b.N)
			b.ReportMetric(float64(perReq[i].Microseconds()), "µs/request")
		})
	}
	if perReq[1] > 0 {
		b.Logf("metered ÷ unmetered latency: %.3f", float64(perReq[0])/float64(perReq[1]))
	}
}
