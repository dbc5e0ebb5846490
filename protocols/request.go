package protocols

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// view reads body as a string without copying it. The gateway never modifies a request
// body after reading it, so results that point into it stay valid.
func view(body []byte) string { return unsafe.String(unsafe.SliceData(body), len(body)) }

// getView is gjson.GetBytes without its defensive copy of the value found: looking up
// `messages` in a 1 MB body must not copy the messages.
func getView(body []byte, path string) gjson.Result { return gjson.Get(view(body), path) }

// ParsedRequest is a request body whose top-level fields were located in one pass. The
// checks and the rewrite then read them without scanning the body again.
type ParsedRequest struct {
	Body []byte
	// Where each field the gateway reads lies in Body; the zero span is a field the body
	// lacks. Spans rather than parsed values: a streamed answer holds its request to the
	// end, and a parsed value per field would be a kilobyte a stream.
	at [readFields]span
}

// readField names a top-level field the gateway reads.
type readField uint8

const (
	fieldModel readField = iota
	fieldMessages
	fieldStream
	fieldStreamOptions
	fieldMaxTokens
	fieldThinking
	fieldBackground
	fieldPreviousResponseID
	fieldConversation
	fieldPromptCacheKey
	fieldMaxCompletionTokens
	fieldMaxOutputTokens
	fieldChoices
	fieldTools
	fieldMCPServers
	fieldMaxToolCalls
	readFields
)

// readFieldNames are the fields' names in a body.
var readFieldNames = [readFields]string{
	fieldModel: "model", fieldMessages: "messages", fieldStream: "stream", fieldStreamOptions: "stream_options",
	fieldMaxTokens: "max_tokens", fieldThinking: "thinking", fieldBackground: "background",
	fieldPreviousResponseID: "previous_response_id", fieldConversation: "conversation",
	fieldPromptCacheKey: "prompt_cache_key", fieldMaxCompletionTokens: "max_completion_tokens",
	fieldMaxOutputTokens: "max_output_tokens", fieldChoices: "n",
	fieldTools: "tools", fieldMCPServers: "mcp_servers", fieldMaxToolCalls: "max_tool_calls",
}

// locatedField is the field named key, if a ParsedRequest locates it.
func locatedField(key string) (readField, bool) {
	for f, name := range &readFieldNames { // not a copy of the array per member
		if key == name {
			return readField(f), true
		}
	}
	return 0, false
}

// span is where a value lies in a body.
type span struct{ start, end int }

// in reads the value at s in body; Index locates it there.
func (s span) in(body []byte) gjson.Result {
	if s.end == 0 {
		return gjson.Result{}
	}
	v := gjson.Parse(view(body[s.start:s.end]))
	v.Index = s.start
	return v
}

// get reads field f.
func (p *ParsedRequest) get(f readField) gjson.Result { return p.at[f].in(p.Body) }

// raw is field f's value as written; nil when the body lacks it.
func (p *ParsedRequest) raw(f readField) []byte {
	s := p.at[f]
	if s.end == 0 {
		return nil
	}
	return p.Body[s.start:s.end]
}

// ParseRequest reads body with the one bounded scan every request gets (one JSON object,
// valid UTF-8, nesting within MaxNesting, no key twice where the gateway reads keys) and
// locates the fields the gateway reads. It does not decode anything else.
func ParseRequest(family Family, body []byte) (*ParsedRequest, *APIError) {
	r := requestReader{family: family, p: &ParsedRequest{Body: body}}
	_, err := r.read(body, true)
	if err != nil {
		return nil, err
	}
	return r.p, nil
}

// requestReader is ParseRequest's reading of a body, able to take it in pieces as they
// arrive: each call reads on from where the last one stopped.
type requestReader struct {
	family  Family
	p       *ParsedRequest
	scanner objectScanner
	keys    keySet
	// The first problem of each kind, reported once the whole body scanned clean.
	duplicate, caseVariant string
	readName, innerDup     string
	// doomed: the body is known bad before its end; it is not forwarded.
	doomed bool
}

// read takes the body so far, final when it is all of it. It answers done once the whole
// body was read and found good, or the error it is refused with; neither until final.
func (r *requestReader) read(body []byte, final bool) (done bool, _ *APIError) {
	done, fault := r.scanner.scan(body, final, func(key string, start, end int) { r.member(body, key, start, end) })
	if !final {
		r.doomed = r.doomed || fault != nil
		return false, nil
	}
	family := r.family
	switch {
	case fault != nil && fault.kind == faultNotObject:
		return false, InvalidParam(family, "", "the request body must be a JSON object")
	case fault != nil:
		return false, InvalidParam(family, "", "the request body was refused: %s", fault.Error())
	case r.duplicate != "":
		return false, duplicateError(family, r.duplicate)
	case r.caseVariant != "":
		return false, InvalidParam(family, r.caseVariant, "'%s' differs from the field '%s' only in case; field names are case-sensitive", r.caseVariant, r.readName)
	case r.innerDup != "":
		return false, duplicateError(family, r.innerDup)
	}
	r.p.Body = body
	return done, nil
}

// member records one top-level member, body[start:end] being its value.
func (r *requestReader) member(body []byte, key string, start, end int) {
	p := r.p
	// Parsers disagree on which copy of a duplicated key wins (first, last, or an
	// error), so the gateway could check one value while the upstream acts on another.
	if r.keys.add(key) && r.duplicate == "" {
		r.duplicate = key
	}
	if name, ok := readFieldFolded(key); ok && name != key && r.caseVariant == "" {
		r.caseVariant, r.readName = key, name
	}
	if f, ok := locatedField(key); ok {
		p.at[f] = span{start, end}
	}
	// The objects whose inner keys the gateway reads or rewrites get the same rule.
	switch key {
	case "stream_options", "thinking", "reasoning":
		if body[start] == '{' && r.innerDup == "" {
			var inner keySet
			_ = scanObject(body[start:end], func(k string, _, _ int) {
				if inner.add(k) && r.innerDup == "" {
					r.innerDup = key + "." + k
				}
			})
		}
	}
}

// fieldsRead are the top-level fields the gateway reads or rewrites in some shape: those
// a ParsedRequest locates, and `reasoning` and `input`, which it does not.
var fieldsRead = slices.Concat(readFieldNames[:], []string{"reasoning", "input"})

// readFieldFolded returns the field the gateway reads that key equals without regard to
// case. A key that matches one only that way is one that a case-insensitive parser would
// act on while the gateway would not. The rule is Go's encoding/json (v1, fold.go): two
// names match when bytes.EqualFold holds, which is strings.EqualFold's simple Unicode
// folding, so `max_completion_tokenſ` (U+017F) and a Kelvin sign (U+212A) for `k` match.
func readFieldFolded(key string) (string, bool) {
	// Simple folding maps each rune to one rune, so only a key with as many runes as a
	// name can fold to it; a rune takes at most utf8.UTFMax bytes, which bounds the count.
	if len(key) > utf8.UTFMax*maxReadNameRunes {
		return "", false
	}
	if n := utf8.RuneCountInString(key); n > maxReadNameRunes || readNameRuneCounts&(1<<n) == 0 {
		return "", false
	}
	for _, name := range fieldsRead {
		if strings.EqualFold(key, name) {
			return name, true
		}
	}
	return "", false
}

// maxReadNameRunes is the longest name in fieldsRead; readNameRuneCounts has bit n set
// when a name is n runes long (the names are ASCII: runes are bytes).
const maxReadNameRunes = 63

var readNameRuneCounts = func() (counts uint64) {
	for _, name := range fieldsRead {
		if len(name) > maxReadNameRunes {
			panic("protocols: a read field's name is longer than maxReadNameRunes")
		}
		counts |= 1 << len(name)
	}
	return counts
}()

func duplicateError(family Family, key string) *APIError {
	return InvalidParam(family, key, "'%s' appears more than once in the request body; send each field once", key)
}

// Model returns the requested service model, or the 400 for a missing or malformed one.
func (p *ParsedRequest) Model(family Family) (string, *APIError) {
	switch m := p.get(fieldModel); {
	case !m.Exists():
		return "", InvalidParam(family, "model", "missing required field 'model'; see GET /v1/models for the models you can call")
	case m.Type != gjson.String || m.Str == "":
		return "", InvalidParam(family, "model", "'model' must be a non-empty string naming a model from GET /v1/models")
	default:
		// Str may point into the body; the id outlives the request in logs and metering.
		return string([]byte(m.Str)), nil
	}
}

// conversationHeaders carry a conversation id in what coding agents send: Claude Code's
// session header and Codex's session header (Codex also puts it in prompt_cache_key).
var conversationHeaders = []string{"X-Claude-Code-Session-Id", "Session-Id"}

// ConversationID returns the id of the conversation a request belongs to, or "" when it
// carries none. extraHeader, when set, is checked first: an operator's own header. p may
// be nil, for a body not read yet: then only the headers count.
func ConversationID(p *ParsedRequest, h http.Header, extraHeader string) string {
	if extraHeader != "" {
		if v := h.Get(extraHeader); v != "" {
			return v
		}
	}
	for _, name := range conversationHeaders {
		if v := h.Get(name); v != "" {
			return v
		}
	}
	if p == nil {
		return ""
	}
	if key := p.get(fieldPromptCacheKey); key.Type == gjson.String && key.Str != "" {
		return "pck:" + key.Str
	}
	return ""
}

// Streamed reports whether the client asked for a stream.
func (p *ParsedRequest) Streamed() bool { return p.get(fieldStream).Type == gjson.True }

// Upstream prepares the body an upstream receives: the client's bytes with `model` set
// to the upstream name. For a streamed chat completion that did not ask for usage, it
// also asks for usage (metering needs it) and reports injectedUsage so that the
// usage-only chunk can be removed before the client sees it; that rare case costs one copy.
//
// declaredCap is the model's declared output cap (zero for none). A generation request
// that sets no cap is sent with it, in the shape's own cap field (chat completions'
// max_completion_tokens, responses' max_output_tokens; messages always carries
// max_tokens): the reservation admission priced is then the one the upstream enforces.
func (p *ParsedRequest) Upstream(op Operation, upstreamModel string, declaredCap int64) (body Splice, injectedUsage bool) {
	src, model, injectedUsage := ShapeOf(op.Kind).requestBody(p)
	value := AppendJSONString(nil, upstreamModel)
	if !model.Exists() || model.Index <= 0 {
		// Not reachable for a body that passed ParseRequest; kept so the body stays whole.
		out, err := sjson.SetBytes(src, "model", upstreamModel)
		if err != nil {
			return Splice{parts: [5][]byte{src}}, injectedUsage
		}
		return Splice{parts: [5][]byte{out}}, injectedUsage
	}
	setModel := edit{model.Index, model.Index + len(model.Raw), value}
	if setCap, ok := p.declaredCapEdit(op, src, declaredCap); ok {
		return spliceTwo(src, setModel, setCap), injectedUsage
	}
	return SpliceAt(src, setModel.start, setModel.end, setModel.value), injectedUsage
}

// declaredCapEdit is the edit of src (the body to send) that gives a request setting no
// output cap the model's declared one: a null cap field's value replaced, or the field
// added at the end of the object.
func (p *ParsedRequest) declaredCapEdit(op Operation, src []byte, declaredCap int64) (edit, bool) {
	if declaredCap <= 0 {
		return edit{}, false
	}
	caps := ShapeOf(op.Kind).outputCaps(p) // none for a token count
	if _, set := p.OutputCap(op); set || len(caps) == 0 {
		return edit{}, false
	}
	field := caps[0] // the shape's own field comes first
	n := strconv.AppendInt(nil, declaredCap, 10)
	if field.value.Exists() { // null: a second member of the same name would be a duplicate
		at := field.value
		if !sameBytes(src, p.Body) {
			at = getView(src, field.name) // the body was copied to ask for usage
		}
		if at.Index <= 0 {
			return edit{}, false
		}
		return edit{at.Index, at.Index + len(at.Raw), n}, true
	}
	return addMember(src, field.name, n)
}

// BodyScan is ParseRequest for a body that arrives in pieces: each Read goes on from
// where the last one stopped, and tells how much of the body is known to be a good
// beginning. The bytes given must stay as they were: only more may follow.
type BodyScan struct{ r requestReader }

// NewBodyScan starts the scan of a body of the family's.
func NewBodyScan(family Family) *BodyScan {
	return &BodyScan{r: requestReader{family: family, p: &ParsedRequest{}}}
}

// Read scans body, the bytes so far, final when it is all of them. Once final, it gives
// the body parsed, or the error it is refused with.
func (s *BodyScan) Read(body []byte, final bool) (*ParsedRequest, *APIError) {
	_, err := s.r.read(body, final)
	if !final || err != nil {
		return nil, err
	}
	return s.r.p, nil
}

// Doomed reports whether the body is known bad before its end.
func (s *BodyScan) Doomed() bool { return s.r.doomed }

// Safe is how far the body is known to be a good beginning of the object, short of its
// closing brace: what may be forwarded before the rest has arrived.
func (s *BodyScan) Safe() int { return s.r.scanner.safe }

// Resumes is where the next Read goes on from: a token cut at the end is read again.
func (s *BodyScan) Resumes() int { return s.r.scanner.i }

// Model is the body's top-level model as a string, once the bytes so far hold it whole,
// and where its value (quotes included) lies in body.
func (s *BodyScan) Model(body []byte) (model string, start, end int, ok bool) {
	m := s.r.p.at[fieldModel].in(body)
	if m.Index > 0 && m.Raw != "" && m.Raw[0] == '"' {
		return m.Str, m.Index, m.Index + len(m.Raw), true
	}
	return "", 0, 0, false
}
