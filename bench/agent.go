package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
)

// agentCase is one coding-agent request the agent phase sends: a client's path, headers
// and body, and what its streamed answer must look like.
type agentCase struct {
	name, label string
	path        string // path and the client's own query string
	headers     []string
	stream      []byte // the body as the client sends it (stream:true)
	single      []byte // the same with stream:false, for the JSON check
	upModel     string // the model the upstream's answer names
	model       string // the service model Switchyard answers with
	lastEvent   string // the event that ends a complete stream
	events      int    // events in the recorded stream
}

const (
	agentTurnBytes    = 26 << 10
	agentSessionBytes = 200 << 10
)

// Claude Code's headers (x-api-key, its betas, the bundled SDK's own) and Codex's
// (Bearer, session ids, turn metadata), as the client notes record them.
var (
	claudeCodeHeaders = []string{
		"X-Api-Key: " + benchKey,
		"Anthropic-Version: 2023-06-01",
		"Anthropic-Beta: claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,effort-2025-11-24",
		"Anthropic-Dangerous-Direct-Browser-Access: true",
		"X-App: cli",
		"X-Claude-Code-Session-Id: 7d3e9a12-4c5b-4f8e-9a0b-1c2d3e4f5a6b",
		"User-Agent: claude-cli/2.1.330 (external, sdk-cli)",
		"X-Stainless-Lang: js",
		"X-Stainless-Package-Version: 0.128.0",
		"X-Stainless-Os: Linux",
		"X-Stainless-Arch: x64",
		"X-Stainless-Runtime: node",
		"X-Stainless-Runtime-Version: v24.3.0",
		"X-Stainless-Retry-Count: 0",
		"X-Stainless-Timeout: 600",
		"Accept: application/json",
		"Content-Type: application/json",
	}
	codexHeaders = []string{
		"Authorization: Bearer " + benchKey,
		"Accept: text/event-stream",
		"Content-Type: application/json",
		"Originator: codex_exec",
		"User-Agent: codex_exec/0.169.0 (Debian 12.0.0; x86_64) xterm-256color (codex_exec; 0.169.0)",
		"Session-Id: 0199a7c3-5e1b-7d24-9f80-3b6c1a2e4d5f",
		"Thread-Id: 0199a7c3-5e1b-7d24-9f80-3b6c1a2e4d5f",
		"X-Client-Request-Id: 0199a7c3-5e1b-7d24-9f80-3b6c1a2e4d5f",
		"X-Codex-Window-Id: 0199a7c3-5e1b-7d24-9f80-3b6c1a2e4d60",
		"X-Codex-Beta-Features: remote_compaction_v2",
		`X-Codex-Turn-Metadata: {"session_id":"0199a7c3-5e1b-7d24-9f80-3b6c1a2e4d5f","turn_id":"3","sandbox":"workspace-write","model":"` + benchCodexModel + `","reasoning_effort":"medium"}`,
	}
)

// agentCases are the four requests: each client's typical turn and a long session.
func agentCases() []*agentCase {
	claude := func(name, label string, size int) *agentCase {
		return &agentCase{name: name, label: label, path: "/v1/messages?beta=true", headers: claudeCodeHeaders,
			stream: claudeCodeBody(benchClaudeModel, size, true), single: claudeCodeBody(benchClaudeModel, size, false),
			upModel: upstreamMessagesModel, model: benchClaudeModel, lastEvent: "message_stop",
			events: len(splitEvents(recordedMessagesSSE))}
	}
	codex := func(name, label string, size int) *agentCase {
		return &agentCase{name: name, label: label, path: "/v1/responses", headers: codexHeaders,
			stream: codexRequestBody(benchCodexModel, size, true), single: codexRequestBody(benchCodexModel, size, false),
			upModel: upstreamResponsesModel, model: benchCodexModel, lastEvent: "response.completed",
			events: len(splitEvents(recordedResponsesSSE))}
	}
	return []*agentCase{
		claude("claude_code_turn", "Claude Code turn (messages)", agentTurnBytes),
		claude("claude_code_session", "Claude Code long session (messages)", agentSessionBytes),
		codex("codex_turn", "Codex turn (responses)", agentTurnBytes),
		codex("codex_session", "Codex long session (responses)", agentSessionBytes),
	}
}

// request is the case's complete HTTP/1.1 request; mode drives the fixed upstream.
func (c *agentCase) request(host, mode string) []byte {
	body := c.stream
	if mode == "json" {
		body = c.single
	}
	sep := "?"
	if strings.Contains(c.path, "?") {
		sep = "&"
	}
	var b bytes.Buffer
	b.Grow(len(body) + 1500)
	fmt.Fprintf(&b, "POST %s%smode=%s HTTP/1.1\r\nHost: %s\r\n", c.path, sep, mode, host)
	for _, h := range c.headers {
		b.WriteString(h + "\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
	b.Write(body)
	return b.Bytes()
}

// check sends the case once streamed and once as JSON through t and checks each answer:
// 200, the model the client should see, and for the stream every event up to the last.
func (c *agentCase) check(t *target) error {
	want := c.upModel
	if t.isSwitchyard() {
		want = c.model
	}
	h := newH1(t.addr)
	defer h.close()
	for _, mode := range []string{"stream", "json"} {
		status, body, err := h.do(c.request(t.addr, mode), true)
		if err != nil {
			return fmt.Errorf("%s, %s answer: %w", c.name, mode, err)
		}
		if status != http.StatusOK {
			return fmt.Errorf("%s, %s answer: status %d: %.300s", c.name, mode, status, body)
		}
		if !bytes.Contains(body, []byte(`"model":"`+want+`"`)) {
			return fmt.Errorf("%s, %s answer does not name model %s: %.300s", c.name, mode, want, body)
		}
		if mode != "stream" {
			continue
		}
		if n := bytes.Count(body, []byte("\ndata: ")) + boolInt(bytes.HasPrefix(body, []byte("data: "))); n != c.events {
			return fmt.Errorf("%s: %d events arrived, %d sent", c.name, n, c.events)
		}
		if !bytes.Contains(body, []byte("event: "+c.lastEvent+"\n")) {
			return fmt.Errorf("%s: the stream has no %s event", c.name, c.lastEvent)
		}
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// agentPhase sends each coding-agent request at concurrency 1, streamed, and measures
// the request to the last byte of the answer and each proxy's CPU and allocation per
// request, in interleaved rounds (case by case, target by target).
func agentPhase(ctx context.Context, p plan, targets []*target, res *results) *agentResult {
	out := &agentResult{Concurrency: 1, Rounds: p.AgentRounds, RequestsPerRound: p.AgentN}
	cases := agentCases()
	type key struct{ c, t string }
	lats := map[key][]int64{}
	cpu := map[key]float64{}
	alloc := map[key]float64{}
	scrape := map[string]float64{}
	broken := map[key]bool{}
	for _, c := range cases {
		ac := &agentCaseResult{Name: c.name, Label: c.label, Path: c.path, BodyBytes: len(c.stream),
			EventsPerStream: c.events, Targets: map[string]*agentTarget{}}
		out.Cases = append(out.Cases, ac)
		for _, t := range targets {
			ac.Targets[t.name] = &agentTarget{}
			if err := c.check(t); err != nil {
				// A refusal of a realistic body is a finding: it is reported, and the
				// case is not measured on that target.
				res.errorf("agent %s through %s: %v", c.name, t.name, err)
				ac.Targets[t.name].Refused = err.Error()
				broken[key{c.name, t.name}] = true
				continue
			}
			if _, err := serial(ctx, t, max(5, p.AgentN/10), c.request(t.addr, "stream")); err != nil {
				res.errorf("agent warm-up %s through %s: %v", c.name, t.name, err)
			}
		}
	}
	for _, t := range targets {
		if t.isProxy() {
			scrape[t.name] = scrapeCost(t)
		}
	}
	for r := 0; r < p.AgentRounds && ctx.Err() == nil; r++ {
		progress("coding-agent requests, concurrency 1, streamed: round %d/%d", r+1, p.AgentRounds)
		for _, c := range cases {
			for _, t := range targets {
				k := key{c.name, t.name}
				if broken[k] {
					continue
				}
				m := startMeter(t)
				l, err := serial(ctx, t, p.AgentN, c.request(t.addr, "stream"))
				cp, a := m.stop()
				if err != nil {
					res.errorf("agent %s through %s: %v", c.name, t.name, err)
					for _, ac := range out.Cases {
						if ac.Name == c.name {
							ac.Targets[t.name].Errors++
						}
					}
				}
				lats[k] = append(lats[k], l...)
				cpu[k] += cp
				alloc[k] += a - scrape[t.name]
			}
		}
	}
	for _, ac := range out.Cases {
		for _, t := range targets {
			k := key{ac.Name, t.name}
			at := ac.Targets[t.name]
			at.Latency = summarize(lats[k])
			if n := float64(at.Latency.N); t.isProxy() && n > 0 {
				at.CPUPerRequestUs = round(cpu[k]/n*1e6, 1)
				at.AllocPerRequest = round(alloc[k]/n, 0)
				at.AllocPerBodyByte = round(at.AllocPerRequest/float64(ac.BodyBytes), 2)
			}
		}
		d, st, sw := ac.Targets["direct"], ac.Targets["stock"], ac.Targets["switchyard"]
		if d == nil || st == nil || sw == nil {
			continue
		}
		for _, pt := range []*agentTarget{st, sw} {
			pt.AddedP50 = round(pt.Latency.P50-d.Latency.P50, 1)
			pt.AddedP99 = round(pt.Latency.P99-d.Latency.P99, 1)
		}
		ac.P50Ratio = round(ratio(sw.Latency.P50, st.Latency.P50), 3)
		ac.P99Ratio = round(ratio(sw.Latency.P99, st.Latency.P99), 3)
		ac.AddedP50Ratio = round(ratio(sw.AddedP50, st.AddedP50), 3)
		ac.AddedP99Ratio = round(ratio(sw.AddedP99, st.AddedP99), 3)
		ac.CPURatio = round(ratio(sw.CPUPerRequestUs, st.CPUPerRequestUs), 3)
	}
	return out
}

type agentResult struct {
	Concurrency      int                `json:"concurrency"`
	Rounds           int                `json:"rounds"`
	RequestsPerRound int                `json:"requests_per_round"`
	Cases            []*agentCaseResult `json:"cases"`
}

type agentCaseResult struct {
	Name            string                  `json:"name"`
	Label           string                  `json:"label"`
	Path            string                  `json:"path"`
	BodyBytes       int                     `json:"body_bytes"`
	EventsPerStream int                     `json:"events_per_stream"`
	Targets         map[string]*agentTarget `json:"targets"`
	// Switchyard ÷ stock Caddy: latency (request to last byte), latency added over the
	// upstream directly, and CPU per request.
	P50Ratio      float64 `json:"latency_p50_ratio"`
	P99Ratio      float64 `json:"latency_p99_ratio"`
	AddedP50Ratio float64 `json:"added_p50_ratio"`
	AddedP99Ratio float64 `json:"added_p99_ratio"`
	CPURatio      float64 `json:"cpu_per_request_ratio"`
}

type agentTarget struct {
	Latency          dist    `json:"latency"`
	AddedP50         float64 `json:"added_p50_us,omitempty"`
	AddedP99         float64 `json:"added_p99_us,omitempty"`
	CPUPerRequestUs  float64 `json:"cpu_per_request_us,omitempty"`
	AllocPerRequest  float64 `json:"alloc_bytes_per_request,omitempty"`
	AllocPerBodyByte float64 `json:"alloc_per_body_byte,omitempty"`
	Refused          string  `json:"refused,omitempty"`
	Errors           int     `json:"errors"`
}

// markdown is the coding-agent table: one row per request, Switchyard against stock
// Caddy and the upstream directly.
func (a *agentResult) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nCoding-agent requests, concurrency 1, streamed answer of 48 events (request to last byte), %d × %d requests each\n\n", a.Rounds, a.RequestsPerRound)
	b.WriteString("| Request | Body | Direct p50 / p99 | Stock Caddy p50 / p99 | Switchyard p50 / p99 | Latency ÷ stock, p50 / p99 | Added p99 ÷ stock | CPU per request, stock / Switchyard | CPU ÷ stock | Switchyard allocated ÷ body |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	pair := func(x, y string) string { return x + " / " + y }
	for _, c := range a.Cases {
		d, st, sw := c.Targets["direct"], c.Targets["stock"], c.Targets["switchyard"]
		if d == nil || st == nil || sw == nil {
			continue
		}
		if sw.Refused != "" || st.Refused != "" {
			why := strings.NewReplacer("|", "\\|", "\n", " ").Replace(sw.Refused + st.Refused)
			fmt.Fprintf(&b, "| %s | %.0f KB | refused: %.200s ||||||||\n", c.Label, float64(c.BodyBytes)/1000, why)
			continue
		}
		fmt.Fprintf(&b, "| %s | %.0f KB | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.Label, float64(c.BodyBytes)/1000,
			pair(us(d.Latency.P50), us(d.Latency.P99)), pair(us(st.Latency.P50), us(st.Latency.P99)), pair(us(sw.Latency.P50), us(sw.Latency.P99)),
			pair(times(c.P50Ratio), times(c.P99Ratio)), times(c.AddedP99Ratio),
			pair(us(st.CPUPerRequestUs), us(sw.CPUPerRequestUs)), times(c.CPURatio), times(sw.AllocPerBodyByte))
	}
	return b.String()
}
