package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// Hostile clients: requests a client with a valid key can send that must neither reach
// an upstream, nor open a circuit, nor harm the process. After each group, the same
// models answer normally.

// hostileGateway runs a gateway with a two-family model "h", and two models whose first
// (or only) candidates do not offer the side operations.
func hostileGateway(t *testing.T) *gateway {
	t.Helper()
	up := newUpstream(t)
	a, b := "http://"+up.hostport()+"/v1", "http://"+up.hostport()
	models := "\t\tmodel h {\n" +
		candidate("a", "family_a", a, upstreamPrefix+"-h") +
		candidate("b", "family_b", b, upstreamPrefix+"-h") + "\t\t}\n" +
		"\t\tmodel sub-fo {\n" +
		candidate("lacking-a", "family_a", a, upstreamPrefix+"-x+no-subops", "priority 1") +
		candidate("lacking-b", "family_b", b, upstreamPrefix+"-x+no-subops-405", "priority 2") +
		candidate("full-a", "family_a", a, upstreamPrefix+"-full", "priority 3") +
		candidate("full-b", "family_b", b, upstreamPrefix+"-full", "priority 4") + "\t\t}\n" +
		"\t\tmodel sub-none {\n" +
		candidate("lacking-a", "family_a", a, upstreamPrefix+"-x+no-subops") +
		candidate("lacking-b", "family_b", b, upstreamPrefix+"-x+no-subops-405") + "\t\t}\n"
	return startGatewayWith(t, up, models, "")
}

const (
	hChat      = `{"model":"h","messages":[{"role":"user","content":"hi"}]}`
	hResponses = `{"model":"h","input":"hi"}`
	hMessages  = `{"model":"h","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`
)

// assertUnharmed checks what every hostile request must leave behind: the upstream got
// nothing since upstreamBefore, no candidate counted a failure, and model h still
// answers on both families.
func (g *gateway) assertUnharmed(t *testing.T, upstreamBefore int) {
	t.Helper()
	assert.Equal(t, upstreamBefore, g.up.count(), "a hostile request reached the upstream")
	g.assertNoCircuitOpen(t, "", true)
	r := g.bounded(t, "POST", "/v1/chat/completions", hChat)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	r = g.bounded(t, "POST", "/v1/messages", hMessages, "anthropic-version", v1)
	require.Equal(t, 200, r.Status, "%s", r.Body)
}

// Paths that are not exactly an operation's path are the gateway's own 404: never
// forwarded, so no upstream 404 can count against a candidate. Each is sent five times,
// more than the failure threshold (3).
func TestHostilePathsAreNotForwarded(t *testing.T) {
	g := hostileGateway(t)
	for _, c := range []struct {
		target, body, fam string
	}{
		{"/v1/chat/completions/", hChat, "a"},
		{"/v1/messages/", hMessages, "b"},
		{"/v1/chat%2Fcompletions", hChat, "a"},
		{"/v1/chat%2fcompletions", hChat, "a"},
		{"/v1/messages%2Fcount_tokens", hMessages, "b"},
		{"/v1/messages/count_tokens/", hMessages, "b"},
		{"/v1/./messages", hMessages, ""},
		{"/v1/chat/../chat/completions", hChat, "a"},
		{"//v1/messages", hMessages, ""},
		{"/v1//chat/completions", hChat, "a"},
		{"/V1/chat/completions", hChat, "a"},
		{"/v1/chat/completions%00", hChat, "a"},
	} {
		t.Run(c.target, func(t *testing.T) {
			before := g.up.count()
			for i := 0; i < 5; i++ {
				r := g.raw(t, "POST", c.target, c.body, "anthropic-version", v1)
				e := envelope(t, r, c.fam, 404)
				if gjson.GetBytes(r.Body, "type").Str != "error" { // Family A
					assert.Equal(t, "unknown_url", e.Get("code").Str, "%s", r.Body)
				} else {
					assert.Equal(t, "not_found_error", e.Get("type").Str, "%s", r.Body)
				}
				g.assertNoLeak(t, r)
			}
			g.assertUnharmed(t, before)
		})
	}
	// Under /v1/responses/ an unknown path may also be read as one of the stateful
	// operations the gateway does not offer (501): either way it is not forwarded.
	t.Run("/v1/responses/compact/", func(t *testing.T) {
		before := g.up.count()
		for i := 0; i < 5; i++ {
			r := g.raw(t, "POST", "/v1/responses/compact/", hResponses)
			require.Contains(t, []int{404, 501}, r.Status, "%s", r.Body)
			envelope(t, r, "a", r.Status)
		}
		g.assertUnharmed(t, before)
	})
}

func TestHostileBodiesAreRefused(t *testing.T) {
	g := hostileGateway(t)
	nested := func(depth int) string {
		return strings.Repeat("[", depth) + strings.Repeat("]", depth)
	}
	cases := []struct {
		name, path, body string
		mention          string // the message must contain it (case-insensitive)
	}{
		// Nesting: deeper than 1,000 levels is refused, whatever field holds it.
		{"nesting 1001 in a chat body", "/v1/chat/completions", `{"model":"h","messages":[],"x_extra":` + nested(1001) + `}`, "nest"},
		{"nesting 5000 in messages", "/v1/messages", `{"model":"h","max_tokens":8,"messages":[{"role":"user","content":` + nested(5000) + `}]}`, "nest"},
		{"nesting 100000 objects", "/v1/responses", `{"model":"h","input":"hi","metadata":` + strings.Repeat(`{"a":`, 100000) + `1` + strings.Repeat(`}`, 100000) + `}`, "nest"},
		// Invalid UTF-8 in a string (a standard parser rejects the body or replaces it).
		{"invalid UTF-8 in a chat message", "/v1/chat/completions", "{\"model\":\"h\",\"messages\":[{\"role\":\"user\",\"content\":\"hi \xff\xfe\"}]}", ""},
		{"invalid UTF-8 in messages", "/v1/messages", "{\"model\":\"h\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\x28\"}]}", ""},
		{"invalid UTF-8 in a key", "/v1/responses", "{\"model\":\"h\",\"input\":\"hi\",\"\xed\xa0\x80\":1}", ""},
		// Duplicate keys at the top level: any key, not only model.
		{"stream_options twice", "/v1/chat/completions", `{"model":"h","stream":true,"stream_options":{"include_usage":true},"messages":[],"stream_options":{"include_usage":false}}`, "stream_options"},
		{"messages twice", "/v1/chat/completions", `{"model":"h","messages":[{"role":"user","content":"a"}],"messages":[{"role":"user","content":"b"}]}`, "messages"},
		{"max_tokens twice", "/v1/messages", `{"model":"h","max_tokens":8,"messages":[],"max_tokens":100000000}`, "max_tokens"},
		{"stream twice", "/v1/messages", `{"model":"h","max_tokens":8,"stream":false,"messages":[],"stream":true}`, "stream"},
		{"input twice", "/v1/responses", `{"model":"h","input":"a","input":"b"}`, "input"},
		{"model twice", "/v1/chat/completions", `{"model":"h","messages":[],"model":"other"}`, "model"},
		{"escaped duplicate", "/v1/chat/completions", `{"model":"h","messages":[],"max_tokens":5,"max_tok\u0065ns":6}`, "max_tokens"},
		// Duplicates inside the objects the gateway reads or rewrites.
		{"stream_options.include_usage twice", "/v1/chat/completions", `{"model":"h","stream":true,"stream_options":{"include_usage":true,"include_usage":false},"messages":[]}`, "include_usage"},
		{"thinking.budget_tokens twice", "/v1/messages", `{"model":"h","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024,"budget_tokens":9999999},"messages":[]}`, "budget_tokens"},
		{"thinking.type twice", "/v1/messages", `{"model":"h","max_tokens":2048,"thinking":{"type":"disabled","type":"enabled","budget_tokens":1024},"messages":[]}`, "type"},
		{"reasoning.effort twice", "/v1/responses", `{"model":"h","input":"hi","reasoning":{"effort":"low","effort":"high"}}`, "effort"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := g.up.count()
			r := g.bounded(t, "POST", c.path, c.body, "anthropic-version", v1)
			e := envelope(t, r, familyOf(c.path), 400)
			assert.Equal(t, "invalid_request_error", e.Get("type").Str)
			if c.mention != "" {
				assert.Contains(t, strings.ToLower(e.Get("message").Str), c.mention, "the message names the problem")
			}
			g.assertNoLeak(t, r)
			g.assertUnharmed(t, before)
		})
	}
	t.Run("nesting up to 100 levels passes", func(t *testing.T) {
		r := g.bounded(t, "POST", "/v1/chat/completions", `{"model":"h","messages":[],"x_extra":`+nested(100)+`}`)
		require.Equal(t, 200, r.Status, "%s", r.Body)
	})
}

// One request must not end the process or grow it without bound: a body of `{"a":` and
// millions of `[` (on the gateway before issue 10: a fatal stack overflow at ten million,
// about 1 GB of RSS at four million). The gateway runs in this process, so its RSS is ours.
func TestDeepNestingDoesNotCrashOrGrowTheProcess(t *testing.T) {
	g := hostileGateway(t)
	for _, size := range []int{4_000_000, 10_000_000} {
		body := `{"a":` + strings.Repeat("[", size)
		g.bounded(t, "POST", "/v1/chat/completions", hChat) // warm
		before := g.up.count()
		rssBefore, heapBefore := settledRSS(t), settledHeapKB()
		peakReset := resetPeakRSS()
		start := time.Now()
		r := g.bounded(t, "POST", "/v1/chat/completions", body)
		took := time.Since(start)
		peak := procStatusKB(t, "VmHWM")
		rssAfter, heapAfter := settledRSS(t), settledHeapKB()
		e := envelope(t, r, "a", 400)
		assert.Equal(t, "invalid_request_error", e.Get("type").Str)
		assert.Contains(t, strings.ToLower(e.Get("message").Str), "nest")
		assert.Less(t, took, 5*time.Second, "refused quickly")
		growth := (rssAfter - rssBefore) / 1024
		t.Logf("%.1f MB body of '[': %d in %v; RSS %d MB -> %d MB (growth %d MB), peak during the request %d MB (+%d MB; reset: %v), Go heap %d MB -> %d MB (race detector: %v)",
			float64(len(body))/(1<<20), r.Status, took.Round(time.Millisecond), rssBefore/1024, rssAfter/1024, growth,
			peak/1024, (peak-rssBefore)/1024, peakReset, heapBefore/1024, heapAfter/1024, raceDetector)
		assert.Less(t, growth, rssBoundMB(), "RSS back near its start")
		assert.Less(t, (heapAfter-heapBefore)/1024, int64(64), "the Go heap back near its start")
		if peakReset {
			assert.Less(t, (peak-rssBefore)/1024, rssBoundMB()+int64(len(body)>>20), "the peak stays within the bound plus the body")
		}
		g.assertUnharmed(t, before)
	}
}

// A body the gateway does not decode is refused in the family's envelope, not forwarded
// with a Content-Encoding the upstream would read differently.
func TestContentEncodingIsRefused(t *testing.T) {
	g := hostileGateway(t)
	for _, c := range []struct{ path, body, encoding string }{
		{"/v1/chat/completions", hChat, "gzip"},
		{"/v1/responses", hResponses, "br"},
		{"/v1/messages", hMessages, "gzip"},
		{"/v1/messages/count_tokens", hMessages, "deflate"},
		{"/v1/chat/completions", hChat, "gzip, identity"},
	} {
		t.Run(c.path+" "+c.encoding, func(t *testing.T) {
			before := g.up.count()
			r := g.bounded(t, "POST", c.path, c.body, "anthropic-version", v1, "Content-Encoding", c.encoding)
			envelope(t, r, familyOf(c.path), 415)
			g.assertNoLeak(t, r)
			g.assertUnharmed(t, before)
		})
	}
	t.Run("identity passes", func(t *testing.T) {
		r := g.bounded(t, "POST", "/v1/chat/completions", hChat, "Content-Encoding", "identity")
		require.Equal(t, 200, r.Status, "%s", r.Body)
	})
}

// A gateway key in the query string is refused (keys go in headers), never forwarded.
func TestKeyInTheQueryStringIsRefused(t *testing.T) {
	g := hostileGateway(t)
	for _, c := range []struct{ path, query, body string }{
		{"/v1/chat/completions", "api_key=" + testKey, hChat},
		{"/v1/chat/completions", "key=" + testKey, hChat},
		{"/v1/responses", "api_key=sk-sy-0123456789abcdef0123456789abcdef", hResponses},
		{"/v1/messages", "beta=true&key=" + testKey, hMessages},
		{"/v1/messages", "api_key=" + testKey, hMessages},
	} {
		t.Run(c.path+"?"+c.query, func(t *testing.T) {
			before := g.up.count()
			r := g.bounded(t, "POST", c.path+"?"+c.query, c.body, "anthropic-version", v1)
			e := envelope(t, r, familyOf(c.path), 400)
			assert.Contains(t, strings.ToLower(e.Get("message").Str), "header", "the message says where keys go: %s", r.Body)
			g.assertNoLeak(t, r)
			assert.NotContains(t, string(r.Body), "sk-sy-0123456789abcdef")
			g.assertUnharmed(t, before)
		})
	}
	t.Run("an ordinary query string still passes", func(t *testing.T) {
		r := g.bounded(t, "POST", "/v1/messages?beta=true", hMessages, "anthropic-version", v1)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		assert.Equal(t, "beta=true", g.up.last(t).RawQuery)
	})
}

// Hop-by-hop headers (those the client's Connection header names included) and headers
// that identify the client never reach a third-party provider.
func TestHopByHopAndClientIdentifyingHeadersAreDropped(t *testing.T) {
	g := hostileGateway(t)
	dropped := []string{
		"X-Hop-Secret", "X-Other-Hop", "True-Client-IP", "CF-Connecting-IP", "X-Client-IP", "X-Forwarded-Port",
		"X-Forwarded-For", "Forwarded", "X-Real-IP", "Via", "X-Forwarded-Host", "X-Forwarded-Proto", "Keep-Alive",
		"Proxy-Authorization", "TE", "Trailer", "Upgrade-Insecure-Requests-Hop", "X-Stainless-Os",
	}
	headers := []string{
		// X-Stainless-Os is on the allowlist: named here, it is hop-by-hop all the same.
		"Connection", "keep-alive, X-Hop-Secret, x-other-hop, Upgrade-Insecure-Requests-Hop, X-Stainless-Os",
		"X-Stainless-Os", "v-hop-4",
		"X-Hop-Secret", "v-hop-1",
		"X-Other-Hop", "v-hop-2",
		"Upgrade-Insecure-Requests-Hop", "v-hop-3",
		"True-Client-IP", "198.51.100.7",
		"CF-Connecting-IP", "198.51.100.8",
		"X-Client-IP", "198.51.100.9",
		"X-Forwarded-Port", "8443",
		"X-Forwarded-For", "198.51.100.10",
		"Forwarded", "for=198.51.100.11",
		"X-Real-IP", "198.51.100.12",
		"Via", "1.1 corp-proxy",
		"X-Forwarded-Host", "corp.example",
		"X-Forwarded-Proto", "https",
		"Keep-Alive", "timeout=5",
		"Proxy-Authorization", "Basic Y29ycDpzZWNyZXQ=",
		"anthropic-version", v1,
		"X-Unlisted-Header", "unlisted",
		"X-Stainless-Lang", "js",
	}
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", hChat},
		{"/v1/responses", hResponses},
		{"/v1/messages", hMessages},
	} {
		t.Run(c.path, func(t *testing.T) {
			r := g.raw(t, "POST", c.path, c.body, headers...)
			require.Equal(t, 200, r.Status, "%s", r.Body)
			seen := g.up.last(t)
			for _, name := range dropped {
				assert.Empty(t, seen.Header.Values(name), "%s reached the upstream", name)
			}
			for name, values := range seen.Header {
				for _, v := range values {
					for _, leaked := range []string{"v-hop-", "198.51.100.", "corp-proxy", "corp.example", "Y29ycDpzZWNyZXQ="} {
						assert.NotContains(t, v, leaked, "header %s carries the client's %q", name, leaked)
					}
				}
			}
			assert.Empty(t, seen.Header.Values("X-Unlisted-Header"), "a header off the allowlist stays at the gateway")
			assert.Equal(t, "js", seen.Header.Get("X-Stainless-Lang"), "a header on the allowlist is forwarded")
		})
	}
}

// A side operation that a candidate does not offer (404 or 405 upstream) moves on to a
// candidate that offers it; it never counts against the candidate's generation health,
// and when no candidate offers it the client gets 404 in its family's envelope.
func TestMissingSubOperationFailsOverAndKeepsHealth(t *testing.T) {
	g := hostileGateway(t)
	subops := []struct{ path, body string }{
		{"/v1/messages/count_tokens", `{"model":"%s","messages":[{"role":"user","content":"hello"}]}`},
		{"/v1/responses/input_tokens", `{"model":"%s","input":"hello"}`},
		{"/v1/responses/compact", `{"model":"%s","input":"hello"}`},
	}
	body := func(tmpl, model string) string { return strings.Replace(tmpl, "%s", model, 1) }

	t.Run("fails over to a candidate that offers it", func(t *testing.T) {
		for _, s := range subops {
			r := g.bounded(t, "POST", s.path, body(s.body, "sub-fo"), "anthropic-version", v1)
			require.Equal(t, 200, r.Status, "%s: %s", s.path, r.Body)
			assert.Positive(t, gjson.GetBytes(r.Body, "input_tokens").Int()+gjson.GetBytes(r.Body, "usage.input_tokens").Int(), "%s", r.Body)
			assert.Contains(t, string(g.up.last(t).Body), upstreamPrefix+"-full", "answered by the candidate that offers it")
			g.assertNoLeak(t, r)
		}
	})

	t.Run("no candidate offers it: 404, and generation stays healthy", func(t *testing.T) {
		for i := 0; i < 20; i++ {
			for _, s := range subops {
				r := g.bounded(t, "POST", s.path, body(s.body, "sub-none"), "anthropic-version", v1)
				e := envelope(t, r, familyOf(s.path), 404)
				assert.NotEqual(t, "routing_no_available_channel", e.Get("code").Str)
				g.assertNoLeak(t, r)
			}
		}
		g.assertNoCircuitOpen(t, "sub-none", false)
		g.assertNoCircuitOpen(t, "sub-fo", false)
		for _, c := range []struct{ path, body string }{
			{"/v1/messages", `{"model":"sub-none","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`},
			{"/v1/chat/completions", `{"model":"sub-none","messages":[{"role":"user","content":"hi"}]}`},
			{"/v1/responses", `{"model":"sub-none","input":"hi"}`},
			{"/v1/messages", `{"model":"sub-fo","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`},
		} {
			r := g.bounded(t, "POST", c.path, c.body, "anthropic-version", v1)
			require.Equal(t, 200, r.Status, "%s after 60 missing side operations: %s", c.path, r.Body)
		}
	})
}
