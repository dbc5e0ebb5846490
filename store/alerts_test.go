package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/alerts"
)

func newDelivery(webhook, dedupe string, at time.Time) alerts.NewDelivery {
	return alerts.NewDelivery{Webhook: webhook, Dedupe: dedupe, Kind: alerts.KindBudget, Event: []byte(`{"kind":"budget"}`), At: at}
}

func deliveryIDs(ds []alerts.Delivery) []int64 {
	var out []int64
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return out
}

func TestAlertOutbox(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

	forEachDriver(t, func(t *testing.T, f *fixture) {
		t.Run("two gateways enqueueing the same event store one row", func(t *testing.T) {
			f := newFixture(t, f.driver)
			a, b := f.open(t), f.open(t)
			require.NoError(t, a.Enqueue(ctx, []alerts.NewDelivery{newDelivery("w1", "budget|key:k|50|month@0", t0)}))
			require.NoError(t, b.Enqueue(ctx, []alerts.NewDelivery{
				newDelivery("w1", "budget|key:k|50|month@0", t0.Add(time.Second)),
				newDelivery("w2", "budget|key:k|50|month@0", t0), // another webhook: its own row
			}))
			recent, err := a.Recent(ctx, 10)
			require.NoError(t, err)
			require.Len(t, recent, 2)
			assert.Equal(t, "w2", recent[0].Webhook, "newest first")
			assert.Equal(t, t0, recent[1].CreatedAt, "the first gateway's row stands")
			assert.Equal(t, alerts.StatePending, recent[1].State)
		})

		t.Run("a claimed row goes to one gateway until its lease runs out", func(t *testing.T) {
			f := newFixture(t, f.driver)
			a, b := f.open(t), f.open(t)
			require.NoError(t, a.Enqueue(ctx, []alerts.NewDelivery{newDelivery("w", "e1", t0), newDelivery("w", "e2", t0)}))
			got, err := a.Claim(ctx, "gw-a", t0, time.Minute, 10)
			require.NoError(t, err)
			require.Len(t, got, 2)
			other, err := b.Claim(ctx, "gw-b", t0.Add(59*time.Second), time.Minute, 10)
			require.NoError(t, err)
			assert.Empty(t, other, "leased to gw-a")
			// gw-a sends one and dies holding the other.
			require.NoError(t, a.Finish(ctx, got[0].ID, "gw-a", alerts.StateSent, 1, time.Time{}, ""))
			other, err = b.Claim(ctx, "gw-b", t0.Add(61*time.Second), time.Minute, 10)
			require.NoError(t, err)
			assert.Equal(t, []int64{got[1].ID}, deliveryIDs(other), "the lease ran out: gw-b takes the unsent one only")
			// gw-a's late answer about a row it no longer holds changes nothing.
			require.NoError(t, a.Finish(ctx, got[1].ID, "gw-a", alerts.StateFailed, 9, time.Time{}, "late"))
			recent, err := a.Recent(ctx, 10)
			require.NoError(t, err)
			assert.Equal(t, alerts.StatePending, recent[0].State)
			assert.Equal(t, 0, recent[0].Attempts)
			assert.Equal(t, alerts.StateSent, recent[1].State)
			assert.False(t, recent[1].SentAt.IsZero())
		})

		t.Run("a retry waits for its time", func(t *testing.T) {
			f := newFixture(t, f.driver)
			s := f.open(t)
			require.NoError(t, s.Enqueue(ctx, []alerts.NewDelivery{newDelivery("w", "e", t0)}))
			got, err := s.Claim(ctx, "gw", t0, time.Minute, 10)
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.NoError(t, s.Finish(ctx, got[0].ID, "gw", alerts.StatePending, 1, t0.Add(10*time.Second), "status 503: busy"))
			again, err := s.Claim(ctx, "gw", t0.Add(9*time.Second), time.Minute, 10)
			require.NoError(t, err)
			assert.Empty(t, again, "not due yet, though the lease was released")
			again, err = s.Claim(ctx, "gw", t0.Add(10*time.Second), time.Minute, 10)
			require.NoError(t, err)
			require.Len(t, again, 1)
			assert.Equal(t, 1, again[0].Attempts)
			assert.Equal(t, "status 503: busy", again[0].LastError)
			require.NoError(t, s.Finish(ctx, got[0].ID, "gw", alerts.StateFailed, 2, time.Time{}, "gave up"))
			none, err := s.Claim(ctx, "gw", t0.Add(time.Hour), time.Minute, 10)
			require.NoError(t, err)
			assert.Empty(t, none, "a failed delivery is not tried again")
		})

		t.Run("concurrent claimers never share a row", func(t *testing.T) {
			f := newFixture(t, f.driver)
			stores := []*Store{f.open(t), f.open(t), f.open(t), f.open(t)}
			var batch []alerts.NewDelivery
			for i := range 200 {
				batch = append(batch, newDelivery("w", fmt.Sprint("e", i), t0))
			}
			require.NoError(t, stores[0].Enqueue(ctx, batch))
			var (
				mu   sync.Mutex
				seen = map[int64]string{}
				wg   sync.WaitGroup
			)
			for i, s := range stores {
				owner := "gw" + string(rune('a'+i))
				wg.Go(func() {
					for {
						got, err := s.Claim(ctx, owner, t0, time.Minute, 7)
						if !assert.NoError(t, err) || len(got) == 0 {
							return
						}
						mu.Lock()
						for _, d := range got {
							assert.Empty(t, seen[d.ID], "row %d claimed twice", d.ID)
							seen[d.ID] = owner
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			assert.Len(t, seen, 200)
		})

		t.Run("rows and leases survive a reopen; Release hands them back", func(t *testing.T) {
			f := newFixture(t, f.driver)
			s, err := Open(ctx, f.driver, f.dsn)
			require.NoError(t, err)
			require.NoError(t, s.Enqueue(ctx, []alerts.NewDelivery{newDelivery("w", "e", t0)}))
			_, err = s.Claim(ctx, "gw", t0, time.Hour, 10)
			require.NoError(t, err)
			require.NoError(t, s.Close())

			s = f.open(t)
			got, err := s.Claim(ctx, "gw2", t0.Add(time.Minute), time.Hour, 10)
			require.NoError(t, err)
			assert.Empty(t, got, "still leased")
			require.NoError(t, s.Release(ctx, "gw"))
			got, err = s.Claim(ctx, "gw2", t0.Add(time.Minute), time.Hour, 10)
			require.NoError(t, err)
			assert.Len(t, got, 1)
			assert.Equal(t, `{"kind":"budget"}`, string(got[0].Event))
		})
	})
}
