package bedrock

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/switchyard-gw/switchyard/protocols"
)

const (
	// maxFrame bounds one event-stream frame. Bedrock's chunk holds at most 1,000,000
	// bytes of event before base64, so a frame near this size is not Bedrock's.
	maxFrame = 16 << 20
	// maxErrorBody bounds what is read of an error answer.
	maxErrorBody = 1 << 20
	// keepBuffer is the largest buffer kept between frames: one large event should not
	// pin its memory for the rest of a long stream.
	keepBuffer = 1 << 20

	preludeLen  = 12 // total length, headers length, prelude CRC
	frameFixed  = 16 // prelude and message CRC
	metricsKey  = "amazon-bedrock-invocationMetrics"
	eventStream = "application/vnd.amazon.eventstream"
)

// Respond turns a Bedrock InvokeModel / InvokeModelWithResponseStream / CountTokens
// answer into Anthropic's own form, in place.
func Respond(op protocols.Operation, resp *http.Response) {
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300 && op.Kind == protocols.KindMessagesCountTokens:
		respondCount(resp)
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); strings.EqualFold(mt, eventStream) {
			respondStream(resp)
		}
		// A 200 JSON answer is already the Message the family's API sends.
	case resp.StatusCode >= 400:
		respondError(op, resp)
	}
}

// --- the event stream ---

// Errors of a stream that cannot be turned into events. None of them is io.EOF, so the
// relay ends the client's stream with its own error event rather than as complete.
var (
	errTruncated  = errors.New("bedrock event stream: ended inside a frame")
	errChecksum   = errors.New("bedrock event stream: frame checksum mismatch")
	errFrameSize  = errors.New("bedrock event stream: frame length out of bounds")
	errUnreadable = errors.New("bedrock event stream: unreadable frame")
)

func respondStream(resp *http.Response) {
	resp.Body = &sseReader{
		src: resp.Body,
		br:  bufio.NewReaderSize(resp.Body, 32<<10),
		dec: eventstream.NewDecoder(),
	}
	resp.Header.Set("Content-Type", "text/event-stream")
	resp.Header.Del("Content-Length")
	resp.Header.Del("X-Amzn-Bedrock-Content-Type")
	resp.ContentLength = -1
}

// sseReader decodes event-stream frames as they arrive and yields the SSE bytes of
// each. It holds one frame's payload and one event at a time.
type sseReader struct {
	src io.Closer
	br  *bufio.Reader
	dec *eventstream.Decoder

	payload []byte // the frame's payload, reused
	event   []byte // the decoded event, reused
	out     []byte // SSE bytes not yet read from out[off:]
	off     int
	err     error // what Read returns once out is drained: io.EOF or the stream's fault
}

func (r *sseReader) Read(p []byte) (int, error) {
	for r.off == len(r.out) {
		if r.err != nil {
			return 0, r.err
		}
		r.out, r.off = r.out[:0], 0
		r.err = r.next()
	}
	n := copy(p, r.out[r.off:])
	r.off += n
	return n, nil
}

func (r *sseReader) Close() error { return r.src.Close() }

// next decodes one frame into r.out. It returns io.EOF after the last frame, or after an
// exception (Bedrock sends nothing more).
func (r *sseReader) next() error {
	prelude, err := r.br.Peek(preludeLen)
	if err != nil {
		if errors.Is(err, io.EOF) {
			if len(prelude) == 0 {
				return io.EOF // between frames: the stream is over
			}
			return errTruncated
		}
		return fmt.Errorf("bedrock event stream: %w", err)
	}
	// The lengths are checked before the decoder trusts them: it would otherwise read
	// a payload of whatever size the prelude claims.
	total := binary.BigEndian.Uint32(prelude[0:4])
	headers := binary.BigEndian.Uint32(prelude[4:8])
	if total < frameFixed || total > maxFrame || headers > total-frameFixed {
		return errFrameSize
	}
	msg, err := r.dec.Decode(io.LimitReader(r.br, int64(total)), r.payload[:0])
	if err != nil {
		var sum eventstream.ChecksumError
		switch {
		case errors.As(err, &sum):
			return errChecksum
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return errTruncated
		}
		return fmt.Errorf("bedrock event stream: %w", err)
	}
	if cap(msg.Payload) <= keepBuffer {
		r.payload = msg.Payload
	} else {
		r.payload = nil
	}

	switch header(msg.Headers, ":message-type") {
	case "event":
		if header(msg.Headers, ":event-type") != "chunk" {
			return nil // not a part of the answer; nothing to show
		}
		return r.chunk(msg.Payload)
	case "exception":
		r.out = appendErrorEvent(r.out, streamErrorType(header(msg.Headers, ":exception-type")), payloadMessage(msg.Payload))
		return io.EOF
	case "error":
		r.out = appendErrorEvent(r.out, streamErrorType(header(msg.Headers, ":error-code")), header(msg.Headers, ":error-message"))
		return io.EOF
	}
	return errUnreadable
}

// chunk writes the event a chunk's payload carries as `event: <type>` and `data: <json>`.
func (r *sseReader) chunk(payload []byte) error {
	b64 := gjson.GetBytes(payload, "bytes")
	if b64.Type != gjson.String {
		return errUnreadable
	}
	event, err := base64.StdEncoding.AppendDecode(r.event[:0], []byte(b64.Str))
	if err != nil || !gjson.ValidBytes(event) {
		return errUnreadable
	}
	typ := gjson.GetBytes(event, "type")
	if typ.Type != gjson.String || typ.Str == "" || strings.ContainsAny(typ.Str, "\r\n") {
		return errUnreadable
	}
	// Bedrock's own metrics make the event differ from the one Anthropic's API sends.
	if bytes.Contains(event, []byte(metricsKey)) && gjson.GetBytes(event, metricsKey).Exists() {
		if event, err = sjson.DeleteBytes(event, metricsKey); err != nil {
			return errUnreadable
		}
	}
	// A line break inside data would end the SSE field early.
	if bytes.ContainsAny(event, "\r\n") {
		var compact bytes.Buffer
		if json.Compact(&compact, event) != nil {
			return errUnreadable
		}
		event = compact.Bytes()
	}
	if cap(event) <= keepBuffer {
		r.event = event
	} else {
		r.event = nil
	}
	r.out = append(r.out, "event: "...)
	r.out = append(r.out, typ.Str...)
	r.out = append(r.out, "\ndata: "...)
	r.out = append(r.out, event...)
	r.out = append(r.out, "\n\n"...)
	return nil
}

func header(hs eventstream.Headers, name string) string {
	if v, ok := hs.Get(name).(eventstream.StringValue); ok {
		return string(v)
	}
	return ""
}

// streamErrorType names the Anthropic error type of an in-stream exception.
func streamErrorType(exception string) string {
	switch strings.ToLower(exception) {
	case "throttlingexception":
		return "rate_limit_error"
	case "serviceunavailableexception":
		return "overloaded_error"
	case "validationexception":
		return "invalid_request_error"
	}
	return "api_error"
}

func appendErrorEvent(dst []byte, typ, message string) []byte {
	if message == "" {
		message = "the upstream stream ended with an error"
	}
	dst = append(dst, `event: error`+"\n"+`data: {"type":"error","error":{"type":`...)
	dst = protocols.AppendJSONString(dst, typ)
	dst = append(dst, `,"message":`...)
	dst = protocols.AppendJSONString(dst, scrubMessage(message))
	return append(dst, "}}\n\n"...)
}

// payloadMessage is the message of an exception's JSON payload.
func payloadMessage(payload []byte) string {
	for _, key := range []string{"message", "Message"} {
		if m := gjson.GetBytes(payload, key); m.Type == gjson.String {
			return m.Str
		}
	}
	return ""
}

// --- count_tokens ---

// maxCountBody bounds what is read of a CountTokens answer, which is a few bytes.
const maxCountBody = 64 << 10

// respondCount turns CountTokens' {"inputTokens":N} into count_tokens' {"input_tokens":N}.
// An answer without a count is the upstream's failure, a 502, so the request moves on.
func respondCount(resp *http.Response) {
	orig := resp.Body
	raw, err := io.ReadAll(io.LimitReader(orig, maxCountBody))
	n := gjson.GetBytes(raw, "inputTokens")
	var body []byte
	if err == nil && n.Type == gjson.Number && n.Raw == strconv.FormatInt(n.Int(), 10) && n.Int() >= 0 {
		body = strconv.AppendInt([]byte(`{"input_tokens":`), n.Int(), 10)
		body = append(body, '}')
	} else {
		e := protocols.ErrGeneric(protocols.FamilyB, http.StatusBadGateway)
		body = e.Body("")
		resp.StatusCode = e.Status
		resp.Status = strconv.Itoa(e.Status) + " " + http.StatusText(e.Status)
	}
	resp.Body = replacedBody{bytes.NewReader(body), orig}
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Type", "application/json")
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
}

// --- error answers ---

type errorKind struct {
	status int
	typ    string
	// fixed replaces Bedrock's message: a signature error echoes the canonical request
	// and the key's scope, which the client has no business seeing.
	fixed string
}

const credentialRefused = "the upstream refused the gateway's credentials for this candidate"

// errorKinds maps Bedrock's exception names (lower case) to the status and type an
// Anthropic client is given. 403, 404, 408, 429 and 5xx move on to the next candidate;
// a 400 goes back to the client, whose request it is about.
var errorKinds = map[string]errorKind{
	"throttlingexception":                 {http.StatusTooManyRequests, "rate_limit_error", ""},
	"modelnotreadyexception":              {http.StatusServiceUnavailable, "overloaded_error", ""},
	"serviceunavailableexception":         {http.StatusServiceUnavailable, "overloaded_error", ""},
	"internalserverexception":             {http.StatusInternalServerError, "api_error", ""},
	"validationexception":                 {http.StatusBadRequest, "invalid_request_error", ""},
	"accessdeniedexception":               {http.StatusForbidden, "permission_error", ""},
	"resourcenotfoundexception":           {http.StatusNotFound, "not_found_error", ""},
	"modeltimeoutexception":               {http.StatusRequestTimeout, "timeout_error", ""},
	"modelerrorexception":                 {http.StatusBadGateway, "api_error", ""},
	"modelstreamerrorexception":           {http.StatusBadGateway, "api_error", ""},
	"invalidsignatureexception":           {http.StatusForbidden, "permission_error", credentialRefused},
	"incompletesignatureexception":        {http.StatusForbidden, "permission_error", credentialRefused},
	"unrecognizedclientexception":         {http.StatusForbidden, "permission_error", credentialRefused},
	"expiredtokenexception":               {http.StatusForbidden, "permission_error", credentialRefused},
	"missingauthenticationtokenexception": {http.StatusForbidden, "permission_error", credentialRefused},
}

func respondError(op protocols.Operation, resp *http.Response) {
	orig := resp.Body
	raw, _ := io.ReadAll(io.LimitReader(orig, maxErrorBody)) // a broken body still has its status
	name, message := errorName(resp.Header, raw), payloadMessage(raw)

	family := op.Family
	if family == 0 {
		family = protocols.FamilyB
	}
	e := &protocols.APIError{Family: family, Status: resp.StatusCode, Message: message}
	if kind, ok := errorKinds[strings.ToLower(name)]; ok {
		e.Status = kind.status
		if family == protocols.FamilyB {
			e.Type = kind.typ
		}
		if kind.fixed != "" {
			e.Message = kind.fixed
		}
	} else if native := gjson.GetBytes(raw, "error"); gjson.GetBytes(raw, "type").Str == "error" && native.IsObject() {
		// Bedrock's native Messages endpoints answer in Anthropic's envelope already.
		e.Message = native.Get("message").Str
		if t := native.Get("type"); family == protocols.FamilyB && t.Type == gjson.String {
			e.Type = t.Str
		}
	}
	if e.Message == "" {
		e.Message = protocols.ErrGeneric(family, e.Status).Message
	}
	e.Message = scrubMessage(e.Message)
	body := e.Body("")

	resp.StatusCode = e.Status
	resp.Status = strconv.Itoa(e.Status) + " " + http.StatusText(e.Status)
	resp.Body = replacedBody{bytes.NewReader(body), orig}
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Type", "application/json")
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	resp.Header.Del("X-Amzn-Errortype")
}

// errorName is the exception's name: from x-amzn-ErrorType ("Name:namespace"), else the
// body's __type ("namespace#Name") or code.
func errorName(h http.Header, body []byte) string {
	if v := h.Get("X-Amzn-Errortype"); v != "" {
		name, _, _ := strings.Cut(v, ":")
		return strings.TrimSpace(name)
	}
	for _, key := range []string{"__type", "code", "Code"} {
		if v := gjson.GetBytes(body, key); v.Type == gjson.String && v.Str != "" {
			name := v.Str
			if i := strings.LastIndexByte(name, '#'); i >= 0 {
				name = name[i+1:]
			}
			name, _, _ = strings.Cut(name, ":")
			return name
		}
	}
	return ""
}

// replacedBody is the new body of an answer; closing it closes the upstream's.
type replacedBody struct {
	*bytes.Reader
	orig io.Closer
}

func (b replacedBody) Close() error { return b.orig.Close() }

// arns and accountNumbers match what in a Bedrock message names the AWS account: model
// and inference-profile ARNs, and 12-digit account ids.
var (
	arns           = regexp.MustCompile(`arn:aws[a-z-]*:[^\s"',;)\]]*`)
	accountNumbers = regexp.MustCompile(`\b\d{12}\b`)
)

func scrubMessage(m string) string {
	m = arns.ReplaceAllString(m, "[redacted]")
	return accountNumbers.ReplaceAllString(m, "[redacted]")
}
