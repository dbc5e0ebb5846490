package relay

import (
	"sync"
	"time"
)

// BodyMemory is the gateway's ceiling on the request-body bytes that all requests hold at
// once. Every body buffer is taken from it before it is allocated, a larger one before a
// body grows into it, and given back once nothing reads the buffer any more. Without it,
// connections × the largest body could be promised away by headers alone. A nil
// BodyMemory has no ceiling.
type BodyMemory struct {
	limit int64
	wait  time.Duration // how long a body waits for room before it is refused

	mu    sync.Mutex
	held  int64
	freed chan struct{} // closed when bytes come back; made only while someone waits
}

// DefaultBodyMemoryWait is how long a body waits for room under the ceiling before it
// gets ErrBodyMemory: long enough to ride out a burst, short enough that a client is not
// left hanging on a gateway that is full.
const DefaultBodyMemoryWait = time.Second

// NewBodyMemory is a ceiling of limit bytes, whose bodies wait up to wait for room.
func NewBodyMemory(limit int64, wait time.Duration) *BodyMemory {
	return &BodyMemory{limit: limit, wait: wait}
}

// Take takes n bytes, waiting for others to give bytes back when there is no room; false
// once the wait is over without room (never waiting for more than the whole ceiling).
func (m *BodyMemory) Take(n int64) bool {
	if m == nil {
		return true
	}
	var timeout <-chan time.Time
	for {
		m.mu.Lock()
		if m.held+n <= m.limit {
			m.held += n
			m.mu.Unlock()
			return true
		}
		if n > m.limit || m.wait <= 0 {
			m.mu.Unlock()
			return false
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
			return false
		}
	}
}

// Give gives back n bytes taken before, and wakes the bodies waiting for room.
func (m *BodyMemory) Give(n int64) {
	if m == nil || n == 0 {
		return
	}
	m.mu.Lock()
	m.held = max(0, m.held-n) // never below nothing, even if a bug gave bytes back twice
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

// Limit is the ceiling in bytes.
func (m *BodyMemory) Limit() int64 { return m.limit }
