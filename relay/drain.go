package relay

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// drainShards spreads the attempts a Drain watches over locks of their own, so that
// requests on different cores seldom meet on one.
const drainShards = 16

// Drain ends, when a stop's grace period is over, the attempts still running: a stream
// then ends with its family's error event, billed for what it carried, and a request
// whose answer had not begun is answered 503. One Drain serves all of a configuration's
// requests (Request.Drain). Watching an attempt costs a lock no other core is likely to
// hold and no allocation: the attempt's clock is itself the list entry.
type Drain struct {
	ended  atomic.Bool
	done   chan struct{} // closed by End
	shards [drainShards]drainShard
}

type drainShard struct {
	mu   sync.Mutex
	head *attemptClock
	_    [48]byte // a cache line of its own
}

// NewDrain returns a Drain that has not ended.
func NewDrain() *Drain { return &Drain{done: make(chan struct{})} }

// End ends every attempt watched now, and every one that starts after. It may be called
// more than once.
func (d *Drain) End() {
	if d.ended.Swap(true) {
		return
	}
	close(d.done)
	for i := range d.shards {
		s := &d.shards[i]
		s.mu.Lock()
		for c := s.head; c != nil; c = c.drainNext {
			c.drain()
		}
		s.mu.Unlock()
	}
}

// Ended reports whether End was called.
func (d *Drain) Ended() bool { return d.ended.Load() }

// watch has c's attempt ended by End, at once if End came already.
func (d *Drain) watch(c *attemptClock) {
	s := &d.shards[rand.Uint32()%drainShards]
	s.mu.Lock()
	if d.ended.Load() {
		s.mu.Unlock()
		c.drain()
		return
	}
	c.drainShard, c.drainNext, c.drainPrev = s, s.head, nil
	if s.head != nil {
		s.head.drainPrev = c
	}
	s.head = c
	s.mu.Unlock()
}

// unwatch forgets c once its attempt is over.
func (d *Drain) unwatch(c *attemptClock) {
	s := c.drainShard
	if s == nil {
		return
	}
	s.mu.Lock()
	if c.drainPrev != nil {
		c.drainPrev.drainNext = c.drainNext
	} else {
		s.head = c.drainNext
	}
	if c.drainNext != nil {
		c.drainNext.drainPrev = c.drainPrev
	}
	c.drainShard, c.drainNext, c.drainPrev = nil, nil, nil
	s.mu.Unlock()
}
