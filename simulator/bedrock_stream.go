package simulator

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// bedrockPadding is the alphabet of the "p" member Bedrock pads each chunk with, so
// that frame sizes do not tell how long the text is.
const bedrockPadding = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123"

// WriteBedrockStream answers as Bedrock's InvokeModelWithResponseStream does: 200,
// application/vnd.amazon.eventstream, and one `chunk` frame per Anthropic event JSON
// (base64 in "bytes", padding in "p"), made with AWS's own encoder and flushed one by
// one. Like Bedrock, it adds amazon-bedrock-invocationMetrics to message_stop.
func WriteBedrockStream(w http.ResponseWriter, events [][]byte) {
	h := w.Header()
	h.Set("Content-Type", "application/vnd.amazon.eventstream")
	h.Set("X-Amzn-Bedrock-Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := eventstream.NewEncoder()
	var input, output int64
	var frame bytes.Buffer
	for i, ev := range events {
		switch gjson.GetBytes(ev, "type").Str {
		case "message_start":
			input = gjson.GetBytes(ev, "message.usage.input_tokens").Int()
		case "message_delta":
			output = gjson.GetBytes(ev, "usage.output_tokens").Int()
		}
		frame.Reset()
		if err := enc.Encode(&frame, bedrockChunk(ev, 1+i%len(bedrockPadding), input, output)); err != nil {
			return
		}
		if _, err := w.Write(frame.Bytes()); err != nil {
			return
		}
		_ = rc.Flush()
	}
}

// bedrockChunk is one Anthropic event as Bedrock frames it: its JSON in base64 under
// "bytes", padLen bytes of padding under "p", and on message_stop the invocation metrics
// Bedrock adds, with the stream's input and output counts.
func bedrockChunk(ev []byte, padLen int, input, output int64) eventstream.Message {
	if gjson.GetBytes(ev, "type").Str == "message_stop" {
		ev = withInvocationMetrics(ev, input, output)
	}
	payload := []byte(`{"bytes":`)
	payload = strconv.AppendQuote(payload, base64.StdEncoding.EncodeToString(ev))
	payload = append(payload, `,"p":"`...)
	payload = append(payload, bedrockPadding[:min(padLen, len(bedrockPadding))]...)
	payload = append(payload, `"}`...)
	return eventstream.Message{Headers: chunkHeaders(), Payload: payload}
}

func chunkHeaders() eventstream.Headers {
	var hs eventstream.Headers
	hs.Set(":event-type", eventstream.StringValue("chunk"))
	hs.Set(":content-type", eventstream.StringValue("application/json"))
	hs.Set(":message-type", eventstream.StringValue("event"))
	return hs
}

func withInvocationMetrics(ev []byte, input, output int64) []byte {
	metrics := []byte(`{"inputTokenCount":`)
	metrics = strconv.AppendInt(metrics, input, 10)
	metrics = append(metrics, `,"outputTokenCount":`...)
	metrics = strconv.AppendInt(metrics, output, 10)
	metrics = append(metrics, `,"invocationLatency":212,"firstByteLatency":87}`...)
	if out, err := sjson.SetRawBytes(bytes.Clone(ev), "amazon-bedrock-invocationMetrics", metrics); err == nil {
		return out
	}
	return ev
}
