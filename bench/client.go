package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// The request bodies. smallBody is a typical short chat request; the streamed one asks
// for usage itself (as most SDK integrations do), so every target relays the same events.
var (
	smallBody = []byte(`{"model":"` + benchModel + `","messages":[` +
		`{"role":"system","content":"You are a concise assistant. Answer in one short paragraph."},` +
		`{"role":"user","content":"What does a reverse proxy do, and why does its own cost matter?"}],` +
		`"temperature":0.2,"max_completion_tokens":256}`)
	streamBody = []byte(`{"model":"` + benchModel + `","messages":[` +
		`{"role":"system","content":"You are a concise assistant. Answer in one short paragraph."},` +
		`{"role":"user","content":"What does a reverse proxy do, and why does its own cost matter?"}],` +
		`"temperature":0.2,"max_completion_tokens":256,"stream":true,"stream_options":{"include_usage":true}}`)
)

// The small streamed requests of the other two shapes: the same question, in each shape's
// own body, answered by the fixed upstream with the shape's recorded 48-event stream.
var (
	messagesStreamBody = []byte(`{"model":"` + benchClaudeModel + `","max_tokens":256,"stream":true,` +
		`"system":"You are a concise assistant. Answer in one short paragraph.",` +
		`"messages":[{"role":"user","content":"What does a reverse proxy do, and why does its own cost matter?"}]}`)
	responsesStreamBody = []byte(`{"model":"` + benchCodexModel + `","stream":true,"max_output_tokens":256,` +
		`"instructions":"You are a concise assistant. Answer in one short paragraph.",` +
		`"input":"What does a reverse proxy do, and why does its own cost matter?"}`)
)

// The shapes the stream phase measures, each in its own native events.
const (
	shapeChat      = "chat"
	shapeResponses = "responses"
	shapeMessages  = "messages"
)

// streamRequest is an unpaced streamed request of the shape, as that shape's clients send it.
func streamRequest(host, shape string) []byte {
	if shape == shapeChat {
		return chatRequest(host, "stream", "", streamBody)
	}
	path, body, auth := "/v1/responses", responsesStreamBody, "Authorization: Bearer "+benchKey+"\r\n"
	if shape == shapeMessages {
		path, body, auth = "/v1/messages", messagesStreamBody, "X-Api-Key: "+benchKey+"\r\nAnthropic-Version: 2023-06-01\r\n"
	}
	var b bytes.Buffer
	b.Grow(len(body) + 400)
	fmt.Fprintf(&b, "POST %s?mode=stream HTTP/1.1\r\nHost: %s\r\n%s", path, host, auth)
	b.WriteString("Content-Type: application/json\r\nAccept: text/event-stream\r\nUser-Agent: switchyard-bench/1\r\n")
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
	b.Write(body)
	return b.Bytes()
}

// recordedStream is the shape's recorded stream, as the fixed upstream sends it.
func recordedStream(shape string) []byte {
	switch shape {
	case shapeMessages:
		return recordedMessagesSSE
	case shapeResponses:
		return recordedResponsesSSE
	}
	return recordedSSE
}

// largeBody is a chat request of about size bytes: one user message holding a long
// document of plain words.
func largeBody(size int) []byte {
	head := `{"model":"` + benchModel + `","messages":[{"role":"system","content":"Summarise the document."},{"role":"user","content":"`
	tail := `"}],"max_completion_tokens":512}`
	words := []string{"gateway ", "latency ", "request ", "stream ", "token ", "proxy ", "upstream ", "model "}
	var b bytes.Buffer
	b.Grow(size)
	b.WriteString(head)
	for i := 0; b.Len() < size-len(tail); i++ {
		b.WriteString(words[(i*7+i/8)%len(words)])
	}
	b.Truncate(size - len(tail))
	b.WriteString(tail)
	return b.Bytes()
}

// chatRequest is a complete HTTP/1.1 request for POST /v1/chat/completions. The query
// string drives the fixed upstream; both proxies pass it on unchanged.
func chatRequest(host, mode, extraQuery string, body []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(body) + 400)
	fmt.Fprintf(&b, "POST /v1/chat/completions?mode=%s%s HTTP/1.1\r\n", mode, extraQuery)
	fmt.Fprintf(&b, "Host: %s\r\n", host)
	b.WriteString("Authorization: Bearer " + benchKey + "\r\n")
	b.WriteString("Content-Type: application/json\r\n")
	if mode == "json" {
		b.WriteString("Accept: application/json\r\n")
	} else {
		b.WriteString("Accept: text/event-stream\r\n")
	}
	b.WriteString("User-Agent: switchyard-bench/1\r\n")
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
	b.Write(body)
	return b.Bytes()
}

// h1 is one keep-alive HTTP/1.1 connection driven by hand: the request bytes are built
// once and the client's own cost stays small and the same for every target.
type h1 struct {
	addr string
	conn net.Conn
	br   *bufio.Reader
}

func newH1(addr string) *h1 { return &h1{addr: addr} }

func (c *h1) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

func (c *h1) dial() error {
	conn, err := net.DialTimeout("tcp", c.addr, 5*time.Second)
	if err != nil {
		return err
	}
	c.conn = conn
	if c.br == nil {
		c.br = bufio.NewReaderSize(conn, 32<<10)
	} else {
		c.br.Reset(conn)
	}
	return nil
}

// send writes a request and reads the response head, redialling once when a reused
// connection turns out to be closed.
func (c *h1) send(req []byte) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		reused := c.conn != nil
		if !reused {
			if err := c.dial(); err != nil {
				return nil, err
			}
		}
		_ = c.conn.SetDeadline(time.Now().Add(60 * time.Second))
		_, err := c.conn.Write(req)
		var resp *http.Response
		if err == nil {
			resp, err = http.ReadResponse(c.br, nil)
		}
		if err == nil {
			return resp, nil
		}
		c.close()
		if !reused || attempt > 0 {
			return nil, err
		}
	}
}

// do sends a request and reads the whole body; keep says whether to return it.
func (c *h1) do(req []byte, keep bool) (int, []byte, error) {
	resp, err := c.send(req)
	if err != nil {
		return 0, nil, err
	}
	var body []byte
	if keep {
		body, err = io.ReadAll(resp.Body)
	} else {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	resp.Body.Close()
	if err != nil || resp.Close {
		c.close()
	}
	return resp.StatusCode, body, err
}

// sseResult is what a client saw of one stream.
type sseResult struct {
	status int
	start  int64   // request written (Unix ns)
	recv   []int64 // arrival of each data event (Unix ns)
	done   bool    // data: [DONE] arrived
	err    error
}

// readSSE reads data events from an SSE body until it ends, calling first after the
// first one (nil allowed).
func readSSE(body io.Reader, res *sseResult, first func()) {
	br := bufio.NewReaderSize(body, 16<<10)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 && bytes.HasPrefix(line, []byte("data:")) {
			res.recv = append(res.recv, time.Now().UnixNano())
			if bytes.HasPrefix(bytes.TrimSpace(line[5:]), []byte("[DONE]")) {
				res.done = true
			}
			if len(res.recv) == 1 && first != nil {
				first()
			}
		}
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if !errors.Is(err, io.EOF) {
				res.err = err
			}
			return
		}
	}
}

// stream sends a streamed request on c and reads every event.
func (c *h1) stream(req []byte, first func()) sseResult {
	var res sseResult
	res.start = time.Now().UnixNano()
	resp, err := c.send(req)
	if err != nil {
		res.err = err
		return res
	}
	res.status = resp.StatusCode
	_ = c.conn.SetDeadline(time.Time{})
	readSSE(resp.Body, &res, first)
	resp.Body.Close()
	if res.err != nil || resp.Close {
		c.close()
	}
	return res
}

// newH2C is an HTTP client that speaks cleartext HTTP/2 (prior knowledge) only: many
// streams share a few connections, as they do behind a TLS front end.
func newH2C() *http.Client {
	tr := &http.Transport{
		Protocols:           new(http.Protocols),
		MaxIdleConnsPerHost: 64,
		DisableCompression:  true,
		HTTP2: &http.HTTP2Config{
			MaxReceiveBufferPerConnection: 4 << 20,
			MaxReceiveBufferPerStream:     64 << 10,
		},
	}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr}
}

// h2cStream sends a streamed request over HTTP/2 and reads every event.
func h2cStream(client *http.Client, addr, query string, first func()) sseResult {
	var res sseResult
	res.start = time.Now().UnixNano()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions?"+query, bytes.NewReader(streamBody))
	if err != nil {
		res.err = err
		return res
	}
	req.Header.Set("Authorization", "Bearer "+benchKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("User-Agent", "switchyard-bench/1")
	resp, err := client.Do(req)
	if err != nil {
		res.err = err
		return res
	}
	defer resp.Body.Close()
	res.status = resp.StatusCode
	if !strings.HasPrefix(resp.Proto, "HTTP/2") {
		res.err = fmt.Errorf("expected HTTP/2, got %s", resp.Proto)
		return res
	}
	readSSE(resp.Body, &res, first)
	return res
}
