package store

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard-gw/switchyard/auth"
)

// The cost of checking a key on the request path, with 10 and with 100,000 keys in a
// real SQLite store. auth.Cache holds every key by hash, so the lookup itself should
// not depend on the number of keys. Run with
//
//	go test -run '^$' -bench CacheVerify -benchmem ./store/
//
// keys=10 uses its 10 keys in turn. keys=100000/used=10 uses 10 of its 100,000 keys in
// turn (a few busy clients among many keys): the same access pattern as keys=10, so the
// two compare the lookups alone. keys=100000/used=100000 uses every key in turn, so
// nearly every check misses the CPU caches (map bucket, cached key, secret): a worst
// case for memory rather than for the lookup.
func BenchmarkCacheVerify(b *testing.B) {
	ctx := context.Background()
	for _, bc := range []struct{ keys, used int }{{10, 10}, {100_000, 10}, {100_000, 100_000}} {
		name := fmt.Sprintf("keys=%d", bc.keys)
		if bc.keys > 10 {
			name += fmt.Sprintf("/used=%d", bc.used)
		}
		b.Run(name, func(b *testing.B) {
			s, secrets := benchStore(b, bc.keys)
			c, err := auth.NewCache(ctx, s)
			if err != nil {
				b.Fatal(err)
			}
			if c.Len() != bc.keys {
				b.Fatalf("cache holds %d keys, want %d", c.Len(), bc.keys)
			}
			// Spread the keys used over the whole set.
			used := make([]string, 0, bc.used)
			for i := 0; i < bc.used; i++ {
				used = append(used, secrets[i*(bc.keys/bc.used)])
			}
			// Each key once before timing: a key's first use queues it for the
			// last-used flush, a one-off per key and flush.
			for _, secret := range used {
				if _, ok := c.Verify(secret); !ok {
					b.Fatal("a stored key does not verify")
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, ok := c.Verify(used[i]); !ok {
					b.Fatal("a stored key does not verify")
				}
				if i++; i == len(used) {
					i = 0
				}
			}
		})
	}
}

// The cost of the cache's poll when nothing changed, the common case every 250 ms.
func BenchmarkChangedSinceNothingNew(b *testing.B) {
	for _, n := range []int{10, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			ctx := context.Background()
			s, _ := benchStore(b, n)
			last := int64(n)
			b.ReportAllocs()
			for b.Loop() {
				changed, err := s.ChangedSince(ctx, last)
				if err != nil || len(changed) != 0 {
					b.Fatal(changed, err)
				}
			}
		})
	}
}

// benchStore returns a SQLite store holding n keys and their secrets.
func benchStore(b *testing.B, n int) (*Store, []string) {
	b.Helper()
	s, err := Open(context.Background(), DriverSQLite, filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s, bulkCreate(b, s, n)
}

// bulkCreate stores n new keys and returns their secrets. The keys go in through the
// store's own write path, in transactions of up to 25,000 keys.
func bulkCreate(tb testing.TB, s *Store, n int) []string {
	tb.Helper()
	ctx := context.Background()
	secrets := make([]string, n)
	created := time.Now()
	for start := 0; start < n; start += 25_000 {
		end := min(start+25_000, n)
		err := s.ref.Load().write(ctx, func(w writer) error {
			for i := start; i < end; i++ {
				secret, err := auth.GenerateSecret()
				if err != nil {
					return err
				}
				secrets[i] = secret
				k, err := newRow(&auth.Key{
					ID:     auth.NewKeyID(),
					Name:   fmt.Sprintf("key %d", i),
					Prefix: auth.DisplayPrefix(secret),
					Hash:   auth.HashKey(secret),
				}, created)
				if err != nil {
					return err
				}
				if k.Seq, err = w.nextSeq(ctx); err != nil {
					return err
				}
				if err := w.insert(ctx, k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
	return secrets
}
