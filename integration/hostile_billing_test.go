package integration

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/internal/redistest"
)

// Hostile billing: a client with one valid key tries every way there is to make an
// upstream generate, or bill, more than the gateway reserved for it. The upstream here is
// as greedy as the lenient servers a gateway fronts (vLLM, LiteLLM and other pydantic
// servers, anything that decodes with Go's encoding/json): it reads caps written as
// strings, matches field names without regard to case, prefers max_completion_tokens,
// writes n answers, and with no cap writes eight times the model's declared one. It
// reports exactly the output it wrote, so the ledger shows what such an upstream would
// bill, and a token of input for every character it was sent. Every row is sent three
// times at a key whose budget fits one honest request: whatever the gateway admits, the
// key's metered spend must stay within its budget, and no upstream call may write more
// than the model's declared cap, the most the gateway ever reserves for one answer.

const (
	greedyDeclaredCap = 1000 // the model's max_output_tokens
	greedyDefaultCap  = 8 * greedyDeclaredCap
	// Prices per million tokens: an output token costs 1,000 micro-units, an input token 100.
	greedyBudget       = "1.5/day"
	greedyBudgetMicros = 1_500_000
)

// greedyRequest is what the greedy upstream made of one request.
type greedyRequest struct {
	path          string
	input, output int64 // tokens it read and wrote (and billed)
}

// greedyUpstream answers every shape with as much output as a lenient server would write.
type greedyUpstream struct {
	mu   sync.Mutex
	seen []greedyRequest
	// held, when set, is handed each request as it arrives: its answer waits until the
	// release is closed.
	held chan heldRequest
}

// heldRequest is a request the greedy upstream holds its answer to.
type heldRequest struct {
	release chan struct{}
	gone    <-chan struct{} // closed when the gateway gives up on the request
}

// lenientFields is how a server decoding with encoding/json reads the fields that make it
// generate more: names matched case-insensitively under Unicode folding, caps taken from
// numbers or from strings of digits (pydantic's lax mode).
type lenientFields struct {
	N                   json.RawMessage `json:"n"`
	MaxTokens           json.RawMessage `json:"max_tokens"`
	MaxCompletionTokens json.RawMessage `json:"max_completion_tokens"`
	MaxOutputTokens     json.RawMessage `json:"max_output_tokens"`
	Stream              bool            `json:"stream"`
}

func lenientInt(raw json.RawMessage) (int64, bool) {
	s := strings.Trim(strings.TrimSpace(string(raw)), `"`)
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0
}

func (g *greedyUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body bytes.Buffer
	_, _ = body.ReadFrom(r.Body)
	var f lenientFields
	_ = json.Unmarshal(body.Bytes(), &f)
	capTokens := int64(greedyDefaultCap)
	for _, raw := range []json.RawMessage{f.MaxTokens, f.MaxOutputTokens, f.MaxCompletionTokens} {
		if v, ok := lenientInt(raw); ok {
			capTokens = v // max_completion_tokens, read last, wins over max_tokens
		}
	}
	n := int64(1)
	if v, ok := lenientInt(f.N); ok {
		n = v
	}
	output := n * capTokens
	// A token per character of the whole body: more than any tokenizer makes of plain
	// text, and four times the gateway's estimate for ASCII, the bound docs/limits-and-billing.md states.
	input := int64(utf8.RuneCount(body.Bytes()))
	g.mu.Lock()
	g.seen = append(g.seen, greedyRequest{path: r.URL.Path, input: input, output: output})
	g.mu.Unlock()
	if g.held != nil {
		release := make(chan struct{})
		g.held <- heldRequest{release: release, gone: r.Context().Done()}
		<-release
	}
	w.Header().Set("Content-Type", "application/json")
	switch {
	case strings.HasSuffix(r.URL.Path, "/chat/completions") && f.Stream:
		// A complete answer with its usage, but no [DONE]: the usage reported wins.
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"up\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", strings.Repeat("word ", 75))
		fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"up\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n")
		fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"up\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", input, output, input+output)
	case strings.HasSuffix(r.URL.Path, "/chat/completions"):
		fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","model":"up","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"length"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, input, output, input+output)
	case strings.HasSuffix(r.URL.Path, "/responses"):
		fmt.Fprintf(w, `{"id":"r1","object":"response","status":"incomplete","model":"up","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]}],"usage":{"input_tokens":%d,"output_tokens":%d,"total_tokens":%d}}`, input, output, input+output)
	default:
		fmt.Fprintf(w, `{"id":"m1","type":"message","role":"assistant","model":"up","content":[{"type":"text","text":"ok"}],"stop_reason":"max_tokens","usage":{"input_tokens":%d,"output_tokens":%d}}`, input, output)
	}
}

func (g *greedyUpstream) calls() []greedyRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]greedyRequest(nil), g.seen...)
}

// greedyGateway runs the gateway in front of a greedy upstream with one budgeted key per
// name, each with a budget that fits one honest request, and one key limited to 3,000
// tokens a minute.
// limitsOption, when not empty, is the gateway's `limits` block (counters in Redis).
func greedyGateway(t *testing.T, keyNames []string, hold bool, limitsOption string) (*gateway, *greedyUpstream, *sql.DB) {
	t.Helper()
	greedy := &greedyUpstream{}
	if hold {
		greedy.held = make(chan heldRequest)
	}
	up := &upstream{Server: httptest.NewServer(greedy)}
	t.Cleanup(up.Close)
	a, b := "http://"+up.hostport()+"/v1", "http://"+up.hostport()
	models := fmt.Sprintf("\t\tmodel greedy {\n\t\t\tprotocols family_a family_b\n\t\t\tmax_output_tokens %d\n\t\t\tprice input 100 output 1000\n",
		greedyDeclaredCap) + candidate("a", "family_a", a, upstreamPrefix+"-greedy") + candidate("b", "family_b", b, upstreamPrefix+"-greedy") + "\t\t}\n"
	dbPath := filepath.Join(t.TempDir(), "ledger.db")
	options := "\t\tstore sqlite " + dbPath + "\n" + limitsOption
	for _, name := range keyNames {
		options += fmt.Sprintf("\t\tkey %s %s {\n\t\t\tbudget %s\n\t\t}\n", name, greedyKey(name), greedyBudget)
	}
	options += "\t\tkey tpm " + greedyKey("tpm") + " {\n\t\t\ttpm 3000\n\t\t}\n"
	g := startGatewayWith(t, up, models, options)
	db, err := sql.Open("sqlite", dbPath)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return g, greedy, db
}

// greedyKey is a distinct static key per row.
func greedyKey(name string) string {
	return "sk-greedy-" + name + "-0123456789abcdef0123"
}

// spend is a key's metered spend and its count of served answers in the ledger.
func spend(t *testing.T, db *sql.DB, keyName string) (micros, records int64) {
	t.Helper()
	require.NoError(t, db.QueryRow(`SELECT COALESCE(SUM(cost_micros),0), COUNT(*) FROM usage_records WHERE key_id = ? AND outcome = 'served'`,
		"static:"+keyName).Scan(&micros, &records))
	return micros, records
}

// hostileRow is one way to ask for more than the gateway reserves.
type hostileRow struct {
	name, path, body string
}

func hostileRows() []hostileRow {
	chat := func(extra string) string {
		return `{"model":"greedy",` + extra + `"messages":[{"role":"user","content":"Hello"}]}`
	}
	resp := func(extra string) string { return `{"model":"greedy",` + extra + `"input":"Hello"}` }
	msgs := func(extra string) string {
		return `{"model":"greedy",` + extra + `"messages":[{"role":"user","content":"Hello"}]}`
	}
	long := func(unit string, n int) string { return strings.Repeat(unit, n) }
	return []hostileRow{
		{"n 100", "/v1/chat/completions", chat(`"n":100,"max_completion_tokens":1000,`)},
		{"n as a string", "/v1/chat/completions", chat(`"n":"100",`)},
		{"max_tokens as a string", "/v1/chat/completions", chat(`"max_tokens":"100000",`)},
		{"max_completion_tokens as a string", "/v1/chat/completions", chat(`"max_completion_tokens":"100000",`)},
		{"max_completion_tokens as an array", "/v1/chat/completions", chat(`"max_completion_tokens":[100000],`)},
		{"max_completion_tokens as an object", "/v1/chat/completions", chat(`"max_completion_tokens":{"v":100000},`)},
		{"max_output_tokens as a string", "/v1/responses", resp(`"max_output_tokens":"100000",`)},
		{"max_tokens as a string, messages", "/v1/messages", msgs(`"max_tokens":"100000",`)},
		{"two caps that disagree", "/v1/chat/completions", chat(`"max_tokens":1,"max_completion_tokens":1000,`)},
		{"cap name with a long s", "/v1/chat/completions", chat(`"max_tokens":1,"max_completion_tokenſ":1000,`)},
		{"cap name with a Kelvin sign", "/v1/chat/completions", chat(`"max_tokens":1,"max_completion_\u212aokens":1000,`)},
		{"cap name with a long s, responses", "/v1/responses", resp(`"max_output_tokenſ":5000,`)},
		{"no cap, chat", "/v1/chat/completions", chat(``)},
		{"no cap, responses", "/v1/responses", resp(``)},
		{"long text without spaces", "/v1/chat/completions", chat(`"max_completion_tokens":10,"system_note":"` + long("x", 300_000) + `",`)},
		{"CJK text", "/v1/chat/completions", chat(`"max_completion_tokens":10,"system_note":"` + long("漢", 100_000) + `",`)},
		{"emoji text", "/v1/responses", resp(`"max_output_tokens":10,"instructions":"` + long("😀", 75_000) + `",`)},
		{"escaped text", "/v1/messages", msgs(`"max_tokens":10,"system":"` + long(`\u6f22`, 50_000) + `",`)},
	}
}

// TestAHostileClientCannotSpendPastItsBudget sends every row of the admission issue's table
// (and its Family B and Responses forms) three times at a key whose budget fits one honest
// request, with the limit counters in memory and in Redis.
func TestAHostileClientCannotSpendPastItsBudget(t *testing.T) {
	t.Run("counters in memory", func(t *testing.T) { hostileRowsStayWithinBudget(t, "") })
	t.Run("counters in Redis", func(t *testing.T) {
		rd := redistest.Start(t)
		hostileRowsStayWithinBudget(t, "\t\tlimits {\n\t\t\tredis "+rd.URL()+"\n\t\t}\n")
	})
}

func hostileRowsStayWithinBudget(t *testing.T, limitsOption string) {
	rows := hostileRows()
	names := make([]string, len(rows))
	for i := range rows {
		names[i] = "row" + strconv.Itoa(i)
	}
	g, greedy, db := greedyGateway(t, names, false, limitsOption)
	answered := map[string]int64{}
	for i, row := range rows {
		before := len(greedy.calls())
		for range 3 {
			r := g.call(t, "POST", row.path, row.body, "Authorization", "Bearer "+greedyKey(names[i]),
				"anthropic-version", "2023-06-01")
			require.Contains(t, []int{200, 400, 429}, r.Status, "%s: %.300s", row.name, r.Body)
			fam := "a"
			if row.path == "/v1/messages" {
				fam = "b"
			}
			if r.Status != 200 {
				e := envelope(t, r, fam, r.Status)
				assert.NotEmpty(t, e.Get("message").Str, row.name)
				if r.Status == 400 {
					assert.NotEmpty(t, gjson.GetBytes(r.Body, "error.param").Str+e.Get("message").Str, row.name)
				}
				continue
			}
			answered[names[i]]++
		}
		// Every call the upstream got wrote no more than the model's declared cap: the
		// gateway reserved that (or the request's own smaller cap) for it.
		for _, c := range greedy.calls()[before:] {
			assert.LessOrEqual(t, c.output, int64(greedyDeclaredCap), "%s: the upstream wrote more than was reserved", row.name)
		}
	}
	for i, row := range rows {
		want := answered[names[i]]
		var micros, records int64
		require.Eventually(t, func() bool { micros, records = spend(t, db, names[i]); return records == want },
			waitShort, pollEvery, "%s: every answer is in the ledger", row.name)
		assert.LessOrEqual(t, micros, int64(greedyBudgetMicros), "%s: %d answers metered at %d micro-units, past the budget", row.name, records, micros)
	}

	// A tokens-per-minute limit of 3,000 admits none of the long texts: their input alone
	// is more than a minute's allowance.
	before := len(greedy.calls())
	for _, row := range rows[len(rows)-4:] {
		r := g.call(t, "POST", row.path, row.body, "Authorization", "Bearer "+greedyKey("tpm"), "anthropic-version", "2023-06-01")
		assert.Equal(t, 429, r.Status, "%s: %.300s", row.name, r.Body)
	}
	assert.Len(t, greedy.calls(), before, "no long text reached the upstream through the tokens-per-minute key")
}

// TestAStreamsReportedUsageIsBilledWithoutItsTerminator: an upstream that reports its usage
// and never sends [DONE] is billed what it reported, not an estimate from the text.
func TestAStreamsReportedUsageIsBilledWithoutItsTerminator(t *testing.T) {
	g, _, db := greedyGateway(t, []string{"stream"}, false, "")
	r := g.call(t, "POST", "/v1/chat/completions", `{"model":"greedy","stream":true,"max_completion_tokens":60,"messages":[{"role":"user","content":"Hello"}]}`,
		"Authorization", "Bearer "+greedyKey("stream"))
	require.Equal(t, 200, r.Status, "%s", r.Body)
	row := record(t, db, r.Header.Get("X-Switchyard-Request-Id"))
	assert.Equal(t, int64(60), row.Output, "the usage the upstream reported, not the 94 tokens of text")
	assert.False(t, row.Estimated)
}

// TestAClientThatLeavesBeforeTheAnswerIsStillBilled: a key whose budget fits one request
// sends it without streaming and leaves once the upstream has it. The upstream works on
// and bills; so does the gateway, and the key's next requests find its budget spent.
func TestAClientThatLeavesBeforeTheAnswerIsStillBilled(t *testing.T) {
	g, greedy, db := greedyGateway(t, []string{"leaver"}, true, "")
	body := `{"model":"greedy","max_completion_tokens":1000,"messages":[{"role":"user","content":"Hello"}]}`
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, "POST", g.base+"/v1/chat/completions", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+greedyKey("leaver"))
		req.Header.Set("Content-Type", "application/json")
		done := make(chan *http.Response, 1)
		go func() {
			resp, _ := http.DefaultClient.Do(req)
			done <- resp
		}()
		select {
		case held := <-greedy.held:
			cancel() // the upstream has the request: leave before its answer
			<-done
			// A gateway that gives up on the upstream shows it at once; one that waits for
			// the answer shows nothing, so give it time to have seen the client leave (a
			// millisecond or so) before the answer comes.
			select {
			case <-held.gone:
			case <-time.After(300 * time.Millisecond):
			}
			close(held.release)
		case resp := <-done:
			// Refused at admission: the budget is spent.
			require.NotNil(t, resp)
			assert.Equal(t, 429, resp.StatusCode)
			resp.Body.Close()
			cancel()
		}
	}
	var micros, records int64
	require.Eventually(t, func() bool { micros, records = spend(t, db, "leaver"); return records >= 1 },
		waitShort, pollEvery, "the answer the client left is in the ledger")
	assert.Equal(t, int64(1), records, "one upstream answer, one record")
	calls := greedy.calls()
	require.Len(t, calls, 1, "the budget, spent by the answer the client left, refused the next requests")
	assert.Equal(t, calls[0].output*1000+calls[0].input*100, micros, "billed the usage the upstream reported")
}
