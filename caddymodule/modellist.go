package caddymodule

import (
	"encoding/json"
	"time"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/routing"
)

// modelEntry is one element of GET /v1/models: the fields both families' SDKs read
// (Family A: id, object, created, owned_by; Family B: id, type, display_name, created_at)
// plus the protocols and capabilities the specification adds, and the model's limits
// when the operator declared them.
//
// The limits are given twice, each pair read by different clients: context_window and
// max_output_tokens under the names the Caddyfile, the console and the client set-ups
// use (and OpenAI-shaped tools that read model metadata, Codex's catalog among them,
// call the window context_window); max_input_tokens and max_tokens under the names of
// Family B's native Models API, which both official Family B SDKs decode into typed
// fields and which Claude Code's model-capability reader takes from GET /v1/models/{id}.
// Family B's max_input_tokens is the whole window, so it equals context_window.
type modelEntry struct {
	ID           string          `json:"id"`
	Object       string          `json:"object"`
	Type         string          `json:"type"`
	Created      int64           `json:"created"`
	CreatedAt    string          `json:"created_at"`
	OwnedBy      string          `json:"owned_by"`
	DisplayName  string          `json:"display_name"`
	Protocols    []string        `json:"protocols"`
	Capabilities map[string]bool `json:"capabilities"`

	ContextWindow   int64 `json:"context_window,omitempty"`
	MaxOutputTokens int64 `json:"max_output_tokens,omitempty"`
	MaxInputTokens  int64 `json:"max_input_tokens,omitempty"`
	MaxTokens       int64 `json:"max_tokens,omitempty"`
}

// modelList holds each model's entry rendered once per configuration; a request only
// concatenates the entries its key may see.
type modelList struct {
	ids     []string
	entries map[string][]byte
}

func newModelList(c *routing.Catalog) *modelList {
	l := &modelList{entries: map[string][]byte{}}
	for _, m := range c.Models() {
		b, _ := json.Marshal(modelEntry{
			ID: m.ID, Object: "model", Type: "model",
			Created: m.Created.Unix(), CreatedAt: m.Created.Format(time.RFC3339),
			OwnedBy: m.OwnedBy, DisplayName: m.DisplayName,
			Protocols: m.ProtocolTokens(), Capabilities: m.CapabilityFlags(),
			ContextWindow: m.ContextWindow, MaxOutputTokens: m.MaxOutputTokens,
			MaxInputTokens: m.ContextWindow, MaxTokens: m.MaxOutputTokens,
		})
		l.ids = append(l.ids, m.ID)
		l.entries[m.ID] = b
	}
	return l
}

// list renders the envelope both SDKs parse: Family A's list object with Family B's
// pagination fields.
func (l *modelList) list(id *auth.Identity) []byte {
	out := make([]byte, 0, 64+len(l.ids)*256)
	out = append(out, `{"object":"list","data":[`...)
	var first, last string
	for _, mid := range l.ids {
		if !id.MayCall(mid) {
			continue
		}
		if first == "" {
			first = mid
		} else {
			out = append(out, ',')
		}
		last = mid
		out = append(out, l.entries[mid]...)
	}
	out = append(out, `],"has_more":false,"first_id":`...)
	out = appendIDOrNull(out, first)
	out = append(out, `,"last_id":`...)
	out = appendIDOrNull(out, last)
	return append(out, '}')
}

func appendIDOrNull(dst []byte, id string) []byte {
	if id == "" {
		return append(dst, "null"...)
	}
	b, _ := json.Marshal(id)
	return append(dst, b...)
}

// one returns a single model's entry, or nil when it does not exist for this key.
func (l *modelList) one(id *auth.Identity, modelID string) []byte {
	if !id.MayCall(modelID) {
		return nil
	}
	return l.entries[modelID]
}
