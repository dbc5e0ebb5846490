package protocols

import (
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// Server-side tools are tools the provider runs itself within one request (a web search,
// a fetch, a code sandbox, an image model, an MCP server it calls): the model may use them
// several times before it answers, and a provider may bill each use on top of the tokens.
// This file says which of them a request may use, how many times at most, and how many
// times an answer says it used them. It knows no prices: metering prices the uses.

// ServerTool names a server-side tool, whatever the shape calls it.
type ServerTool uint8

const (
	ToolWebSearch       ServerTool = iota // Messages web_search_*, Responses web_search, web_search_preview
	ToolWebFetch                          // Messages web_fetch_*
	ToolFileSearch                        // Responses file_search
	ToolCodeInterpreter                   // Responses code_interpreter
	ToolImageGeneration                   // Responses image_generation
	ToolMCP                               // Messages mcp_servers, Responses mcp
	NumServerTools
)

var serverToolNames = [NumServerTools]string{
	ToolWebSearch: "web_search", ToolWebFetch: "web_fetch", ToolFileSearch: "file_search",
	ToolCodeInterpreter: "code_interpreter", ToolImageGeneration: "image_generation", ToolMCP: "mcp",
}

// String is the tool's name in the configuration and the ledger.
func (t ServerTool) String() string {
	if t < NumServerTools {
		return serverToolNames[t]
	}
	return "unknown"
}

// ParseServerTool reads a tool's name as String writes it.
func ParseServerTool(name string) (ServerTool, bool) {
	for t, n := range serverToolNames {
		if n == name {
			return ServerTool(t), true
		}
	}
	return 0, false
}

// ServerToolNames lists the tools' names, for messages.
func ServerToolNames() string { return strings.Join(serverToolNames[:], ", ") }

// MaxToolUses bounds every count of one tool's uses the gateway reads, declared by a
// client or reported by an upstream: an upstream cannot overflow the price arithmetic,
// and a client's max_uses of 10^18 is reserved as this (which, at any price, no budget
// covers). No provider allows nearly as many uses in one request.
const MaxToolUses = 1_000_000

// ToolUses counts uses per server tool.
type ToolUses [NumServerTools]int64

// IsZero reports no use of any tool.
func (u ToolUses) IsZero() bool { return u == ToolUses{} }

// Total is every tool's uses together.
func (u ToolUses) Total() (n int64) {
	for _, v := range u {
		n += v
	}
	return n
}

// add counts n more uses of t, at most MaxToolUses.
func (u *ToolUses) add(t ServerTool, n int64) {
	if n > 0 {
		u[t] = min(u[t]+min(n, MaxToolUses), MaxToolUses)
	}
}

// AppendJSON appends the counts as a JSON object of the tools used, in the tools' order:
// {"web_search":3}; {} for none.
func (u ToolUses) AppendJSON(dst []byte) []byte {
	dst = append(dst, '{')
	first := true
	for t, n := range u {
		if n == 0 {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, '"')
		dst = append(dst, serverToolNames[t]...)
		dst = append(dst, '"', ':')
		dst = strconv.AppendInt(dst, n, 10)
	}
	return append(dst, '}')
}

// MarshalJSON writes AppendJSON's object.
func (u ToolUses) MarshalJSON() ([]byte, error) { return u.AppendJSON(nil), nil }

// UnmarshalJSON reads AppendJSON's object; tools it does not know are left out, counts
// are held to MaxToolUses.
func (u *ToolUses) UnmarshalJSON(b []byte) error {
	*u = ToolUses{}
	gjson.ParseBytes(b).ForEach(func(k, v gjson.Result) bool {
		if t, ok := ParseServerTool(k.Str); ok {
			u.add(t, v.Int())
		}
		return true
	})
	return nil
}

// ToolAllowance is the most use a request may make of server-side tools.
type ToolAllowance struct {
	// Uses is the most uses of each tool: its declared max_uses (at most MaxToolUses),
	// else the default the caller gave, for each tool the request declares.
	Uses ToolUses
	// Total, when positive, bounds all of Uses together (Responses' max_tool_calls).
	Total int64
}

// ServerTools is the use a request may make of server-side tools: for each server tool
// it declares, its own max_uses where the shape has one (Messages' web search and web
// fetch), else defaultUses; Messages' mcp_servers count defaultUses each. Responses'
// max_tool_calls bounds all of them together. A request that declares none may use none.
func (p *ParsedRequest) ServerTools(op Operation, defaultUses int64) ToolAllowance {
	a, _ := p.serverTools(op.Kind, defaultUses)
	return a
}

// serverTools reads the tools a request declares. The error is the 400 for a declared
// count a client's parser and an upstream's could read differently: a max_uses or
// max_tool_calls that is not a positive integer, one written twice in one tool, or a
// key that matches max_uses only without regard to case.
func (p *ParsedRequest) serverTools(kind Kind, defaultUses int64) (ToolAllowance, *APIError) {
	var a ToolAllowance
	defaultUses = min(max(defaultUses, 0), MaxToolUses)
	switch kind {
	case KindMessages:
		var e *APIError
		eachElement(p.raw(fieldTools), func(i int, tool []byte) bool {
			var t ServerTool
			var uses int64
			t, uses, e = messagesServerTool(i, tool)
			if e != nil {
				return false
			}
			if t < NumServerTools {
				if uses == 0 {
					uses = defaultUses
				}
				a.Uses.add(t, uses)
			}
			return true
		})
		if e != nil {
			return a, e
		}
		eachElement(p.raw(fieldMCPServers), func(int, []byte) bool {
			a.Uses.add(ToolMCP, defaultUses)
			return true
		})
	case KindResponses:
		eachElement(p.raw(fieldTools), func(_ int, tool []byte) bool {
			if t, ok := responsesServerTool(tool); ok {
				a.Uses.add(t, defaultUses)
			}
			return true
		})
		calls, set, e := positiveIntParam(p.get(fieldMaxToolCalls), "max_tool_calls", MaxToolUses)
		if e != nil {
			return a, e
		}
		if set {
			a.Total = calls
		}
	}
	return a, nil
}

// messagesServerTool reads the tool at tools[i] of a Messages request: which server
// tool it is (NumServerTools for a client tool) and its max_uses (0: not given). The
// type is versioned (web_search_20250305); client tools have no type, or "custom".
func messagesServerTool(i int, tool []byte) (ServerTool, int64, *APIError) {
	w, ok := walkObject(tool)
	if !ok {
		return NumServerTools, 0, nil
	}
	t := ServerTool(NumServerTools)
	var maxUses []byte
	field := "tools." + strconv.Itoa(i) + ".max_uses"
	for {
		key, s, e, ok := w.next()
		if !ok {
			break
		}
		switch k := keyText(key); {
		case k == "type":
			typ := stringText(tool[s:e])
			switch {
			case strings.HasPrefix(typ, "web_search_"):
				t = ToolWebSearch
			case strings.HasPrefix(typ, "web_fetch_"):
				t = ToolWebFetch
			}
		case k == "max_uses":
			if maxUses != nil {
				return t, 0, duplicateError(FamilyB, field)
			}
			maxUses = tool[s:e]
		case strings.EqualFold(k, "max_uses"):
			return t, 0, InvalidParam(FamilyB, field, "'%s' differs from the field 'max_uses' only in case; field names are case-sensitive", k)
		}
	}
	if t == NumServerTools || maxUses == nil || string(maxUses) == "null" {
		return t, 0, nil
	}
	n, ok := positiveInt(gjson.Parse(view(maxUses)))
	if !ok {
		return t, 0, InvalidParam(FamilyB, field, "%s: must be a positive integer", field)
	}
	return t, min(n, MaxToolUses), nil
}

// responsesServerTool reads which server tool a Responses tool is, by its type: any of
// its `type` members, should it have several (parsers differ on which one wins).
func responsesServerTool(tool []byte) (ServerTool, bool) {
	w, ok := walkObject(tool)
	if !ok {
		return 0, false
	}
	for {
		key, s, e, ok := w.next()
		if !ok {
			return 0, false
		}
		if keyText(key) == "type" {
			if t, ok := responsesToolType(stringText(tool[s:e])); ok {
				return t, true
			}
		}
	}
}

// responsesToolType is the server tool a Responses tool type names.
func responsesToolType(typ string) (ServerTool, bool) {
	switch {
	case typ == "web_search" || typ == "web_search_preview" ||
		strings.HasPrefix(typ, "web_search_2") || strings.HasPrefix(typ, "web_search_preview_2"):
		return ToolWebSearch, true
	case typ == "file_search":
		return ToolFileSearch, true
	case typ == "code_interpreter":
		return ToolCodeInterpreter, true
	case typ == "image_generation":
		return ToolImageGeneration, true
	case typ == "mcp":
		return ToolMCP, true
	}
	return 0, false
}

// responsesToolCall is the server tool an output item of a Responses answer is a use
// of, by its type.
func responsesToolCall(typ string) (ServerTool, bool) {
	switch typ {
	case "web_search_call":
		return ToolWebSearch, true
	case "file_search_call":
		return ToolFileSearch, true
	case "code_interpreter_call":
		return ToolCodeInterpreter, true
	case "image_generation_call":
		return ToolImageGeneration, true
	case "mcp_call":
		return ToolMCP, true
	}
	return 0, false
}

// countResponsesToolCalls counts the server tool calls among the items of an output
// array, reading each item's type and passing over the rest.
func countResponsesToolCalls(output []byte) (u ToolUses) {
	eachElement(output, func(_ int, item []byte) bool {
		if v, ok := member(item, "type"); ok {
			if t, ok := responsesToolCall(stringText(v)); ok {
				u.add(t, 1)
			}
		}
		return true
	})
	return u
}

// eachElement calls fn with each element of the array b holds, in order, until fn
// returns false; nothing for any other value. One pass over the array's bytes.
func eachElement(b []byte, fn func(i int, elem []byte) bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return
	}
	i = skipSpace(b, i+1)
	for n := 0; i < len(b) && b[i] != ']'; n++ {
		end := skipJSONValue(b, i)
		if end < 0 || !fn(n, b[i:end]) {
			return
		}
		i = skipSpace(b, end)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
}

// mergeMessagesToolUse takes the counts of a Messages usage.server_tool_use object:
// web_search_requests and web_fetch_requests, cumulative, so the latest stands; a count
// it leaves out keeps the earlier one.
func (o *Observation) mergeMessagesToolUse(u gjson.Result) {
	s := u.Get("server_tool_use")
	if !s.IsObject() {
		return
	}
	f := gjson.GetMany(s.Raw, "web_search_requests", "web_fetch_requests")
	for i, t := range []ServerTool{ToolWebSearch, ToolWebFetch} {
		if f[i].Exists() {
			o.Usage.ToolUses[t] = 0
			o.Usage.ToolUses.add(t, f[i].Int())
		}
	}
}
