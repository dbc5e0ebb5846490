package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/simulator"
)

// watchedUpstream is the simulator behind a counter of the request body bytes it has
// received so far, and of the bodies it received whole (the only ones it could act on).
type watchedUpstream struct {
	*upstream
	received atomic.Int64
	whole    atomic.Int64
	bodies   chan []byte
}

func newWatchedUpstream(t *testing.T) *watchedUpstream {
	w := &watchedUpstream{upstream: &upstream{}, bodies: make(chan []byte, 16)}
	sim := simulator.New(simulator.Config{APIKey: upstreamCred})
	w.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(&countingReader{r: r.Body, n: &w.received})
		if err != nil {
			return // an unfinished request: nothing to act on
		}
		w.whole.Add(1)
		select {
		case w.bodies <- body:
		default: // a test that keeps none must not stall the upstream (and its gateway)
		}
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		sim.ServeHTTP(rw, r)
	}))
	t.Cleanup(w.Close)
	return w
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// slowClient sends a request by hand: the headers and the body's first part, then the
// rest when told. It returns the status and body of the answer.
type slowClient struct {
	conn net.Conn
	rest string
	br   *bufio.Reader // the answer's reader, once answered looked for one
}

// answered reports whether the gateway has answered already, before the rest of the
// body was sent: the request was refused at entry.
func (c *slowClient) answered() bool {
	if c.br == nil {
		c.br = bufio.NewReader(c.conn)
	}
	_ = c.conn.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	defer func() { _ = c.conn.SetReadDeadline(time.Time{}) }()
	_, err := c.br.Peek(1)
	return err == nil
}

func startSlowRequest(t *testing.T, g *gateway, path, body string, first int, headers ...string) *slowClient {
	t.Helper()
	return startSlowRequestAs(t, g, testKey, path, body, first, headers...)
}

// startSlowRequestAs sends the head of a request with key and the first bytes of its body,
// and leaves the rest for finish.
func startSlowRequestAs(t *testing.T, g *gateway, key, path, body string, first int, headers ...string) *slowClient {
	t.Helper()
	host := strings.TrimPrefix(g.base, "http://")
	conn, err := net.Dial("tcp", host)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = io.WriteString(conn, rawRequestHead(host, key, path, len(body), headers...)+body[:first])
	require.NoError(t, err)
	return &slowClient{conn: conn, rest: body[first:]}
}

// rawRequestHead is an HTTP/1.1 request head for a body of length bytes, as the tests that
// write to the connection themselves send it. The Host must name the gateway's site, or
// Caddy answers with its empty default.
func rawRequestHead(host, key, path string, length int, headers ...string) string {
	head := "POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + key +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(length) + "\r\n"
	if strings.HasPrefix(path, "/v1/messages") {
		head += "anthropic-version: 2023-06-01\r\n"
	}
	for i := 0; i+1 < len(headers); i += 2 {
		head += headers[i] + ": " + headers[i+1] + "\r\n"
	}
	return head + "\r\n"
}

func (c *slowClient) finish(t *testing.T) (int, string) {
	t.Helper()
	_, err := io.WriteString(c.conn, c.rest)
	require.NoError(t, err)
	return c.answer(t)
}

func (c *slowClient) answer(t *testing.T) (int, string) {
	t.Helper()
	require.NoError(t, c.conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	if c.br == nil {
		c.br = bufio.NewReader(c.conn)
	}
	resp, err := http.ReadResponse(c.br, nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// largeChat is a chat request of about size bytes, model first as coding agents send it.
func largeChat(model string, size int, tail string) string {
	text := strings.Repeat("Refactor the relay so it reads less; keep \\\"every\\\" check. ✓ ", size/64)
	return `{"model":"` + model + `","messages":[{"role":"user","content":"` + text + `"}]` + tail + `}`
}

func TestALargeBodyReachesTheUpstreamWhileTheClientStillSendsIt(t *testing.T) {
	up := newWatchedUpstream(t)
	models := "\t\tmodel big-a {\n" + candidate("main", "family_a", up.URL+"/v1", upstreamPrefix+"-big") + "\t\t}\n" +
		"\t\tmodel big-b {\n" + candidate("main", "family_b", up.URL, upstreamPrefix+"-big") + "\t\t}\n"
	g := startGatewayWith(t, up.upstream, models, "")

	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", largeChat("big-a", 600<<10, `,"max_tokens":64`)},
		{"/v1/chat/completions", largeChat("big-a", 600<<10, `,"stream":true`)},
		{"/v1/messages", largeChat("big-b", 600<<10, `,"max_tokens":64`)},
	} {
		up.received.Store(0)
		client := startSlowRequest(t, g, c.path, c.body, len(c.body)/2)
		// Half the body sent, and the upstream gets it now, not when the client is done.
		require.Eventually(t, func() bool { return up.received.Load() > int64(len(c.body))/3 }, 5*time.Second, 5*time.Millisecond,
			"the upstream saw nothing of a body half sent")
		assert.Less(t, up.received.Load(), int64(len(c.body)/2)+64, "the upstream got bytes the client has not sent")
		status, answer := client.finish(t)
		require.Equal(t, 200, status, answer)
		assert.Contains(t, answer, `"model":"big-`)
		assert.NotContains(t, answer, upstreamPrefix)

		// The upstream got the client's body with only the model changed: byte for byte
		// what it gets when the body is read whole first.
		got := <-up.bodies
		want := strings.NewReplacer(`"model":"big-a"`, `"model":"`+upstreamPrefix+`-big"`,
			`"model":"big-b"`, `"model":"`+upstreamPrefix+`-big"`).Replace(c.body)
		if strings.Contains(c.body, `"stream":true`) {
			want = strings.TrimSuffix(want, "}") + `,"stream_options":{"include_usage":true}}`
		}
		assert.Equal(t, want, string(got))
	}
	g.assertNoCircuitOpen(t, "", true)
}

func TestALargeBodyThatFailsAtItsEndReachesNoUpstream(t *testing.T) {
	up := newWatchedUpstream(t)
	models := "\t\tmodel big-a {\n" + candidate("main", "family_a", up.URL+"/v1", upstreamPrefix+"-big") + "\t\t}\n" +
		"\t\tmodel big-b {\n" + candidate("main", "family_b", up.URL, upstreamPrefix+"-big") + "\t\t}\n"
	g := startGatewayWith(t, up.upstream, models, "")

	for _, c := range []struct {
		name, path, body, want string
		status                 int
	}{
		{"the model twice", "/v1/chat/completions", largeChat("big-a", 300<<10, `,"model":"big-a"`), "more than once", 400},
		{"JSON broken at the end", "/v1/messages", largeChat("big-b", 300<<10, `,"max_tokens":64,"x":tru`), "not valid JSON", 400},
		{"an output cap that is not a number", "/v1/messages", largeChat("big-b", 300<<10, `,"max_tokens":"many"`), "max_tokens", 400},
		{"bad UTF-8 at the end", "/v1/chat/completions", largeChat("big-a", 300<<10, ",\"user\":\"\xff\""), "UTF-8", 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			up.received.Store(0)
			client := startSlowRequest(t, g, c.path, c.body, len(c.body)-40)
			require.Eventually(t, func() bool { return up.received.Load() > int64(len(c.body))/2 }, 5*time.Second, 5*time.Millisecond)
			status, answer := client.finish(t)
			require.Equal(t, c.status, status, answer)
			assert.Contains(t, gjson.Get(answer, "error.message").Str, c.want)
			assert.Equal(t, map[bool]string{true: "error", false: ""}[c.path == "/v1/messages"], gjson.Get(answer, "type").Str,
				"the error is in the family's envelope")
		})
	}

	t.Run("the client leaves halfway", func(t *testing.T) {
		body := largeChat("big-a", 300<<10, "")
		up.received.Store(0)
		client := startSlowRequest(t, g, "/v1/chat/completions", body, len(body)/2)
		require.Eventually(t, func() bool { return up.received.Load() > int64(len(body))/3 }, 5*time.Second, 5*time.Millisecond)
		client.conn.Close()
		time.Sleep(200 * time.Millisecond)
	})

	assert.Zero(t, up.whole.Load(), "an upstream received a whole body it could act on")
	g.assertNoCircuitOpen(t, "", true)
	// The gateway still serves the model.
	r := g.call(t, "POST", "/v1/chat/completions", largeChat("big-a", 100<<10, ""))
	assert.Equal(t, 200, r.Status, "%s", r.Body)
}

func TestASlowClientNeverMakesACandidateLookSlow(t *testing.T) {
	up := newWatchedUpstream(t)
	// A first-byte limit far shorter than the client takes to send its body.
	models := "\t\tmodel big-a {\n" + candidate("main", "family_a", up.URL+"/v1", upstreamPrefix+"-big", "first_byte_timeout 300ms") + "\t\t}\n"
	g := startGatewayWith(t, up.upstream, models, "")
	body := largeChat("big-a", 300<<10, `,"stream":true`)
	client := startSlowRequest(t, g, "/v1/chat/completions", body, len(body)/2)
	time.Sleep(800 * time.Millisecond)
	status, answer := client.finish(t)
	require.Equal(t, 200, status, answer)
	assert.Contains(t, answer, "data: [DONE]")
	g.assertNoCircuitOpen(t, "", true)
}

func TestALargeBodyFailsOverWhileItArrives(t *testing.T) {
	up := newWatchedUpstream(t)
	// The first candidate refuses connections; the second serves.
	models := "\t\tmodel big-a {\n" +
		candidate("refused", "family_a", "http://127.0.0.1:1/v1", upstreamPrefix+"-dead", "priority 1") +
		candidate("main", "family_a", up.URL+"/v1", upstreamPrefix+"-big", "priority 2") + "\t\t}\n"
	g := startGatewayWith(t, up.upstream, models, "")
	body := largeChat("big-a", 400<<10, "")
	// Among several candidates a session header lets conversation affinity choose
	// without the body's prompt_cache_key, as Claude Code and Codex send it.
	client := startSlowRequest(t, g, "/v1/chat/completions", body, len(body)/2, "Session-Id", "conversation-1")
	require.Eventually(t, func() bool { return up.received.Load() > int64(len(body))/3 }, 5*time.Second, 5*time.Millisecond,
		"the second candidate did not get the body while it arrived")
	status, answer := client.finish(t)
	require.Equal(t, 200, status, answer)
	got := <-up.bodies
	assert.Equal(t, strings.Replace(body, `"model":"big-a"`, `"model":"`+upstreamPrefix+`-big"`, 1), string(got))
}

func TestASlowUploadHoldsNoUpstreamConnection(t *testing.T) {
	up := newWatchedUpstream(t)
	var requests, unfinished atomic.Int64
	inner := up.Config.Handler
	up.Config.Handler = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		before := up.whole.Load()
		inner.ServeHTTP(rw, r)
		if up.whole.Load() == before {
			unfinished.Add(1)
		}
	})
	models := "\t\tmodel big-a {\n" + candidate("main", "family_a", up.URL+"/v1", upstreamPrefix+"-big") + "\t\t}\n"
	g := startGatewayWith(t, up.upstream, models, "")
	body := largeChat("big-a", 300<<10, `,"stream":true`)
	client := startSlowRequest(t, g, "/v1/chat/completions", body, len(body)/2)
	require.Eventually(t, func() bool { return up.received.Load() > int64(len(body))/3 }, 5*time.Second, 5*time.Millisecond)
	// The client stops sending: within a little more than the stall limit the gateway
	// lets go of the upstream request it could not finish.
	require.Eventually(t, func() bool { return unfinished.Load() == 1 }, 3*time.Second, 10*time.Millisecond,
		"the upstream is still held by a client that stopped sending")
	status, answer := client.finish(t)
	require.Equal(t, 200, status, answer)
	assert.Contains(t, answer, "data: [DONE]")
	assert.Contains(t, answer, `"usage":`, "the usage the gateway meters came back")
	// The same candidate got the body again, whole, once the client had sent it.
	assert.Equal(t, int64(2), requests.Load())
	want := strings.Replace(body, `"model":"big-a"`, `"model":"`+upstreamPrefix+`-big"`, 1)
	assert.Equal(t, strings.TrimSuffix(want, "}")+`,"stream_options":{"include_usage":true}}`, string(<-up.bodies))
	g.assertNoCircuitOpen(t, "", true)
}

func TestAnArrivingChatStreamWhoseUsageRequestWasSentIsSentAgainWhole(t *testing.T) {
	up := newWatchedUpstream(t)
	models := "\t\tmodel big-a {\n" + candidate("main", "family_a", up.URL+"/v1", upstreamPrefix+"-big") + "\t\t}\n"
	g := startGatewayWith(t, up.upstream, models, "")
	// stream_options comes before the messages, without include_usage: the gateway must
	// add it inside an object the upstream already has.
	text := strings.Repeat("Explain the diff line by line. ", 300<<10/32)
	body := `{"model":"big-a","stream":true,"stream_options":{"include_obfuscation":false},"messages":[{"role":"user","content":"` + text + `"}]}`
	client := startSlowRequest(t, g, "/v1/chat/completions", body, len(body)/2)
	require.Eventually(t, func() bool { return up.received.Load() > int64(len(body))/3 }, 5*time.Second, 5*time.Millisecond)
	status, answer := client.finish(t)
	require.Equal(t, 200, status, answer)
	assert.Contains(t, answer, "data: [DONE]")
	got := string(<-up.bodies)
	assert.Contains(t, got, `"include_usage":true`)
	assert.Contains(t, got, `"model":"`+upstreamPrefix+`-big"`)
	assert.Equal(t, int64(1), up.whole.Load(), "the upstream got one whole body")
	g.assertNoCircuitOpen(t, "", true)
}

// Large bodies reuse their buffers once nothing reads them. An upstream that answers
// before it reads the body (full duplex) makes the gateway's transport send the body's
// rest after the answer has reached the client and the handler has let go: if the buffer
// served another request then, the upstream would read that request's bytes.
func TestLargeBodiesSentTogetherReachTheirUpstreamWhole(t *testing.T) {
	var (
		mu       sync.Mutex
		received = map[string]string{} // the request's mark → the body the upstream read
	)
	answer := `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"` + upstreamPrefix +
		`-big","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}`
	up := &upstream{}
	up.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("answer") == "first" {
			_ = http.NewResponseController(rw).EnableFullDuplex()
			rw.Header().Set("Content-Type", "application/json")
			rw.Header().Set("Content-Length", strconv.Itoa(len(answer)))
			_, _ = io.WriteString(rw, answer)
			_ = http.NewResponseController(rw).Flush()
		}
		if r.URL.Query().Get("answer") == "first" {
			time.Sleep(30 * time.Millisecond) // the client has its answer meanwhile
		}
		// A body answered first is cut off once the gateway has relayed the answer:
		// what was read of it is kept too.
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		received[gjson.GetBytes(body, "user").Str] = string(body)
		mu.Unlock()
		if r.URL.Query().Get("answer") != "first" {
			rw.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(rw, answer)
		}
	}))
	// A small receive buffer, so the gateway's transport is still sending a body when
	// its answer is in: it holds what the sender's buffer does (4 MiB here) and no more.
	// Set on the listener, before any handshake: shrinking an open connection's buffer
	// below the window it has offered stalls it.
	up.Listener.Close()
	up.Listener = listenWithSmallReceiveBuffer(t)
	up.Start()
	t.Cleanup(up.Close)
	models := "\t\tmodel big-a {\n" + candidate("main", "family_a", up.URL+"/v1", upstreamPrefix+"-big") + "\t\t}\n"
	// A key with a limit waits for the whole body before any candidate is called, and
	// sends it from the same buffer.
	const limitedKey = "sk-limited-key-0123456789abcdef"
	g := startGatewayWith(t, up, models, "\t\tkey limited "+limitedKey+" {\n\t\t\trpm 100000\n\t\t}\n")

	const clients, each = 4, 3
	want := map[string]string{}
	bodies := make([][]string, clients)
	for c := range clients {
		for i := range each {
			mark := fmt.Sprintf("client-%d-request-%d", c, i)
			// Larger than the socket buffers between them hold; one size class, so that
			// buffers are shared.
			text := strings.Repeat(mark+" says ✓ \\\"this\\\". ", (5<<20+(c*each+i)<<10)/40)
			body := `{"model":"big-a","user":"` + mark + `","messages":[{"role":"user","content":"` + text + `"}]}`
			bodies[c] = append(bodies[c], body)
			want[mark] = strings.Replace(body, `"model":"big-a"`, `"model":"`+upstreamPrefix+`-big"`, 1)
		}
	}
	var wg sync.WaitGroup
	failures := make(chan string, clients*each)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, body := range bodies[c] {
				path := "/v1/chat/completions"
				if (c+i)%2 == 0 {
					path += "?answer=first"
				}
				var headers []string
				if c%2 == 1 {
					headers = []string{"Authorization", "Bearer " + limitedKey}
				}
				r, err := g.send("POST", path, body, headers...)
				if err != nil || r.Status != 200 || !strings.Contains(string(r.Body), `"model":"big-a"`) {
					failures <- fmt.Sprintf("client %d request %d: %v %v", c, i, err, r)
				}
			}
		}()
	}
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
	time.Sleep(100 * time.Millisecond) // the last upstream reads end
	mu.Lock()
	defer mu.Unlock()
	cut := 0
	for mark, body := range want {
		got, ok := received[mark]
		if !ok {
			continue // cut off before the mark
		}
		if !strings.HasPrefix(body, got) {
			t.Errorf("%s: the upstream read other bytes than the client sent", mark)
		}
		if len(got) < len(body) {
			cut++
		}
	}
	t.Logf("%d of %d bodies were cut off after their answer", cut, len(want))
}

func listenWithSmallReceiveBuffer(t *testing.T) net.Listener {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var setErr error
		if err := c.Control(func(fd uintptr) {
			setErr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10)
		}); err != nil {
			return err
		}
		return setErr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return ln
}
