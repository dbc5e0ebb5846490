package limits

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// crossings records what a BudgetWatch hears.
type crossings struct {
	mu  sync.Mutex
	got []BudgetCrossing
}

func (c *crossings) add(b BudgetCrossing) {
	c.mu.Lock()
	c.got = append(c.got, b)
	c.mu.Unlock()
}

func (c *crossings) thresholds() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for _, b := range c.got {
		out = append(out, b.Threshold)
	}
	return out
}

func TestBudgetWatchHearsEachThresholdOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		clk := newClock(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
		lg := &ledger{}
		// Two gateways on the same counters (one for memory): a crossing is told by the
		// gateway whose request crossed it, once.
		l1 := b.limiter(t, Options{Now: clk.Now, Seeder: lg.Seeder})
		l2 := l1
		if b.shared() {
			l2 = b.limiter(t, Options{Now: clk.Now, Seeder: lg.Seeder})
		}
		heard := &crossings{}
		watch := &BudgetWatch{Thresholds: []int{50, 80, 100}, Notify: heard.add}
		l1.WatchBudgets(watch)
		l2.WatchBudgets(watch)

		check := Check{Scope: keyScope("k1"), Policy: Policy{Budget: budget(1_000, PeriodMonth)}}
		spend := func(l *Limiter, cost int64) {
			r := admit(t, l, ask(0, cost, check))
			r.Settle(context.Background(), 10, cost)
			// In Redis the watch hears a spend once it is counted there, when the
			// queued settlement has gone.
			l.Flush()
			lg.add(check.Scope, clk.Now(), cost)
		}
		spend(l1, 400)
		assert.Empty(t, heard.thresholds(), "40%%")
		spend(l2, 100)
		assert.Equal(t, []int{50}, heard.thresholds(), "exactly 50%% crosses 50")
		spend(l1, 100)
		assert.Equal(t, []int{50}, heard.thresholds(), "60%%: nothing new")
		spend(l2, 390)
		assert.Equal(t, []int{50, 80}, heard.thresholds(), "99%%")
		spend(l1, 10)
		assert.Equal(t, []int{50, 80, 100}, heard.thresholds())
		got := heard.got[2]
		assert.Equal(t, check.Scope, got.Scope)
		assert.Equal(t, int64(1_000), got.SpentMicros)
		assert.Equal(t, Budget{Micros: 1_000, Period: PeriodMonth}, got.Budget)
		assert.Equal(t, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), got.PeriodStart)

		// A new month starts from the ledger's spend for it (nothing): 50% again.
		clk.Add(10 * 24 * time.Hour)
		spend(l1, 600)
		assert.Equal(t, []int{50, 80, 100, 50}, heard.thresholds())
		assert.Equal(t, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), heard.got[3].PeriodStart)

		// A reload's watch replaces this one; removing the old one leaves the new.
		other := &crossings{}
		l1.WatchBudgets(&BudgetWatch{Thresholds: []int{90}, Notify: other.add})
		l1.UnwatchBudgets(watch)
		spend(l1, 300)
		assert.Equal(t, []int{90}, other.thresholds())
		require.Len(t, heard.thresholds(), 4)
	})
}
