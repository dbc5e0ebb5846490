package simulator

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/channel/bedrock"
	"github.com/switchyard-gw/switchyard/protocols"
)

var bedrockEvents = [][]byte{
	[]byte(`{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":21,"output_tokens":1}}}`),
	[]byte(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
	[]byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`),
	[]byte(`{"type":"content_block_stop","index":0}`),
	[]byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":9}}`),
	[]byte(`{"type":"message_stop"}`),
}

func TestBedrockStreamFramesAreBedrocks(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteBedrockStream(rec, bedrockEvents)
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/vnd.amazon.eventstream" {
		t.Fatalf("answer %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	dec := eventstream.NewDecoder()
	body := bytes.NewReader(rec.Body.Bytes())
	for i, want := range bedrockEvents {
		msg, err := dec.Decode(body, nil)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		for name, value := range map[string]string{":message-type": "event", ":event-type": "chunk", ":content-type": "application/json"} {
			if got := msg.Headers.Get(name); got == nil || got.String() != value {
				t.Errorf("frame %d: header %s = %v, want %s", i, name, got, value)
			}
		}
		got, err := base64.StdEncoding.DecodeString(gjson.GetBytes(msg.Payload, "bytes").Str)
		if err != nil {
			t.Fatalf("frame %d: bytes: %v", i, err)
		}
		if !gjson.GetBytes(msg.Payload, "p").Exists() {
			t.Errorf("frame %d has no padding", i)
		}
		if i < len(bedrockEvents)-1 {
			if !bytes.Equal(got, want) {
				t.Errorf("frame %d holds %s, want %s", i, got, want)
			}
			continue
		}
		metrics := gjson.GetBytes(got, "amazon-bedrock-invocationMetrics")
		if metrics.Get("inputTokenCount").Int() != 21 || metrics.Get("outputTokenCount").Int() != 9 {
			t.Errorf("message_stop %s: want Bedrock's metrics with 21 in and 9 out", got)
		}
	}
	if body.Len() != 0 {
		t.Errorf("%d bytes after the last frame", body.Len())
	}
}

// Through the channel's decoder, the stream is what Anthropic's API sends.
func TestBedrockStreamRoundTripsToAnthropicSSE(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteBedrockStream(rec, bedrockEvents)
	resp := &http.Response{StatusCode: rec.Code, Header: rec.Header(), Body: io.NopCloser(rec.Body)}
	bedrock.Respond(protocols.Operation{Family: protocols.FamilyB, Kind: protocols.KindMessages}, resp)
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, ev := range bedrockEvents {
		want.WriteString("event: " + gjson.GetBytes(ev, "type").Str + "\ndata: " + string(ev) + "\n\n")
	}
	if string(got) != want.String() {
		t.Errorf("\n got: %q\nwant: %q", got, want.String())
	}
}

// flushRecorder notes how much of the body had been written at each flush.
type flushRecorder struct {
	*httptest.ResponseRecorder
	at []int
}

func (f *flushRecorder) Flush() { f.at = append(f.at, f.Body.Len()) }

// Each frame goes out as it is written, as Bedrock's do, so a reader sees events arrive.
func TestBedrockStreamFlushesEachFrame(t *testing.T) {
	rec := &flushRecorder{ResponseRecorder: httptest.NewRecorder()}
	WriteBedrockStream(rec, bedrockEvents)
	var ends []int
	body := bytes.NewReader(rec.Body.Bytes())
	for range bedrockEvents {
		if _, err := eventstream.NewDecoder().Decode(body, nil); err != nil {
			t.Fatal(err)
		}
		ends = append(ends, rec.Body.Len()-body.Len())
	}
	if !slices.Equal(rec.at, ends) {
		t.Errorf("flushed at %v, want at each frame's end %v", rec.at, ends)
	}
}
