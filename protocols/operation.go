package protocols

import (
	"net/url"
	"strings"
)

// Family is a protocol family. Its token is the one used on the wire in GET /v1/models
// and in configuration.
type Family uint8

const (
	// FamilyA is the chat-completions / responses family.
	FamilyA Family = iota + 1
	// FamilyB is the message family.
	FamilyB
)

// Token is the protocol token of the family: "family_a" or "family_b".
func (f Family) Token() string {
	switch f {
	case FamilyA:
		return "family_a"
	case FamilyB:
		return "family_b"
	}
	return ""
}

func (f Family) String() string { return f.Token() }

// ParseFamily turns a protocol token into a Family.
func ParseFamily(token string) (Family, bool) {
	switch token {
	case "family_a":
		return FamilyA, true
	case "family_b":
		return FamilyB, true
	}
	return 0, false
}

// Kind names one operation the gateway serves.
type Kind uint8

const (
	KindUnknown Kind = iota
	// KindModels is GET /v1/models (and GET /v1/models/{id}).
	KindModels
	// KindChat is POST /v1/chat/completions.
	KindChat
	// KindResponses is POST /v1/responses.
	KindResponses
	// KindResponsesInputTokens is POST /v1/responses/input_tokens.
	KindResponsesInputTokens
	// KindResponsesCompact is POST /v1/responses/compact.
	KindResponsesCompact
	// KindMessages is POST /v1/messages.
	KindMessages
	// KindMessagesCountTokens is POST /v1/messages/count_tokens.
	KindMessagesCountTokens
	// KindStatefulResponses is any id-based operation under /v1/responses/ (retrieve,
	// delete, cancel, input_items): out of scope, answered 501.
	KindStatefulResponses
	// KindResponsesWebSocket is the WebSocket upgrade on GET /v1/responses: not served;
	// clients fall back to HTTP.
	KindResponsesWebSocket
)

var kindNames = [...]string{
	KindUnknown:              "unknown",
	KindModels:               "models",
	KindChat:                 "chat.completions",
	KindResponses:            "responses",
	KindResponsesInputTokens: "responses.input_tokens",
	KindResponsesCompact:     "responses.compact",
	KindMessages:             "messages",
	KindMessagesCountTokens:  "messages.count_tokens",
	KindStatefulResponses:    "responses.stateful",
	KindResponsesWebSocket:   "responses.websocket",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Operation is what a request asks for: its family and its kind.
type Operation struct {
	Family Family
	Kind   Kind
	// ModelID is set for GET /v1/models/{id}; ids may themselves contain slashes.
	ModelID string
}

// AllowedMethods is the Allow header of the operation's path.
func (o Operation) AllowedMethods() string {
	if o.Kind == KindModels {
		return "GET"
	}
	return "POST"
}

// FamilyOfPath is the family whose envelope answers errors on a path, known or not:
// Family B under /v1/messages, Family A elsewhere.
func FamilyOfPath(path string) Family {
	if strings.HasPrefix(path, "/v1/messages") {
		return FamilyB
	}
	return FamilyA
}

// Generates reports whether the operation produces model output (and so may stream and
// carries usage worth metering), as opposed to a token count.
func (o Operation) Generates() bool { return o.Kind.generates() }

func (k Kind) generates() bool {
	switch k {
	case KindChat, KindResponses, KindResponsesCompact, KindMessages:
		return true
	}
	return false
}

// SubOperation reports an auxiliary operation of a generation endpoint (token counts,
// compaction) that an upstream may not offer even where it serves the generation itself.
func (o Operation) SubOperation() bool {
	switch o.Kind {
	case KindResponsesInputTokens, KindResponsesCompact, KindMessagesCountTokens:
		return true
	}
	return false
}

// operationPaths are the exact client paths of the operations sent to a candidate.
var operationPaths = map[Kind]string{
	KindChat:                 "/v1/chat/completions",
	KindResponses:            "/v1/responses",
	KindResponsesInputTokens: "/v1/responses/input_tokens",
	KindResponsesCompact:     "/v1/responses/compact",
	KindMessages:             "/v1/messages",
	KindMessagesCountTokens:  "/v1/messages/count_tokens",
}

// UpstreamPath is the path the operation has on an upstream, relative to the candidate's
// base URL. It comes from the operation alone, never from what the client sent. Family A
// bases conventionally end in the version segment (".../v1"), Family B bases do not, so
// the version segment is dropped for Family A only.
func (o Operation) UpstreamPath() string {
	p := operationPaths[o.Kind]
	if o.Family == FamilyA {
		return strings.TrimPrefix(p, "/v1")
	}
	return p
}

// Classify maps a method and the request's path as sent (escaped, no query string) to an
// operation. Only an operation's exact path names it: a trailing slash, an encoded
// character or a dot segment is a path the gateway does not serve (ok false), so what
// the gateway classified is always what the upstream is asked for. A known path with the
// wrong method is reported through methodOK=false so the caller can answer 405 in the
// right family's envelope.
func Classify(method, escapedPath string, websocketUpgrade bool) (op Operation, ok, methodOK bool) {
	p := escapedPath
	switch p {
	case "/v1/chat/completions":
		return Operation{Family: FamilyA, Kind: KindChat}, true, method == "POST"
	case "/v1/responses":
		if method == "GET" && websocketUpgrade {
			return Operation{Family: FamilyA, Kind: KindResponsesWebSocket}, true, true
		}
		return Operation{Family: FamilyA, Kind: KindResponses}, true, method == "POST"
	case "/v1/responses/input_tokens":
		return Operation{Family: FamilyA, Kind: KindResponsesInputTokens}, true, method == "POST"
	case "/v1/responses/compact":
		return Operation{Family: FamilyA, Kind: KindResponsesCompact}, true, method == "POST"
	case "/v1/messages":
		return Operation{Family: FamilyB, Kind: KindMessages}, true, method == "POST"
	case "/v1/messages/count_tokens":
		return Operation{Family: FamilyB, Kind: KindMessagesCountTokens}, true, method == "POST"
	case "/v1/models":
		return Operation{Family: FamilyA, Kind: KindModels}, true, method == "GET" || method == "HEAD"
	}
	if rest, found := strings.CutPrefix(p, "/v1/responses/"); found && idSegments(rest) {
		// Every other path under /v1/responses/ is id-based (retrieve, cancel,
		// input_items) and needs server-side state; it is answered 501, never forwarded.
		return Operation{Family: FamilyA, Kind: KindStatefulResponses}, true, true
	}
	if rest, found := strings.CutPrefix(p, "/v1/models/"); found && rest != "" && !strings.HasSuffix(rest, "/") {
		// Served from the catalog, never forwarded. SDKs escape the id (a slash in it
		// arrives as %2F); ids may themselves contain slashes.
		id, err := url.PathUnescape(rest)
		if err != nil {
			return Operation{}, false, false
		}
		return Operation{Family: FamilyA, Kind: KindModels, ModelID: id}, true, method == "GET" || method == "HEAD"
	}
	return Operation{}, false, false
}

// idSegments reports a path made of plain segments (ids and operation names): no empty
// segment (so no trailing or doubled slash), no dot segment, no escape.
func idSegments(rest string) bool {
	for seg := range strings.SplitSeq(rest, "/") {
		if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "%") {
			return false
		}
	}
	return rest != ""
}
