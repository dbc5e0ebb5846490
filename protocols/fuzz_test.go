package protocols

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// seedFiles adds every file of testdata matching pattern to the corpus.
func seedFiles(f *testing.F, pattern string) {
	files, _ := filepath.Glob(filepath.Join("testdata", pattern))
	for _, name := range files {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b, uint16(len(b)/2))
		}
	}
}

// FuzzEventStream holds the SSE splitter and rewrite to what a client relies on: however
// the upstream's bytes are cut into reads, the client gets the same bytes; no event kept
// is lost and none is invented (an unreadable event is kept from the client); the
// candidate's secrets never come through; nothing grows past the event limit.
func FuzzEventStream(f *testing.F) {
	seedFiles(f, "*.sse")
	f.Add([]byte("data: {\"model\":\"up-x\",\"choices\":[]}\n\ndata: [DONE]\n\n"), uint16(10))
	f.Add([]byte("event: message_start\r\ndata: {\"message\":{\"model\":\"up-x\"}}\r\n\r\n"), uint16(3))
	f.Add([]byte(": c\n\ndata: {\"error\":{\"message\":\"up-x at secret.host\"}}\n\n"), uint16(0))
	scrub := Scrubber{UpstreamModel: "up-x", ServiceModel: "svc", Secrets: []string{"secret.host", "cred-123"}}
	kinds := []Kind{KindChat, KindResponses, KindMessages}
	f.Fuzz(func(t *testing.T, stream []byte, cut uint16) {
		for _, kind := range kinds {
			run := func(parts ...[]byte) ([]byte, int) {
				s := NewEventStream(kind, "svc", false, scrub)
				var out []byte
				events := 0
				for _, p := range parts {
					s.Push(p)
					for ev, ok := s.Next(); ok; ev, ok = s.Next() {
						var kept bool
						if out, kept = s.AppendRewritten(out, ev); kept {
							events++
						}
					}
				}
				if ev, ok := s.Unterminated(); ok {
					out, _ = s.AppendRewritten(out, ev)
				}
				return out, events
			}
			at := int(cut) % (len(stream) + 1)
			whole, n := run(stream)
			split, m := run(stream[:at], stream[at:])
			if !bytes.Equal(whole, split) || n != m {
				t.Fatalf("the output depends on how reads were cut:\n%q\n%q", whole, split)
			}
			for _, secret := range scrub.Secrets {
				if bytes.Contains(whole, []byte(secret)) {
					t.Fatalf("secret %q reached the client: %q", secret, whole)
				}
			}
			if got := len(splitEvents(whole)); got < n {
				t.Fatalf("%d events in, %d events out", n, got)
			}
		}
	})
}

// splitEvents cuts rewritten output the way a client's SSE reader does.
func splitEvents(b []byte) [][]byte {
	var out [][]byte
	s := NewEventStream(KindChat, "svc", false, Scrubber{})
	s.Push(b)
	for ev, ok := s.Next(); ok; ev, ok = s.Next() {
		out = append(out, ev.Raw)
	}
	return out
}

// FuzzJSONSplice holds the model splice of a JSON answer: the result parses, carries the
// service model, and every other field is what the upstream sent.
func FuzzJSONSplice(f *testing.F) {
	f.Add([]byte(`{"id":"x","model":"up-x","usage":{"prompt_tokens":1}}`))
	f.Add([]byte(`{"model":"a\"b","model2":1}`))
	f.Add([]byte(`{"nested":{"model":"n"},"model":"up"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if !ValidJSONObject(body) {
			return
		}
		var before map[string]json.RawMessage
		if json.Unmarshal(body, &before) != nil || duplicateKeyIn(body) {
			return
		}
		start, end, ok := ValueSpan(body, "model")
		if !ok {
			return
		}
		out := append(append(append([]byte(nil), body[:start]...), AppendJSONString(nil, "svc/\"id\"")...), body[end:]...)
		var after map[string]json.RawMessage
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("spliced answer does not parse: %v\n%q", err, out)
		}
		var model string
		if err := json.Unmarshal(after["model"], &model); err != nil || model != `svc/"id"` {
			t.Fatalf("model read back as %s", after["model"])
		}
		delete(before, "model")
		delete(after, "model")
		if len(before) != len(after) {
			t.Fatalf("fields changed: %v vs %v", before, after)
		}
		for k, v := range before {
			if !bytes.Equal(v, after[k]) {
				t.Fatalf("field %q changed", k)
			}
		}
	})
}

func duplicateKeyIn(body []byte) bool {
	var keys keySet
	dup := false
	f := scanObject(body, func(key string, _, _ int) { dup = keys.add(key) || dup })
	return f != nil || dup
}

// FuzzScrubber: whatever an upstream writes, no secret comes out of Scrub or ScrubSecrets,
// and the input is never modified.
func FuzzScrubber(f *testing.F) {
	f.Add([]byte(`{"error":{"message":"up-model at api.host.example:443 key sk-upstream-1 org-AbCd1234"}}`))
	f.Add([]byte("api.host.exampleapi.host.example"))
	s := Scrubber{UpstreamModel: "up-model", ServiceModel: "svc", Secrets: []string{"api.host.example:443", "api.host.example", "sk-upstream-1", "6b1f9c7e-2d4a"}}
	f.Fuzz(func(t *testing.T, b []byte) {
		orig := append([]byte(nil), b...)
		for _, out := range [][]byte{s.Scrub(b), s.ScrubSecrets(b)} {
			for _, secret := range s.Secrets {
				if bytes.Contains(out, []byte(secret)) {
					t.Fatalf("secret %q survived in %q", secret, out)
				}
			}
		}
		if bytes.Contains(s.Scrub(b), []byte("up-model")) {
			t.Fatalf("upstream model survived in an error")
		}
		if !bytes.Equal(orig, b) {
			t.Fatalf("the scrubber modified its input")
		}
		if newSecretFinder(s.Secrets).in(b) == bytes.Equal(s.ScrubSecrets(b), b) {
			t.Fatalf("the stream's secret finder disagrees with ScrubSecrets")
		}
	})
}

// FuzzUpstreamHeaders: whatever headers a client sends, only forwarded-list headers and
// the ones the gateway sets reach the upstream, none the client's Connection header
// names, none holding the key the client sent, and the candidate's credential is the
// only one sent.
func FuzzUpstreamHeaders(f *testing.F) {
	f.Add("Connection: close, X-Secret\nX-Secret: 1\nX-Api-Key: sk-sy-client-0123456789\nAuthorization: Bearer sk-sy-client-0123456789\nAnthropic-Beta: b")
	f.Add("connection: x-a, anthropic-beta\nX-A: b\nTrue-Client-IP: 1.2.3.4\nCF-Connecting-IP: 1.2.3.4\nanthropic-beta: x")
	f.Add("X-Api-Key: sk-sy-client-0123456789\nUser-Agent: curl sk-sy-client-0123456789\nsession-id: 1\nReferer: http://x/\nX-Whatever: 1")
	setByGateway := map[Family][]string{FamilyA: {"Accept-Encoding", "Authorization"}, FamilyB: {"Accept-Encoding", "X-Api-Key", "Anthropic-Version"}}
	f.Fuzz(func(t *testing.T, raw string) {
		client := http.Header{}
		for line := range strings.SplitSeq(raw, "\n") {
			name, value, ok := strings.Cut(line, ":")
			if !ok || name == "" || strings.ContainsAny(name, " \t\r") {
				continue
			}
			client.Add(name, strings.TrimSpace(value))
		}
		// The secrets in the client's key headers, as switchyard_auth takes them
		// (auth.TakeKeyHeaders) and passes them in with the headers.
		var keys []string
		for _, name := range []string{"Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key", "Proxy-Authorization"} {
			for _, v := range client[name] {
				for _, word := range strings.Fields(v) {
					if len(word) >= 16 {
						keys = append(keys, word)
					}
				}
			}
		}
		hop := connectionNamed(client)
		for _, family := range []Family{FamilyA, FamilyB} {
			out := UpstreamRequestHeader(client, keys, family, "cand-cred")
			for name, values := range out {
				gatewaySet := slices.Contains(setByGateway[family], name)
				if !gatewaySet && !requestHeadersForwarded[name] {
					t.Fatalf("%s is not on the forwarded list and reached the upstream", name)
				}
				if !gatewaySet && hop[name] {
					t.Fatalf("hop-by-hop %s reached the upstream", name)
				}
				// Anthropic-Version is the client's value, but only after it was checked to be a date.
				for _, v := range values {
					for _, k := range keys {
						if name != "Anthropic-Version" && strings.Contains(v, k) {
							t.Fatalf("the client's key reached the upstream in %s", name)
						}
					}
				}
			}
			if family == FamilyA && out.Get("Authorization") != "Bearer cand-cred" || family == FamilyB && out.Get("X-Api-Key") != "cand-cred" {
				t.Fatalf("the candidate's credential is not the one sent: %v", out)
			}
		}
	})
}

// FuzzInputEstimate: on any body ParseRequest accepts, the input estimate never panics,
// its text count is the decoded text exactly (ASCII characters, and each other code
// point as one), and the body sent with a declared cap is still one object with each key
// once.
func FuzzInputEstimate(f *testing.F) {
	seedFiles(f, "*.json")
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:x"}}]}]}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"tool_result","content":[{"type":"image","source":{"data":"QUJD"}}]}]}]}`))
	f.Add([]byte(`{"model":"m","input":[{"type":"function_call_output","output":[{"type":"input_image","image_url":"\ud83d\ude00"}]}],"max_output_tokens":null}`))
	f.Add([]byte(`{"model":"\u6f22\ud800 ","messages":[] }`))
	f.Fuzz(func(t *testing.T, body []byte) {
		p, apiErr := ParseRequest(FamilyA, body)
		if apiErr != nil {
			return
		}
		if EstimateInputTokens(body) < 0 {
			t.Fatal("a negative estimate")
		}
		text := countText(body)
		var decodedBytes, decodedRunes int64
		dec := json.NewDecoder(bytes.NewReader(body))
		for {
			tok, err := dec.Token()
			if err != nil {
				break
			}
			if s, ok := tok.(string); ok {
				decodedBytes += int64(len(s))
				decodedRunes += int64(utf8.RuneCountInString(s))
			}
		}
		// encoding/json reads a lone surrogate as U+FFFD: one code point either way.
		if text.ascii+text.codePoints != decodedRunes {
			t.Fatalf("counted %d ASCII and %d other characters; encoding/json decodes %d", text.ascii, text.codePoints, decodedRunes)
		}
		if 4*text.tokens() < decodedBytes {
			t.Fatalf("estimate %d tokens for %d bytes of text: beaten more than fourfold", text.tokens(), decodedBytes)
		}
		for _, op := range []Operation{{Family: FamilyA, Kind: KindChat}, {Family: FamilyA, Kind: KindResponses}} {
			if _, err := p.Model(FamilyA); err != nil || p.Validate(op, nil) != nil {
				continue
			}
			up, _ := p.Upstream(op, "up", 4096)
			if _, err := ParseRequest(FamilyA, up.Bytes()); err != nil {
				t.Fatalf("the body sent with the declared cap is refused: %s\n%s", err.Message, up.Bytes())
			}
		}
	})
}
