package routing

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// LiveCandidate is a candidate with its live health: what the ordering ranks.
type LiveCandidate struct {
	Candidate *Candidate
	Health    *Health
}

// The latency rule: within a group of equal priority and health band, let F be the
// smallest recent time to first byte known in the group. An option is slow when its own
// is known and above both slowRatio×F and F+slowMargin (the ratio decides for slow models,
// the margin keeps jitter among fast ones from counting). Slow options go after the rest
// of their group, fastest first; the rest share by weight as before. An option not yet
// measured is not slow, so it gets measured.
const (
	slowRatio  = 1.5
	slowMargin = 100 * time.Millisecond
	// exploreOneIn: one order in this many ignores the slow class, so a slow option still
	// goes first now and then (with its weight's share) and its time to first byte is
	// measured again: without that it could never earn its place back.
	exploreOneIn = 20
)

// Order returns the positions of the options to try, best first. Candidates whose circuit
// is open are left out, so they cost the request nothing. The order is by priority, then
// health band, then latency (slow options last, see slowRatio), then a weighted random
// draw that spreads load by weight. preferred, when not negative, is the option that
// served this conversation last: it goes first while it is available, since thinking
// signatures, encrypted reasoning and prompt caches are only valid where they were made.
func Order(opts []LiveCandidate, preferred int, now time.Time) []int {
	type ranked struct {
		pos      int
		priority int
		band     float64
		ttfb     time.Duration // zero: not measured yet
		lag      time.Duration // ttfb when slow, zero otherwise: slow ones sort after, fastest first
		draw     float64
	}
	rs := make([]ranked, 0, len(opts))
	for i, o := range opts {
		if !o.Health.Available(now) {
			continue
		}
		w := float64(o.Candidate.Weight)
		if w <= 0 {
			w = 1
		}
		// Efraimidis–Spirakis: u^(1/w) sorted descending is a weighted random order.
		rs = append(rs, ranked{pos: i, priority: o.Candidate.Priority, band: o.Health.score(now),
			ttfb: o.Health.recentTTFB(), draw: math.Pow(rand.Float64(), 1/w)})
	}
	// Classes are settled before sorting so the comparison stays a strict weak order
	// (a pairwise "much slower than" would not be transitive). Groups are a
	// handful of options, so a quadratic scan beats building a map.
	if len(rs) > 1 && rand.IntN(exploreOneIn) != 0 {
		for i := range rs {
			r := &rs[i]
			if r.ttfb <= 0 {
				continue
			}
			fastest := r.ttfb
			for _, o := range rs {
				if o.ttfb > 0 && o.ttfb < fastest && o.priority == r.priority && o.band == r.band {
					fastest = o.ttfb
				}
			}
			if isSlow(r.ttfb, fastest) {
				r.lag = r.ttfb
			}
		}
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		if a.pos == preferred && b.pos != preferred {
			return -1
		}
		if b.pos == preferred && a.pos != preferred {
			return 1
		}
		switch {
		case a.priority != b.priority:
			return a.priority - b.priority
		case a.band != b.band:
			return cmpDesc(a.band, b.band)
		case a.lag != b.lag:
			return cmp.Compare(a.lag, b.lag)
		}
		return cmpDesc(a.draw, b.draw)
	})
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = r.pos
	}
	return out
}

// isSlow reports whether a time to first byte is slow next to the fastest of its group.
func isSlow(ttfb, fastest time.Duration) bool {
	return float64(ttfb) > slowRatio*float64(fastest) && ttfb > fastest+slowMargin
}

func cmpDesc(a, b float64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// SoonestReady is the earliest time any option can be tried again (now if one can).
func SoonestReady(opts []LiveCandidate, now time.Time) time.Time {
	soonest := time.Time{}
	for _, o := range opts {
		t := o.Health.ReadyAt(now)
		if soonest.IsZero() || t.Before(soonest) {
			soonest = t
		}
	}
	if soonest.IsZero() {
		return now
	}
	return soonest
}
