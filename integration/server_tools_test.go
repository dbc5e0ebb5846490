package integration

import (
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/metering"
	"github.com/switchyard-gw/switchyard/protocols"
)

// Server-side tools (a provider's web search, file search, code interpreter, image
// generation, MCP calls) are billed per use on top of the tokens. The gateway reserves
// each declared use at the model's tool price before anything is sent, and meters the
// uses the answer reports. The upstream here uses every search a Messages request allows
// (max_uses) and reports them in usage.server_tool_use, calls each MCP server once, and
// answers a Responses request with two calls of each server tool it declares.

// Prices: a token costs next to nothing (1 unit per million); a web search 10 units per
// 1,000 (10,000 micro-units a search), a file search 2.5, a code interpreter session 30,
// an image 40, an MCP call 5 per 1,000.
const serverToolModel = "\t\tmodel tools {\n\t\t\tprotocols family_a family_b\n" +
	"\t\t\tprice input 1 output 1\n" +
	"\t\t\ttool_price web_search 10 file_search 2.5 code_interpreter 30 image_generation 40 mcp 5\n"

// toolUpstream answers as a provider running server-side tools would, and records what
// it was sent.
type toolUpstream struct {
	mu   sync.Mutex
	seen []string // request bodies
}

func (u *toolUpstream) bodies() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

func (u *toolUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.seen = append(u.seen, string(body))
	u.mu.Unlock()
	stream := gjson.GetBytes(body, "stream").Bool()
	if strings.HasSuffix(r.URL.Path, "/responses") {
		// Two calls of each server tool the request declares, or as many as its
		// max_tool_calls leaves each.
		var items []string
		tools := gjson.GetBytes(body, "tools").Array()
		per := 2
		if most := gjson.GetBytes(body, "max_tool_calls").Int(); most > 0 {
			per = int(most) / len(tools)
		}
		for _, tool := range tools {
			call := map[string]string{"web_search": "web_search_call", "web_search_preview": "web_search_call",
				"file_search": "file_search_call", "code_interpreter": "code_interpreter_call",
				"image_generation": "image_generation_call"}[tool.Get("type").Str]
			if call != "" {
				for i := range per {
					items = append(items, fmt.Sprintf(`{"type":%q,"id":"%s_%d","status":"completed"}`, call, call, i))
				}
			}
		}
		items = append(items, `{"type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]}`)
		resp := `{"id":"r1","object":"response","status":"completed","model":"up","output":[` + strings.Join(items, ",") +
			`],"usage":{"input_tokens":50,"output_tokens":10,"total_tokens":60}}`
		if !stream {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, resp)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		seq := 0
		event := func(typ, data string) {
			fmt.Fprintf(w, "event: %s\ndata: {\"type\":%q,\"sequence_number\":%d,%s}\n\n", typ, typ, seq, data)
			seq++
		}
		event("response.created", `"response":{"id":"r1","object":"response","status":"in_progress","model":"up","output":[],"usage":null}`)
		for i, item := range items {
			event("response.output_item.done", fmt.Sprintf(`"output_index":%d,"item":%s`, i, item))
		}
		event("response.completed", `"response":`+resp)
		return
	}
	// Messages: every search the request allows, one call per MCP server.
	searches := int64(0)
	for _, tool := range gjson.GetBytes(body, "tools").Array() {
		if strings.HasPrefix(tool.Get("type").Str, "web_search_") {
			searches = tool.Get("max_uses").Int()
		}
	}
	var blocks []string
	for i := range gjson.GetBytes(body, "mcp_servers").Array() {
		blocks = append(blocks, fmt.Sprintf(`{"type":"mcp_tool_use","id":"mcp_%d","name":"lookup","server_name":"s%d","input":{}}`, i, i))
	}
	blocks = append(blocks, `{"type":"text","text":"done"}`)
	usage := fmt.Sprintf(`"usage":{"input_tokens":50,"output_tokens":10,"server_tool_use":{"web_search_requests":%d,"web_fetch_requests":0}}`, searches)
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"m1","type":"message","role":"assistant","model":"up","content":[`+strings.Join(blocks, ",")+
			`],"stop_reason":"end_turn",`+usage+`}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"up\",\"content\":[],\"usage\":{\"input_tokens\":50,\"output_tokens\":1}}}\n\n")
	for i, b := range blocks {
		fmt.Fprintf(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":%d,\"content_block\":%s}\n\n", i, b)
		fmt.Fprintf(w, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":%d}\n\n", i)
	}
	fmt.Fprintf(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},%s}\n\n", usage)
	fmt.Fprintf(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
}

// toolGateway runs the gateway in front of a toolUpstream, with one key per name, each
// with a budget of 0.2 a day, and the ledger in SQLite.
func toolGateway(t *testing.T, keyNames ...string) (*gateway, *toolUpstream, *sql.DB) {
	t.Helper()
	tu := &toolUpstream{}
	up := &upstream{Server: httptest.NewServer(tu)}
	t.Cleanup(up.Close)
	models := serverToolModel +
		candidate("a", "family_a", "http://"+up.hostport()+"/v1", upstreamPrefix+"-tools") +
		candidate("b", "family_b", "http://"+up.hostport(), upstreamPrefix+"-tools") + "\t\t}\n" +
		// A candidate with a search price of its own, and no token prices: the model's.
		strings.NewReplacer("model tools", "model tools-eu", "family_a family_b", "family_b").Replace(serverToolModel) +
		candidate("eu", "family_b", "http://"+up.hostport(), upstreamPrefix+"-tools", "tool_price web_search 20") + "\t\t}\n"
	dbPath := filepath.Join(t.TempDir(), "ledger.db")
	options := "\t\tstore sqlite " + dbPath + "\n"
	for _, name := range keyNames {
		options += fmt.Sprintf("\t\tkey %s %s {\n\t\t\tbudget 0.2/day\n\t\t}\n", name, toolKey(name))
	}
	g := startGatewayWith(t, up, models, options)
	db, err := sql.Open("sqlite", dbPath)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return g, tu, db
}

func toolKey(name string) string { return "sk-tools-" + name + "-0123456789abcdef0123" }

// toolRecord is a request's tool uses and cost in the ledger, once it is there.
func toolRecord(t *testing.T, db *sql.DB, requestID string) (toolUses string, cost int64) {
	t.Helper()
	var uses sql.NullString
	require.Eventually(t, func() bool {
		return db.QueryRow(`SELECT tool_uses, cost_micros FROM usage_records WHERE request_id = ?`, requestID).Scan(&uses, &cost) == nil
	}, waitShort, pollEvery, "no ledger row for %s", requestID)
	return uses.String, cost
}

func TestServerToolsAreReservedBeforeAndBilledAfter(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			g, up, db := toolGateway(t, "search25", "search10", "eu", "mcp", "resp-all", "resp-capped")
			streamField := fmt.Sprintf(`"stream":%v,`, stream)
			messages := func(tools string) string {
				return `{"model":"tools",` + streamField + `"max_tokens":100,` + tools +
					`"messages":[{"role":"user","content":"What happened today?"}]}`
			}
			call := func(key, path, body string) *result {
				return g.call(t, "POST", path, body, "Authorization", "Bearer "+toolKey(key), "anthropic-version", "2023-06-01")
			}

			// (a) 25 searches at 10 per 1,000 are 0.25, past the budget of 0.2 that the
			// tokens alone fit many times over: refused before the upstream is called.
			r := call("search25", "/v1/messages", messages(`"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":25}],`))
			e := envelope(t, r, "b", 429)
			assert.Equal(t, "budget_exceeded", e.Get("code").Str, "%s", r.Body)
			assert.Empty(t, up.bodies(), "the upstream was never called")

			// (b) 10 searches, 0.1, fit: admitted, and the ledger has the 10 the answer
			// reported and their 100,000 micro-units beside the 60 tokens' 60; the metrics
			// count them (process-wide counters: read before and after).
			searchesMetric := `switchyard_tool_uses_total{key_id="static:search10",model="tools",tool="web_search"}`
			metricsBefore, _ := g.scrapeMetrics(t)
			r = call("search10", "/v1/messages", messages(`"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":10}],`))
			require.Equal(t, 200, r.Status, "%s", r.Body)
			metricsAfter, _ := g.scrapeMetrics(t)
			assert.Equal(t, float64(10), metricsAfter[searchesMetric]-metricsBefore[searchesMetric])
			uses, cost := toolRecord(t, db, r.Header.Get("X-Switchyard-Request-Id"))
			assert.JSONEq(t, `{"web_search":10}`, uses)
			assert.Equal(t, int64(100_060), cost, "10 searches at 10,000 micro-units and 60 tokens at 1")
			id := r.Header.Get("X-Switchyard-Request-Id")
			var logged []metering.RequestRow
			for _, row := range g.requestLog(t, url.Values{"key": {"static:search10"}}).Requests {
				if row.RequestID == id {
					logged = append(logged, row)
				}
			}
			require.Len(t, logged, 1, "the request log has the request")
			assert.Equal(t, int64(10), logged[0].ToolUses[protocols.ToolWebSearch], "the request log shows its searches")

			// A candidate's own search price bills its searches; its tokens are at the
			// model's prices: 5 searches at 20,000 micro-units and 60 tokens at 1.
			r = call("eu", "/v1/messages", strings.Replace(messages(`"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":5}],`), `"tools"`, `"tools-eu"`, 1))
			require.Equal(t, 200, r.Status, "%s", r.Body)
			_, cost = toolRecord(t, db, r.Header.Get("X-Switchyard-Request-Id"))
			assert.Equal(t, int64(100_060), cost)

			// A max_uses an upstream could read otherwise than the gateway does is
			// refused, unsent: a string, written twice, or in another case.
			before := len(up.bodies())
			for _, tool := range []string{
				`{"type":"web_search_20250305","name":"web_search","max_uses":"25"}`,
				`{"type":"web_search_20250305","name":"web_search","max_uses":1,"max_uses":25}`,
				`{"type":"web_search_20250305","name":"web_search","max_uses":1,"Max_Uses":25}`,
			} {
				r = call("search10", "/v1/messages", messages(`"tools":[`+tool+`],`))
				e = envelope(t, r, "b", 400)
				assert.Contains(t, e.Get("message").Str, "max_uses", "%s", tool)
			}
			assert.Len(t, up.bodies(), before, "none reached the upstream")

			// MCP servers: each is reserved the default 10 calls; each call the answer
			// shows (an mcp_tool_use block) is billed at 5 per 1,000.
			r = call("mcp", "/v1/messages", messages(`"mcp_servers":[{"type":"url","url":"https://mcp.example/a","name":"a"},{"type":"url","url":"https://mcp.example/b","name":"b"}],`))
			require.Equal(t, 200, r.Status, "%s", r.Body)
			uses, cost = toolRecord(t, db, r.Header.Get("X-Switchyard-Request-Id"))
			assert.JSONEq(t, `{"mcp":2}`, uses)
			assert.Equal(t, int64(2*5_000+60), cost, "2 calls at 5,000 micro-units and 60 tokens at 1")

			// (c) Responses: four server tools with no count of their own are reserved 10
			// uses each, 0.825 in all: past the budget, refused unsent.
			respTools := `"tools":[{"type":"web_search"},{"type":"file_search","vector_store_ids":["vs_1"]},` +
				`{"type":"code_interpreter","container":{"type":"auto"}},{"type":"image_generation"}],`
			before = len(up.bodies())
			r = call("resp-all", "/v1/responses", `{"model":"tools",`+streamField+respTools+`"input":"Search, compute, draw."}`)
			e = envelope(t, r, "a", 429)
			assert.Equal(t, "budget_exceeded", e.Get("code").Str, "%s", r.Body)
			assert.Len(t, up.bodies(), before, "the upstream was never called")

			// max_tool_calls 4 bounds them together: 4 uses of the dearest (images, 40 per
			// 1,000) are 0.16, which fits. The answer's 4 calls (one of each tool) are
			// billed as reported: (10 + 2.5 + 30 + 40) / 1,000 = 0.0825, and 60 tokens.
			r = call("resp-capped", "/v1/responses", `{"model":"tools",`+streamField+respTools+`"max_tool_calls":4,"input":"Search, compute, draw."}`)
			require.Equal(t, 200, r.Status, "%s", r.Body)
			uses, cost = toolRecord(t, db, r.Header.Get("X-Switchyard-Request-Id"))
			assert.JSONEq(t, `{"web_search":1,"file_search":1,"code_interpreter":1,"image_generation":1}`, uses)
			assert.Equal(t, int64(82_500+60), cost)
		})
	}
}
