package store

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/metering"
)

// Usage grouped by owner sums each person's keys together (a rotated key's records
// and its replacement's under one owner), keys without an owner and keys from the
// configuration under "", and the owner filter keeps one person's records only.
func TestUsageGroupedByOwnerSumsRight(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		key := func(name, owner string) *auth.Key {
			_, k := newKey(t, name, t0)
			k.Owner = owner
			require.NoError(t, s.CreateKey(ctx, k))
			return k
		}
		ann1 := key("ann 1", "usr_ann")
		ann2 := key("ann 2", "usr_ann")
		bot := key("bot", "svc:deploy")
		nobody := key("nobody's", "")
		_, annNew := newKey(t, "ann 1", t0)
		_, err := s.RotateKey(ctx, ann1.ID, annNew, t0, time.Hour)
		require.NoError(t, err)

		day := utc(2026, 3, 14, 10, 0, 0, 0)
		n := 0
		rec := func(keyID, model string, cost int64) metering.Record {
			n++
			return metering.Record{RequestID: "sy_owner_" + string(rune('a'+n)), KeyID: keyID, Model: model, Status: 200,
				Usage: metering.Usage{Input: cost / 10}, CostMicros: cost, Time: day.Add(time.Duration(n) * time.Minute)}
		}
		records := []metering.Record{
			rec(ann1.ID, "m1", 1_000), rec(annNew.ID, "m1", 2_000), rec(ann2.ID, "m2", 4_000),
			rec(bot.ID, "m1", 8_000), rec(nobody.ID, "m1", 16_000), rec("static:ops", "m2", 32_000), rec("", "m1", 64_000),
		}
		refused := rec(ann2.ID, "m1", 999_000)
		refused.Outcome = metering.OutcomeRefused
		records = append(records, refused)
		require.NoError(t, s.WriteUsage(ctx, "gw", 1, records))

		rows, err := s.QueryUsage(ctx, metering.Query{GroupBy: []string{"owner"}})
		require.NoError(t, err)
		type sum struct {
			owner    string
			requests int64
			cost     int64
			input    int64
		}
		var got []sum
		for _, r := range rows {
			got = append(got, sum{r.Owner, r.Requests, r.CostMicros, r.Input})
		}
		assert.Equal(t, []sum{
			{"", 3, 112_000, 11_200},
			{"svc:deploy", 1, 8_000, 800},
			{"usr_ann", 3, 7_000, 700},
		}, got, "by owner, byte order")

		rows, err = s.QueryUsage(ctx, metering.Query{GroupBy: []string{"owner", "model"}})
		require.NoError(t, err)
		var pairs []string
		for _, r := range rows {
			pairs = append(pairs, r.Owner+"/"+r.Model+"="+strconv.FormatInt(r.CostMicros, 10))
		}
		assert.Equal(t, []string{"/m1=80000", "/m2=32000", "svc:deploy/m1=8000", "usr_ann/m1=3000", "usr_ann/m2=4000"}, pairs)

		rows, err = s.QueryUsage(ctx, metering.Query{Owner: "usr_ann", GroupBy: []string{"key"}})
		require.NoError(t, err)
		var keys []string
		for _, r := range rows {
			keys = append(keys, r.KeyID+"="+strconv.FormatInt(r.CostMicros, 10))
		}
		want := map[string]string{ann1.ID: "1000", annNew.ID: "2000", ann2.ID: "4000"}
		require.Len(t, keys, 3)
		for _, k := range keys {
			id, cost, _ := strings.Cut(k, "=")
			assert.Equal(t, want[id], cost, "key %s", id)
		}
		total, err := s.QueryUsage(ctx, metering.Query{Owner: "svc:deploy"})
		require.NoError(t, err)
		assert.Equal(t, int64(8_000), total[0].CostMicros)
		none, err := s.QueryUsage(ctx, metering.Query{Owner: "usr_nobody"})
		require.NoError(t, err)
		assert.Zero(t, none[0].Requests)
	})
}

// One person's usage (the console's "my usage") finds their keys through the owner
// and their records through usage_records_by_key_ts, on both databases: never a scan
// of the ledger. Each of 25 people has two of the 50 keys.
func TestOnePersonsUsageUsesTheIndexes(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		start := utc(2026, 3, 1, 0, 0, 0, 0)
		const keys = 50
		for i := range keys {
			_, k := newKey(t, "k", t0)
			k.ID, k.Owner = benchKeyID(i), "usr_"+strconv.Itoa(i%25)
			require.NoError(t, s.CreateKey(ctx, k))
		}
		require.NoError(t, s.WriteUsage(ctx, "gen", 1, generateUsage(start, 30, keys, 10)))
		if f.driver == DriverPostgres {
			f.rows(t, `ANALYZE api_keys`)
		}
		q := metering.Query{Owner: "usr_3", From: start, To: start.AddDate(0, 0, 30), GroupBy: []string{"day"}}
		plan := explainUsage(t, f, s, q)
		t.Logf("%+v:\n%s", q, plan)
		assert.Contains(t, plan, "usage_records_by_key_ts")
		assert.NotRegexp(t, `(?i)seq scan on usage_records|SCAN usage_records\b`, plan, "no scan of the ledger")
		rows, err := s.QueryUsage(ctx, q)
		require.NoError(t, err)
		var requests int64
		for _, r := range rows {
			requests += r.Requests
		}
		assert.Equal(t, int64(2*30*10), requests, "two keys, thirty days, ten a day")
	})
}
