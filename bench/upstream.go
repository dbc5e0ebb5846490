package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	_ "embed"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The fixed answers, in the exact shape of OpenAI's chat completions output: a
// pretty-printed 1 KB completion, and a stream of 48 chunk events (role, 44 content
// chunks, finish, usage) ending with data: [DONE].
var (
	//go:embed testdata/chat.json
	recordedJSON []byte
	//go:embed testdata/chat.sse
	recordedSSE []byte
)

// The coding agents' answers, 48 events each as well. Messages (what Claude Code reads):
// message_start with the cache counts, a text block of 24 deltas, a tool_use block
// (Edit) of 16 input_json_delta events, message_delta with the output count and
// message_stop, each event named. Responses (what Codex reads): response.created and
// in_progress, an encrypted reasoning item, a message of 23 output_text deltas, an
// exec_command function call of 12 argument deltas and response.completed with usage,
// numbered by sequence_number.
var (
	//go:embed testdata/messages.json
	recordedMessagesJSON []byte
	//go:embed testdata/messages.sse
	recordedMessagesSSE []byte
	//go:embed testdata/responses.json
	recordedResponsesJSON []byte
	//go:embed testdata/responses.sse
	recordedResponsesSSE []byte
)

// The models the recordings name; Switchyard maps each back to its service model, stock
// Caddy passes it through.
const (
	upstreamModel          = "gpt-4o-mini-2024-07-18"
	upstreamMessagesModel  = "claude-sonnet-4-5-20250929"
	upstreamResponsesModel = "gpt-5-codex-2025-09-15"
)

// recording is one operation's fixed answers.
type recording struct {
	json   []byte
	events [][]byte
	header map[string]string // response headers that API sends
}

// splitEvents cuts an SSE recording into its events, each with its blank line.
func splitEvents(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := bytes.Index(b, []byte("\n\n"))
		if i < 0 {
			out = append(out, b)
			break
		}
		out = append(out, b[:i+2])
		b = b[i+2:]
	}
	return out
}

// upstream is the fixed-response server every target ends at. The query string of the
// client's request, which both proxies pass on unchanged, picks the behaviour:
//
//	mode=json     the recorded completion (the default)
//	mode=stream   the recorded stream, every event flushed at once
//	mode=paced    the recorded stream, the first event with the headers, then one every
//	              `every` (10ms); send times are kept under `id` for /_bench/sent
//	mode=hold     the first event, then a content event every `every` (with a random
//	              phase) until /_bench/release?group=G, then the finish, usage and
//	              [DONE] events; the count sent is kept under `id` for /_bench/counts
//
// POST /v1/chat/completions answers the chat recordings in every mode; POST /v1/messages
// and /v1/responses answer theirs in the json, stream and paced modes. The request body
// is always read in full and thrown away.
type upstream struct {
	byPath  map[string]*recording
	events  [][]byte // the recorded chat stream, event by event
	content [][]byte // its content events, cycled by hold streams
	tail    [][]byte // finish, usage and [DONE]

	mu     sync.Mutex
	sent   map[string][]int64       // paced stream id → send time of each event (Unix ns)
	groups map[string]chan struct{} // hold group → closed on release
	counts map[string]*atomic.Int64 // hold stream id → events written
	byGrp  map[string][]string      // hold group → its stream ids
	header map[string]string        // response headers OpenAI's API sends
	active atomic.Int64             // hold streams running
	buf    sync.Pool                // body-draining buffers
	rnd    atomic.Uint64            // drip phases
}

func newUpstream() *upstream {
	u := &upstream{
		events: splitEvents(recordedSSE),
		sent:   map[string][]int64{},
		groups: map[string]chan struct{}{},
		counts: map[string]*atomic.Int64{},
		byGrp:  map[string][]string{},
		header: map[string]string{
			"Openai-Organization":            "user-bench0000000000000000",
			"Openai-Processing-Ms":           "412",
			"Openai-Project":                 "proj_bench00000000000000000",
			"Openai-Version":                 "2020-10-01",
			"X-Ratelimit-Limit-Requests":     "10000",
			"X-Ratelimit-Remaining-Requests": "9999",
			"X-Ratelimit-Reset-Requests":     "6ms",
			"X-Request-Id":                   "req_5f0c2a7e9b1d4c3e8a6f0b2d4e6a8c0e",
			"Set-Cookie":                     "__cf_bm=bench; path=/; HttpOnly; Secure",
		},
	}
	u.byPath = map[string]*recording{
		"/v1/chat/completions": {json: recordedJSON, events: u.events, header: u.header},
		"/v1/messages": {json: recordedMessagesJSON, events: splitEvents(recordedMessagesSSE), header: map[string]string{
			"Anthropic-Organization-Id":                  "a1b2c3d4-0000-4000-8000-00000000bench",
			"Anthropic-Ratelimit-Input-Tokens-Limit":     "2000000",
			"Anthropic-Ratelimit-Input-Tokens-Remaining": "1978000",
			"Request-Id": "req_011CVbench0000000000000000",
			"Set-Cookie": "__cf_bm=bench; path=/; HttpOnly; Secure",
		}},
		"/v1/responses": {json: recordedResponsesJSON, events: splitEvents(recordedResponsesSSE), header: u.header},
	}
	u.buf.New = func() any { b := make([]byte, 32<<10); return &b }
	n := len(u.events)
	if n < 5 {
		panic("recorded stream too short")
	}
	u.content = u.events[1 : n-3]
	u.tail = u.events[n-3:]
	return u
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/_bench/sent":
		u.serveSent(w, r)
		return
	case "/_bench/release":
		u.release(w, r)
		return
	case "/_bench/counts":
		u.serveCounts(w, r)
		return
	}
	rec := u.byPath[r.URL.Path]
	if rec == nil || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	bp := u.buf.Get().(*[]byte)
	_, err := io.CopyBuffer(io.Discard, r.Body, *bp)
	u.buf.Put(bp)
	if err != nil {
		return
	}
	q := r.URL.Query()
	h := w.Header()
	for k, v := range rec.header {
		h[k] = []string{v}
	}
	switch q.Get("mode") {
	case "", "json":
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(rec.json)))
		_, _ = w.Write(rec.json)
	case "stream":
		u.sse(w)
		for _, ev := range rec.events {
			if !u.write(w, ev) {
				return
			}
		}
	case "paced":
		u.paced(w, r, rec.events, q.Get("id"), every(q.Get("every"), 10*time.Millisecond))
	case "hold":
		if r.URL.Path != "/v1/chat/completions" {
			http.Error(w, "hold streams are chat completions only", http.StatusBadRequest)
			return
		}
		u.hold(w, r, q.Get("id"), q.Get("group"), every(q.Get("every"), time.Second))
	default:
		http.Error(w, "unknown mode", http.StatusBadRequest)
	}
}

func every(s string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d
	}
	return def
}

func (u *upstream) sse(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
}

// write sends one event and flushes it; false when the client is gone.
func (u *upstream) write(w http.ResponseWriter, ev []byte) bool {
	if _, err := w.Write(ev); err != nil {
		return false
	}
	return http.NewResponseController(w).Flush() == nil
}

func (u *upstream) paced(w http.ResponseWriter, r *http.Request, events [][]byte, id string, interval time.Duration) {
	u.sse(w)
	times := make([]int64, 0, len(events))
	next := time.Now()
	for i, ev := range events {
		if i > 0 {
			next = next.Add(interval)
			select {
			case <-time.After(time.Until(next)):
			case <-r.Context().Done():
				return
			}
		}
		times = append(times, time.Now().UnixNano())
		if !u.write(w, ev) {
			return
		}
	}
	if id != "" {
		u.mu.Lock()
		u.sent[id] = times
		u.mu.Unlock()
	}
}

func (u *upstream) group(name string) chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	ch, ok := u.groups[name]
	if !ok {
		ch = make(chan struct{})
		u.groups[name] = ch
	}
	return ch
}

func (u *upstream) hold(w http.ResponseWriter, r *http.Request, id, group string, interval time.Duration) {
	release := u.group(group)
	count := new(atomic.Int64)
	u.mu.Lock()
	u.counts[id] = count
	u.byGrp[group] = append(u.byGrp[group], id)
	u.mu.Unlock()
	u.active.Add(1)
	defer u.active.Add(-1)

	u.sse(w)
	send := func(ev []byte) bool {
		count.Add(1) // counted before the write, so a client that has seen it finds it counted
		return u.write(w, ev)
	}
	if !send(u.events[0]) {
		return
	}
	// A random phase spreads the drips of many streams over the interval.
	phase := time.Duration(u.rnd.Add(0x9E3779B97F4A7C15) % uint64(interval))
	t := time.NewTimer(phase + interval)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-t.C:
			if !send(u.content[i%len(u.content)]) {
				return
			}
			t.Reset(interval)
			continue
		case <-release:
		case <-r.Context().Done():
			return
		}
		break
	}
	for _, ev := range u.tail {
		if !send(ev) {
			return
		}
	}
}

func (u *upstream) serveSent(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	u.mu.Lock()
	times, ok := u.sent[id]
	delete(u.sent, id)
	u.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	writeJSON(w, times)
}

func (u *upstream) release(w http.ResponseWriter, r *http.Request) {
	ch := u.group(r.URL.Query().Get("group"))
	u.mu.Lock()
	select {
	case <-ch:
	default:
		close(ch)
	}
	u.mu.Unlock()
	writeJSON(w, map[string]int64{"active": u.active.Load()})
}

func (u *upstream) serveCounts(w http.ResponseWriter, r *http.Request) {
	group := r.URL.Query().Get("group")
	u.mu.Lock()
	out := make(map[string]int64, len(u.byGrp[group]))
	for _, id := range u.byGrp[group] {
		out[id] = u.counts[id].Load()
		delete(u.counts, id)
	}
	delete(u.byGrp, group)
	u.mu.Unlock()
	writeJSON(w, map[string]any{"active": u.active.Load(), "counts": out})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// runUpstream is the `upstream` subcommand: it serves on two 127.0.0.1 ports, cleartext
// (HTTP/1.1) and TLS (HTTP/2 by ALPN, as every hosted provider answers), prints both
// addresses on the first line of stdout, and exits when stdin closes (its parent went
// away) or on SIGTERM. The TLS certificate is made at start and its PEM written to -ca,
// which the proxies trust through SSL_CERT_FILE.
func runUpstream(args []string) error {
	fs := flag.NewFlagSet("upstream", flag.ContinueOnError)
	caPath := fs.String("ca", "", "where to write the TLS listener's certificate (PEM)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *caPath == "" {
		return errors.New("-ca is required")
	}
	debug.SetGCPercent(400)
	cert, err := selfSignedLoopback(*caPath)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	tlsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	h := newUpstream()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	tlsSrv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	fmt.Println(ln.Addr().String(), tlsLn.Addr().String())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
		<-sig
		os.Exit(0)
	}()
	go func() {
		if err := tlsSrv.ServeTLS(tlsLn, "", ""); err != nil {
			fmt.Fprintln(os.Stderr, "upstream tls:", err)
			os.Exit(1)
		}
	}()
	return srv.Serve(ln)
}

// selfSignedLoopback makes a certificate for 127.0.0.1 that is its own authority and
// writes it, PEM-encoded, to path.
func selfSignedLoopback(path string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "switchyard bench upstream"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
