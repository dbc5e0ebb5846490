package limits

import (
	"context"
	"sync"
)

// NewMemory returns counters in this process's memory: for one gateway.
func NewMemory() Counters { return newMemory() }

// memory keeps the counters of each scope in a memScope with its own lock; an Ask locks
// the scopes it touches, always in the order of their ids, so that asks on overlapping
// scopes cannot deadlock.
type memory struct {
	mu     sync.RWMutex
	scopes map[Scope]*memScope
	nextID uint64
}

func newMemory() *memory { return &memory{scopes: make(map[Scope]*memScope)} }

type memScope struct {
	id      uint64
	mu      sync.Mutex
	rpm     bucket
	tpm     bucket
	slots   leases
	budgets map[budgetKey]*memBudget
}

type bucket struct {
	set   bool
	level float64
	at    int64 // µs
}

type budgetKey struct {
	period Period
	start  int64
}

type memBudget struct {
	seeded bool
	spent  int64
	held   leases
	end    int64
}

// leases are amounts held by request id until settled or past their deadline.
type leases struct {
	m    map[string]lease
	sum  int64
	next int64 // the earliest deadline; 0: none
}

type lease struct{ amount, deadline int64 }

func (ls *leases) add(id string, amount, deadline int64) {
	if ls.m == nil {
		ls.m = make(map[string]lease)
	}
	if old, ok := ls.m[id]; ok {
		ls.sum -= old.amount
	}
	ls.m[id] = lease{amount, deadline}
	ls.sum += amount
	if ls.next == 0 || deadline < ls.next {
		ls.next = deadline
	}
}

func (ls *leases) remove(id string) {
	if l, ok := ls.m[id]; ok {
		delete(ls.m, id)
		ls.sum -= l.amount
	}
}

// expire drops the leases past their deadline; a full scan only when the earliest one
// is due, which it is not while requests settle before their lease ends.
func (ls *leases) expire(now int64) {
	if ls.next == 0 || now < ls.next {
		return
	}
	ls.next = 0
	for id, l := range ls.m {
		if l.deadline <= now {
			delete(ls.m, id)
			ls.sum -= l.amount
		} else if ls.next == 0 || l.deadline < ls.next {
			ls.next = l.deadline
		}
	}
}

func (m *memory) scope(s Scope) *memScope {
	m.mu.RLock()
	ms := m.scopes[s]
	m.mu.RUnlock()
	if ms != nil {
		return ms
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if ms = m.scopes[s]; ms == nil {
		m.nextID++
		ms = &memScope{id: m.nextID}
		m.scopes[s] = ms
	}
	return ms
}

// lock locks the scopes of r's items in id order; unlock undoes it.
func (m *memory) lock(r *Reservation) {
	for i := range r.items {
		r.items[i].ms = m.scope(r.items[i].scope)
	}
	var last uint64
	for {
		// The next scope by id: a selection over a handful of items, no allocation.
		var next *memScope
		for i := range r.items {
			ms := r.items[i].ms
			if ms.id > last && (next == nil || ms.id < next.id) {
				next = ms
			}
		}
		if next == nil {
			return
		}
		next.mu.Lock()
		last = next.id
	}
}

func (m *memory) unlock(r *Reservation) {
	for i := range r.items {
		ms := r.items[i].ms
		seen := false
		for j := 0; j < i; j++ {
			if r.items[j].ms == ms {
				seen = true
				break
			}
		}
		if !seen {
			ms.mu.Unlock()
		}
	}
	for i := range r.items {
		r.items[i].ms = nil
	}
}

func (ms *memScope) bucket(k itemKind) *bucket {
	if k == itemRequests {
		return &ms.rpm
	}
	return &ms.tpm
}

func (b *bucket) levelAt(now, limit int64) float64 {
	if !b.set {
		return float64(limit)
	}
	return refill(b.level, b.at, now, limit)
}

// budget is the scope's counter for one period, made when absent. Periods that ended
// more than a lease ago and hold nothing are dropped when a new one is made.
func (ms *memScope) budget(it *item, start, end, lease, now int64, create bool) *memBudget {
	k := budgetKey{it.period, start}
	if b := ms.budgets[k]; b != nil || !create {
		return b
	}
	if ms.budgets == nil {
		ms.budgets = make(map[budgetKey]*memBudget)
	}
	for k, b := range ms.budgets {
		if b.end != 0 && b.end+lease < now && len(b.held.m) == 0 {
			delete(ms.budgets, k)
		}
	}
	b := &memBudget{end: end}
	ms.budgets[k] = b
	return b
}

func (m *memory) reserve(_ context.Context, r *Reservation, now, lease int64) (outcome, error) {
	m.lock(r)
	defer m.unlock(r)
	seeding, refusing := false, false
	for i := range r.items {
		it := &r.items[i]
		ms := it.ms
		switch it.kind {
		case itemRequests, itemTokens:
			it.level = ms.bucket(it.kind).levelAt(now, it.limit)
			if float64(it.take) > it.level {
				it.refused, it.wait = true, waitFor(it.level, it.take, it.limit)
				refusing = true
			}
		case itemSlot:
			ms.slots.expire(now)
			if it.limit > 0 && int64(len(ms.slots.m))+1 > it.limit {
				it.refused, it.wait = true, 1_000_000
				refusing = true
			}
		case itemBudget:
			b := ms.budget(it, it.start, it.end, lease, now, true)
			b.held.expire(now)
			if !b.seeded && it.seed >= 0 {
				b.seeded, b.spent = true, it.seed
			}
			if !b.seeded {
				it.needSeed, seeding = true, true
				continue
			}
			if b.spent+b.held.sum+it.take > it.limit {
				it.refused, refusing = true, true
				if b.spent+it.take <= it.limit {
					it.held = b.held.sum // only requests in flight stand in the way
				}
			}
		}
	}
	if seeding {
		return needsSeed, nil
	}
	if refusing {
		return refused, nil
	}
	for i := range r.items {
		it := &r.items[i]
		ms := it.ms
		switch it.kind {
		case itemRequests, itemTokens:
			b := ms.bucket(it.kind)
			b.set, b.level, b.at = true, it.level-float64(it.take), now
			it.after, it.reset = int64(b.level), fullIn(b.level, it.limit)
		case itemSlot:
			ms.slots.add(r.id, 1, now+lease)
			it.after = int64(len(ms.slots.m))
		case itemBudget:
			b := ms.budget(it, it.start, it.end, lease, now, false)
			if it.take > 0 {
				b.held.add(r.id, it.take, now+lease)
			}
			it.after, it.held = b.spent, b.held.sum
		}
	}
	return admitted, nil
}

func (m *memory) settle(_ context.Context, r *Reservation, tokens, cost, now int64, addOnly, seed bool) error {
	m.lock(r)
	defer m.unlock(r)
	for i := range r.items {
		it := &r.items[i]
		ms := it.ms
		if addOnly && !(it.kind == itemBudget && it.needSeed) {
			continue
		}
		switch it.kind {
		case itemTokens:
			if delta := tokens - it.take; delta != 0 {
				b := ms.bucket(it.kind)
				b.level = min(b.levelAt(now, it.limit)-float64(delta), float64(it.limit))
				b.set, b.at = true, now
			}
		case itemSlot:
			ms.slots.remove(r.id)
		case itemBudget:
			it.needSeed = false
			if !addOnly {
				if b := ms.budget(it, it.start, it.end, 0, now, false); b != nil {
					b.held.remove(r.id)
				}
			}
			if cost == 0 {
				continue
			}
			b := ms.budget(it, it.settleStart, it.settleEnd, 0, now, false)
			switch {
			case b != nil && b.seeded:
				b.spent += cost
				it.spent = b.spent
			case it.settleSeed >= 0:
				if b == nil {
					b = ms.budget(it, it.settleStart, it.settleEnd, 0, now, true)
				}
				b.seeded, b.spent = true, it.settleSeed+cost
				it.spent = b.spent
			case seed:
				it.needSeed = true
			}
		}
	}
	return nil
}

func (m *memory) peek(_ context.Context, r *Reservation, now int64) error {
	m.lock(r)
	defer m.unlock(r)
	for i := range r.items {
		it := &r.items[i]
		ms := it.ms
		switch it.kind {
		case itemRequests, itemTokens:
			lvl := ms.bucket(it.kind).levelAt(now, it.limit)
			it.after, it.reset = int64(lvl), fullIn(lvl, it.limit)
		case itemSlot:
			n := int64(0)
			for _, l := range ms.slots.m {
				if l.deadline > now {
					n++
				}
			}
			it.after = n
		case itemBudget:
			b := ms.budget(it, it.start, it.end, 0, now, false)
			if b != nil {
				for _, l := range b.held.m {
					if l.deadline > now {
						it.held += l.amount
					}
				}
			}
			switch {
			case b != nil && b.seeded:
				it.after = b.spent
			case it.seed >= 0:
				it.after = it.seed
			default:
				it.needSeed = true
			}
		}
	}
	return nil
}

// unseed forgets every period's spend (keeping what is held in flight): the next use
// seeds it from the ledger again.
func (m *memory) unseed() {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, ms := range m.scopes {
		ms.mu.Lock()
		for _, b := range ms.budgets {
			b.seeded, b.spent = false, 0
		}
		ms.mu.Unlock()
	}
}

func (m *memory) close() error { return nil }
