package bedrock

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/protocols"
)

var messages = protocols.Operation{Family: protocols.FamilyB, Kind: protocols.KindMessages}

// events is an answer as Anthropic's API streams it, in order.
var events = []string{
	`{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
	`{"type":"ping"}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":", world \u2014 \"quoted\"\n"}}`,
	`{"type":"content_block_stop","index":0}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}`,
	`{"type":"message_stop"}`,
}

// wantSSE is what Anthropic's API sends for events.
func wantSSE(evs []string) string {
	var b strings.Builder
	for _, e := range evs {
		typ := e[len(`{"type":"`):]
		typ = typ[:strings.IndexByte(typ, '"')]
		b.WriteString("event: " + typ + "\ndata: " + e + "\n\n")
	}
	return b.String()
}

func encode(t *testing.T, headers eventstream.Headers, payload []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := eventstream.NewEncoder().Encode(&buf, eventstream.Message{Headers: headers, Payload: payload}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// chunkFrame is a frame as Bedrock sends one event: base64 in "bytes", padding in "p".
func chunkFrame(t *testing.T, event string) []byte {
	t.Helper()
	payload := `{"bytes":"` + base64.StdEncoding.EncodeToString([]byte(event)) + `","p":"abcdefghijklmnopq"}`
	var hs eventstream.Headers
	hs.Set(":event-type", eventstream.StringValue("chunk"))
	hs.Set(":content-type", eventstream.StringValue("application/json"))
	hs.Set(":message-type", eventstream.StringValue("event"))
	return encode(t, hs, []byte(payload))
}

func exceptionFrame(t *testing.T, exception, payload string) []byte {
	t.Helper()
	var hs eventstream.Headers
	hs.Set(":exception-type", eventstream.StringValue(exception))
	hs.Set(":content-type", eventstream.StringValue("application/json"))
	hs.Set(":message-type", eventstream.StringValue("exception"))
	return encode(t, hs, []byte(payload))
}

// bedrockStream is events as Bedrock frames them, with its metrics in message_stop.
func bedrockStream(t *testing.T) (stream []byte, frames [][]byte) {
	t.Helper()
	for i, e := range events {
		if i == len(events)-1 {
			e = `{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":12,"outputTokenCount":5,"invocationLatency":1798,"firstByteLatency":1507}}`
		}
		f := chunkFrame(t, e)
		frames = append(frames, f)
		stream = append(stream, f...)
	}
	return stream, frames
}

func streamResponse(body io.Reader) *http.Response {
	h := http.Header{}
	h.Set("Content-Type", "application/vnd.amazon.eventstream")
	h.Set("X-Amzn-Bedrock-Content-Type", "application/json")
	h.Set("Content-Length", "1234")
	return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(body), ContentLength: 1234}
}

// readStream reads what a client would be sent, and the error the stream ended with.
func readStream(t *testing.T, body io.Reader) (string, error) {
	t.Helper()
	resp := streamResponse(body)
	Respond(messages, resp)
	out, err := io.ReadAll(resp.Body)
	return string(out), err
}

func TestStreamBecomesAnthropicSSE(t *testing.T) {
	stream, _ := bedrockStream(t)
	resp := streamResponse(bytes.NewReader(stream))
	Respond(messages, resp)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q, want text/event-stream", ct)
	}
	if resp.Header.Get("Content-Length") != "" || resp.ContentLength != -1 {
		t.Errorf("length still announced: header %q, ContentLength %d", resp.Header.Get("Content-Length"), resp.ContentLength)
	}
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("complete stream: %v", err)
	}
	if got, want := string(out), wantSSE(events); got != want {
		t.Errorf("SSE differs from Anthropic's\n got: %q\nwant: %q", got, want)
	}
}

func TestStreamDropsInvocationMetrics(t *testing.T) {
	out, err := readStream(t, bytes.NewReader(chunkFrame(t, `{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":1,"outputTokenCount":2}}`)))
	if err != nil {
		t.Fatal(err)
	}
	if want := "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"; out != want {
		t.Errorf("got %q, want %q", out, want)
	}
}

func TestStreamSameOutputHoweverBytesArrive(t *testing.T) {
	stream, _ := bedrockStream(t)
	want := wantSSE(events)

	out, err := readStream(t, iotest.OneByteReader(bytes.NewReader(stream)))
	if err != nil || out != want {
		t.Fatalf("one byte per read: err %v\n got: %q\nwant: %q", err, out, want)
	}
	for cut := 1; cut < len(stream); cut++ {
		out, err := readStream(t, io.MultiReader(bytes.NewReader(stream[:cut]), bytes.NewReader(stream[cut:])))
		if err != nil || out != want {
			t.Fatalf("split at byte %d: err %v\n got: %q\nwant: %q", cut, err, out, want)
		}
	}
}

// An event is passed on as soon as its frame is in, not when the stream ends.
func TestStreamYieldsEachEventAsItsFrameArrives(t *testing.T) {
	_, frames := bedrockStream(t)
	pr, pw := io.Pipe()
	defer pw.Close()
	resp := streamResponse(pr)
	Respond(messages, resp)

	go func() {
		for _, f := range frames[:2] {
			if _, err := pw.Write(f); err != nil {
				return
			}
		}
	}()
	want := wantSSE(events[:2])
	got := make([]byte, len(want))
	done := make(chan error, 1)
	go func() { _, err := io.ReadFull(resp.Body, got); done <- err }()
	select {
	case err := <-done:
		if err != nil || string(got) != want {
			t.Fatalf("err %v\n got: %q\nwant: %q", err, got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first events were held back waiting for more of the stream")
	}
}

func TestStreamBadChecksumsFail(t *testing.T) {
	stream, frames := bedrockStream(t)
	second := len(frames[0])
	for name, at := range map[string]int{
		"prelude CRC": second + 8,
		"header byte": second + 13,
		"payload":     second + len(frames[1]) - 10,
		"message CRC": second + len(frames[1]) - 1,
	} {
		t.Run(name, func(t *testing.T) {
			bad := bytes.Clone(stream)
			bad[at] ^= 0x40
			out, err := readStream(t, bytes.NewReader(bad))
			if err == nil || errors.Is(err, io.EOF) {
				t.Fatalf("corrupt %s: stream ended with %v, want a failure", name, err)
			}
			if want := wantSSE(events[:1]); out != want {
				t.Errorf("before the bad frame got %q, want %q", out, want)
			}
		})
	}
}

func TestStreamTruncatedFails(t *testing.T) {
	stream, frames := bedrockStream(t)
	last := len(stream) - len(frames[len(frames)-1])
	for cut := last + 1; cut < len(stream); cut++ {
		out, err := readStream(t, bytes.NewReader(stream[:cut]))
		if err == nil || errors.Is(err, io.EOF) {
			t.Fatalf("stream cut at %d (inside the last frame) ended with %v, want a failure", cut, err)
		}
		if want := wantSSE(events[:len(events)-1]); out != want {
			t.Fatalf("cut at %d: got %q, want the events before it", cut, out)
		}
	}
}

func TestStreamOversizedFrameFailsWithoutReadingIt(t *testing.T) {
	var prelude [12]byte
	binary.BigEndian.PutUint32(prelude[0:], 64<<20)
	binary.BigEndian.PutUint32(prelude[4:], 0)
	// A true prelude CRC: the length alone must be what stops the read.
	binary.BigEndian.PutUint32(prelude[8:], crc32.ChecksumIEEE(prelude[:8]))
	src := &countingReader{r: io.MultiReader(bytes.NewReader(prelude[:]), zeros{})}
	_, err := readStream(t, src)
	if err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("a 64 MiB frame ended with %v, want a failure", err)
	}
	if src.n > 1<<20 {
		t.Errorf("read %d bytes of a frame over the limit", src.n)
	}
}

func TestStreamUnreadablePayloadFails(t *testing.T) {
	var hs eventstream.Headers
	hs.Set(":event-type", eventstream.StringValue("chunk"))
	hs.Set(":message-type", eventstream.StringValue("event"))
	for name, payload := range map[string]string{
		"not base64":                        `{"bytes":"%%%not-base64%%%"}`,
		"base64 broken after a whole event": `{"bytes":"` + base64.StdEncoding.EncodeToString([]byte(`{"type":"ping"}`)) + `*!"}`,
		"no bytes":                          `{"p":"abc"}`,
		"not JSON":                          `{"bytes":"` + base64.StdEncoding.EncodeToString([]byte(`{"type":"ping"`)) + `"}`,
		"no event type":                     `{"bytes":"` + base64.StdEncoding.EncodeToString([]byte(`{"index":0}`)) + `"}`,
		"payload":                           `garbage`,
	} {
		out, err := readStream(t, bytes.NewReader(encode(t, hs, []byte(payload))))
		if err == nil || errors.Is(err, io.EOF) || out != "" {
			t.Errorf("%s: got %q, %v; want nothing and a failure", name, out, err)
		}
	}
}

func TestStreamExceptionBecomesErrorEvent(t *testing.T) {
	for _, tc := range []struct{ exception, typ string }{
		{"throttlingException", "rate_limit_error"},
		{"serviceUnavailableException", "overloaded_error"},
		{"validationException", "invalid_request_error"},
		{"internalServerException", "api_error"},
		{"modelStreamErrorException", "api_error"},
		{"modelTimeoutException", "api_error"},
	} {
		t.Run(tc.exception, func(t *testing.T) {
			stream := append(chunkFrame(t, events[0]),
				exceptionFrame(t, tc.exception, `{"message":"Too many tokens for arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-x, please wait."}`)...)
			// Anything after the exception is not part of the answer.
			stream = append(stream, chunkFrame(t, events[1])...)
			out, err := readStream(t, bytes.NewReader(stream))
			if err != nil {
				t.Fatalf("stream ended with %v, want its end after the error event", err)
			}
			want := wantSSE(events[:1]) + "event: error\ndata: " +
				`{"type":"error","error":{"type":"` + tc.typ + `","message":"Too many tokens for [redacted], please wait."}}` + "\n\n"
			if out != want {
				t.Errorf("\n got: %q\nwant: %q", out, want)
			}
		})
	}
}

func TestErrorAnswersBecomeAnthropicErrors(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     int
		errorType  string // x-amzn-ErrorType, if sent
		body       string
		wantStatus int
		wantType   string
		wantMsg    string
	}{
		{"throttling", 429, "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/", `{"message":"Too many requests, please wait before trying again."}`,
			429, "rate_limit_error", "Too many requests, please wait before trying again."},
		{"model not ready", 429, "ModelNotReadyException", `{"message":"Model is not ready."}`, 503, "overloaded_error", "Model is not ready."},
		{"type in body only", 429, "", `{"__type":"com.amazon.bedrock#ModelNotReadyException","message":"Model is not ready."}`, 503, "overloaded_error", "Model is not ready."},
		{"unavailable", 503, "ServiceUnavailableException", `{"message":"Service unavailable."}`, 503, "overloaded_error", "Service unavailable."},
		{"internal", 500, "InternalServerException", `{"Message":"Internal failure."}`, 500, "api_error", "Internal failure."},
		{"validation", 400, "ValidationException", `{"message":"Invocation of model ID arn:aws:bedrock:eu-west-1:123456789012:inference-profile/eu.anthropic.claude-y with on-demand throughput isn't supported."}`,
			400, "invalid_request_error", "Invocation of model ID [redacted] with on-demand throughput isn't supported."},
		{"access denied", 403, "AccessDeniedException", `{"message":"You don't have access to the model."}`, 403, "permission_error", "You don't have access to the model."},
		{"not found", 404, "ResourceNotFoundException", `{"message":"Model not found for account 123456789012."}`, 404, "not_found_error", "Model not found for account [redacted]."},
		{"model timeout", 408, "ModelTimeoutException", `{"message":"Model timed out."}`, 408, "timeout_error", "Model timed out."},
		{"model error", 424, "ModelErrorException", `{"message":"Model failed.","originalStatusCode":500}`, 502, "api_error", "Model failed."},
		{"model stream error", 424, "ModelStreamErrorException", `{"message":"Stream failed."}`, 502, "api_error", "Stream failed."},
		{"bad signature", 403, "InvalidSignatureException:http://internal.amazon.com/coral/com.amazon.coral.service/",
			`{"message":"The request signature we calculated does not match. The Canonical String for this request should have been 'POST /model/x/invoke host:... AKIAEXAMPLE/20260101/us-east-1/bedrock/aws4_request'"}`,
			403, "permission_error", credentialRefused},
		{"not Bedrock's", 502, "", `<html>Bad Gateway</html>`, 502, "api_error", "the gateway could not complete the request"},
		{"Anthropic's own envelope", 402, "", `{"type":"error","error":{"type":"billing_error","message":"Your credit balance is too low."},"request_id":"req_bdrk_01"}`, 402, "billing_error", "Your credit balance is too low."},
		{"unknown exception", 409, "ConflictException", `{"message":"Conflict."}`, 409, "invalid_request_error", "Conflict."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			h.Set("Content-Type", "application/json")
			h.Set("X-Amzn-Requestid", "d3b07384-d9a0-4c9b-8d7a-1234567890ab")
			if tc.errorType != "" {
				h.Set("X-Amzn-Errortype", tc.errorType)
			}
			resp := &http.Response{StatusCode: tc.status, Header: h, Body: io.NopCloser(strings.NewReader(tc.body)), ContentLength: int64(len(tc.body))}
			Respond(messages, resp)
			got, _ := io.ReadAll(resp.Body)
			want := `{"type":"error","error":{"type":"` + tc.wantType + `","message":` + string(protocols.AppendJSONString(nil, tc.wantMsg)) + `}}`
			if resp.StatusCode != tc.wantStatus || string(got) != want {
				t.Errorf("got %d %s\nwant %d %s", resp.StatusCode, got, tc.wantStatus, want)
			}
			if resp.ContentLength != int64(len(got)) || resp.Header.Get("Content-Length") != strconv.Itoa(len(got)) {
				t.Errorf("length %d / %q, body is %d bytes", resp.ContentLength, resp.Header.Get("Content-Length"), len(got))
			}
			if resp.Header.Get("X-Amzn-Errortype") != "" {
				t.Error("x-amzn-ErrorType (with its internal namespace) is still there")
			}
		})
	}
}

func TestThrottlingKeepsRetryAfter(t *testing.T) {
	h := http.Header{}
	h.Set("X-Amzn-Errortype", "ThrottlingException")
	h.Set("Retry-After", "7")
	resp := &http.Response{StatusCode: 400, Header: h, Body: io.NopCloser(strings.NewReader(`{"message":"Too many tokens."}`))}
	Respond(messages, resp)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "7" {
		t.Errorf("got %d with Retry-After %q, want 429 with 7", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

func TestErrorBodyReadIsBounded(t *testing.T) {
	src := &countingReader{r: io.MultiReader(strings.NewReader(`{"message":"`), zeros{})}
	h := http.Header{}
	h.Set("X-Amzn-Errortype", "InternalServerException")
	resp := &http.Response{StatusCode: 500, Header: h, Body: io.NopCloser(src)}
	Respond(messages, resp)
	if src.n > maxErrorBody {
		t.Errorf("read %d bytes of an endless error body", src.n)
	}
	if resp.StatusCode != 500 {
		t.Errorf("status %d, want 500", resp.StatusCode)
	}
}

func TestJSONAnswerLeftAlone(t *testing.T) {
	body := io.NopCloser(strings.NewReader(`{"id":"msg_01","type":"message"}`))
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	resp := &http.Response{StatusCode: 200, Header: h, Body: body}
	Respond(messages, resp)
	if resp.Body != body || resp.Header.Get("Content-Type") != "application/json" {
		t.Error("a 200 JSON answer was changed")
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestStreamEventWithLineBreaksStaysOneDataLine(t *testing.T) {
	out, err := readStream(t, bytes.NewReader(chunkFrame(t, "{\n  \"type\": \"content_block_stop\",\n  \"index\": 0\n}")))
	if err != nil {
		t.Fatal(err)
	}
	if want := "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"; out != want {
		t.Errorf("got %q, want %q", out, want)
	}
}

func countAnswer(status int, errorType, body string) *http.Response {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if errorType != "" {
		h.Set("X-Amzn-Errortype", errorType)
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}
}

func TestCountTokensAnswerBecomesAnthropics(t *testing.T) {
	resp := countAnswer(200, "", `{"inputTokens": 1234}`)
	Respond(countTokens, resp)
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(got) != `{"input_tokens":1234}` {
		t.Errorf("got %d %s, want 200 {\"input_tokens\":1234}", resp.StatusCode, got)
	}
	if resp.ContentLength != int64(len(got)) || resp.Header.Get("Content-Length") != strconv.Itoa(len(got)) {
		t.Errorf("length %d / %q, body is %d bytes", resp.ContentLength, resp.Header.Get("Content-Length"), len(got))
	}

	// An answer without a count is not passed on as one.
	for _, body := range []string{`{}`, `{"inputTokens":"12"}`, `{"inputTokens":1.5}`, `{"inputTokens":-3}`, `<html>`} {
		resp := countAnswer(200, "", body)
		Respond(countTokens, resp)
		got, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 502 || gjson.GetBytes(got, "error.type").String() != "api_error" || strings.Contains(string(got), "input_tokens") {
			t.Errorf("%s: got %d %s, want a 502 api_error", body, resp.StatusCode, got)
		}
	}

	// Errors are those of invoke.
	resp = countAnswer(429, "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/", `{"message":"Too many requests for arn:aws:bedrock:us-east-1:123456789012:foundation-model/x, please wait."}`)
	Respond(countTokens, resp)
	got, _ = io.ReadAll(resp.Body)
	want := `{"type":"error","error":{"type":"rate_limit_error","message":"Too many requests for [redacted], please wait."}}`
	if resp.StatusCode != 429 || string(got) != want {
		t.Errorf("got %d %s\nwant 429 %s", resp.StatusCode, got, want)
	}
}

var countTokens = protocols.Operation{Family: protocols.FamilyB, Kind: protocols.KindMessagesCountTokens}
