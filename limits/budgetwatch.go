package limits

import "time"

// BudgetCrossing is a settled request taking a scope's spend in a budget period from
// below Threshold percent of the budget to at least it.
type BudgetCrossing struct {
	Scope       Scope
	Budget      Budget
	PeriodStart time.Time // zero for PeriodTotal
	Threshold   int       // percent
	SpentMicros int64     // the period's spend after the request, as the counters hold it
}

// BudgetWatch is told of every threshold a settle crosses. Spend counted by no counter
// (a period's counter not seeded yet, or the shared counters away) crosses nothing: the
// ledger holds it, and the next counted request that passes a threshold tells.
type BudgetWatch struct {
	Thresholds []int // percents, each in 1..1000
	// Notify is called on the settling request's goroutine: it must not block.
	Notify func(BudgetCrossing)
}

// notice calls Notify for each threshold t with before < t% of the limit <= after, where
// after is the counted spend and before is after less this request's cost.
func (w *BudgetWatch) notice(r *Reservation, cost int64, now time.Time) {
	for i := range r.items {
		it := &r.items[i]
		if it.kind != itemBudget || it.spent < 0 || it.limit <= 0 {
			continue
		}
		after := it.spent
		before := after - cost
		for _, t := range w.Thresholds {
			// t% of the limit, rounded down, without limit*t (limits reach 2^60).
			mark := it.limit/100*int64(t) + it.limit%100*int64(t)/100
			if before < mark && mark <= after {
				start := time.Time{}
				if it.settleStart != 0 {
					start = time.UnixMicro(it.settleStart).UTC()
				}
				w.Notify(BudgetCrossing{Scope: it.scope, Budget: Budget{Micros: it.limit, Period: it.period},
					PeriodStart: start, Threshold: t, SpentMicros: after})
			}
		}
	}
}

// WatchBudgets makes w hear the budget crossings of every settle, replacing any other
// watch (a reload's configuration takes over from the previous one's).
func (l *Limiter) WatchBudgets(w *BudgetWatch) { l.budgetWatch.Store(w) }

// UnwatchBudgets stops w hearing crossings, unless another watch has replaced it.
func (l *Limiter) UnwatchBudgets(w *BudgetWatch) { l.budgetWatch.CompareAndSwap(w, nil) }
