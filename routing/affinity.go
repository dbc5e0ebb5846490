package routing

import (
	"container/list"
	"sync"
	"time"

	"github.com/switchyard-gw/switchyard/protocols"
)

// ConversationKey is the affinity table's key for a conversation of a model on one family:
// the same conversation id on another model or family is another conversation.
func ConversationKey(model string, family protocols.Family, conversationID string) string {
	return model + "\x00" + family.Token() + "\x00" + conversationID
}

// Affinity remembers which candidate served each conversation last. Memory is bounded
// by a size limit (least recently used entries go first) and an idle expiry.
type Affinity struct {
	mu      sync.Mutex
	ttl     time.Duration
	limit   int
	entries map[string]*list.Element
	lru     *list.List // front: most recently used
}

type affinityEntry struct {
	key       string
	candidate string // the candidate's Identity
	seen      time.Time
}

// NewAffinity keeps at most limit conversations, each for ttl after it was last used.
func NewAffinity(limit int, ttl time.Duration) *Affinity {
	return &Affinity{ttl: ttl, limit: limit, entries: make(map[string]*list.Element), lru: list.New()}
}

// Get returns the identity of the candidate that served the conversation last.
func (a *Affinity) Get(key string, now time.Time) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	el, ok := a.entries[key]
	if !ok {
		return "", false
	}
	e := el.Value.(*affinityEntry)
	if now.Sub(e.seen) > a.ttl {
		a.remove(el)
		return "", false
	}
	// A read is a use: it keeps the conversation from expiry and from eviction.
	if now.After(e.seen) {
		e.seen = now
	}
	a.lru.MoveToFront(el)
	return e.candidate, true
}

// Set records that the candidate served the conversation.
func (a *Affinity) Set(key, candidate string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if el, ok := a.entries[key]; ok {
		e := el.Value.(*affinityEntry)
		e.candidate, e.seen = candidate, now
		a.lru.MoveToFront(el)
		return
	}
	a.entries[key] = a.lru.PushFront(&affinityEntry{key: key, candidate: candidate, seen: now})
	// Evict from the back: the least recently used, and anything expired on the way.
	for a.lru.Len() > a.limit {
		a.remove(a.lru.Back())
	}
	for back := a.lru.Back(); back != nil && now.Sub(back.Value.(*affinityEntry).seen) > a.ttl; back = a.lru.Back() {
		a.remove(back)
	}
}

// Len is the number of conversations remembered.
func (a *Affinity) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lru.Len()
}

func (a *Affinity) remove(el *list.Element) {
	delete(a.entries, el.Value.(*affinityEntry).key)
	a.lru.Remove(el)
}
