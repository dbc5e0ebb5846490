package relay

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-gw/switchyard/protocols"
)

// BodyMemory is the gateway's ceiling on the request-body bytes that all requests hold at
// once. Every body buffer is taken from it before it is allocated, a larger one before a
// body grows into it, and given back once nothing reads the buffer any more. Without it,
// connections × the largest body could be promised away by headers alone. A nil
// BodyMemory has no ceiling.
//
// No key's bodies hold more than a share of it (see SharePerKey): a key that uploads
// slowly, or many bodies at once, fills its own share and is refused, and every other key
// still finds room.
type BodyMemory struct {
	limit  int64
	perKey int64         // the most one key's bodies hold at once
	wait   time.Duration // how long a body waits for room before it is refused

	mu    sync.Mutex
	held  int64
	byKey map[string]int64 // what each key's bodies hold, for the keys holding any
	freed chan struct{}    // closed when bytes come back; made only while someone waits
}

// DefaultBodyMemoryWait is how long a body waits for room under the ceiling before it
// gets ErrBodyMemory: long enough to ride out a burst, short enough that a client is not
// left hanging on a gateway that is full.
const DefaultBodyMemoryWait = time.Second

// NewBodyMemory is a ceiling of limit bytes, whose bodies wait up to wait for room. One
// key's bodies may hold all of it until SharePerKey says otherwise.
func NewBodyMemory(limit int64, wait time.Duration) *BodyMemory {
	return &BodyMemory{limit: limit, perKey: limit, wait: wait}
}

// SharePerKey bounds what one key's bodies hold at once to n bytes (at most the whole
// ceiling); it returns m.
func (m *BodyMemory) SharePerKey(n int64) *BodyMemory {
	if n > 0 && n < m.limit {
		m.perKey = n
	}
	return m
}

// Take takes n bytes for no key in particular, waiting for others to give bytes back when
// there is no room; false once the wait is over without room (never waiting for more than
// the whole ceiling).
func (m *BodyMemory) Take(n int64) bool {
	ok, _ := m.take("", n)
	return ok
}

// Give gives back n bytes taken before by Take, and wakes the bodies waiting for room.
func (m *BodyMemory) Give(n int64) { m.give("", n) }

// take takes n bytes for key ("": none), as Take does; overShare reports a refusal that
// the key's share, not the ceiling, caused.
func (m *BodyMemory) take(key string, n int64) (ok, overShare bool) {
	if m == nil {
		return true, false
	}
	// A key is counted only when its share is less than the whole: else the ceiling is
	// the only bound, and a refusal is the ceiling's.
	shared := key != "" && m.perKey < m.limit
	var timeout <-chan time.Time
	for {
		m.mu.Lock()
		overShare = shared && m.byKey[key]+n > m.perKey
		if !overShare && m.held+n <= m.limit {
			m.held += n
			if shared {
				if m.byKey == nil {
					m.byKey = make(map[string]int64)
				}
				m.byKey[key] += n
			}
			m.mu.Unlock()
			return true, false
		}
		if n > m.limit || shared && n > m.perKey || m.wait <= 0 {
			m.mu.Unlock()
			return false, overShare
		}
		if m.freed == nil {
			m.freed = make(chan struct{})
		}
		freed := m.freed
		m.mu.Unlock()
		if timeout == nil {
			timer := time.NewTimer(m.wait)
			defer timer.Stop()
			timeout = timer.C
		}
		select {
		case <-freed:
		case <-timeout:
			return false, overShare
		}
	}
}

// give gives back n bytes that key's bodies took.
func (m *BodyMemory) give(key string, n int64) {
	if m == nil || n == 0 {
		return
	}
	m.mu.Lock()
	m.held = max(0, m.held-n) // never below nothing, even if a bug gave bytes back twice
	if key != "" && m.perKey < m.limit {
		// An entry lives only while its key holds bytes: the map is as small as the set
		// of keys with bodies in flight.
		if left := m.byKey[key] - n; left > 0 {
			m.byKey[key] = left
		} else {
			delete(m.byKey, key)
		}
	}
	if m.freed != nil {
		close(m.freed)
		m.freed = nil
	}
	m.mu.Unlock()
}

// Held is the bytes taken and not yet given back.
func (m *BodyMemory) Held() int64 {
	if m == nil {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.held
}

// HeldBy is the bytes key's bodies hold.
func (m *BodyMemory) HeldBy(key string) int64 {
	if m == nil {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.byKey[key]
}

// Limit is the ceiling in bytes.
func (m *BodyMemory) Limit() int64 { return m.limit }

// PerKey is the most one key's bodies may hold.
func (m *BodyMemory) PerKey() int64 { return m.perKey }

// For is one key's account on the ceiling, which the bodies of one request of that key
// take their bytes from (nil for a nil BodyMemory: no ceiling).
func (m *BodyMemory) For(key string) *BodyShare {
	if m == nil {
		return nil
	}
	return m.forInto(new(BodyShare), key)
}

// forInto is For with the account kept in s.
func (m *BodyMemory) forInto(s *BodyShare, key string) *BodyShare {
	if m == nil {
		return nil
	}
	s.m, s.key = m, key
	return s
}

// BodyShare is what one request's body takes from a BodyMemory, counted against the
// ceiling and against its key's share. A nil BodyShare has no ceiling. It is a
// protocols.Ceiling.
type BodyShare struct {
	m   *BodyMemory
	key string
	// overShare is set when a Take was refused because of the key's share.
	overShare atomic.Bool
}

// Take takes n bytes, perhaps after a wait; false when there is no room.
func (s *BodyShare) Take(n int64) bool {
	if s == nil {
		return true
	}
	ok, overShare := s.m.take(s.key, n)
	if !ok {
		s.overShare.Store(overShare)
	}
	return ok
}

// Give gives back n bytes taken before.
func (s *BodyShare) Give(n int64) {
	if s != nil {
		s.m.give(s.key, n)
	}
}

// Refusal is the client's error for a Take that was refused: its key's share is full
// (429), or the gateway's whole ceiling is (503).
func (s *BodyShare) Refusal(f protocols.Family) *protocols.APIError {
	if s != nil && s.overShare.Load() {
		return protocols.ErrKeyBodyMemory(f, s.m.perKey)
	}
	return protocols.ErrBodyMemory(f)
}
