package integration

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/store"
)

// Usage sums by the keys' owners through the assembled gateway: a person's two keys
// (one of them rotated, its replacement used too) under their user id, a service
// account's key under its name, and the configuration's key under no owner; ?owner=
// keeps one person's records, and an unknown grouping is refused with the list of the
// known ones.
func TestUsageGroupsByTheKeysOwner(t *testing.T) {
	up := newUpstream(t)
	dbPath := filepath.Join(t.TempDir(), "owners.db")
	g := startGatewayWith(t, up, standardModels(up), "\t\tstore sqlite "+dbPath+"\n")

	// The keys are made by another process on the same file, as the console's API
	// will (owner set); this gateway's cache picks them up.
	ctx := context.Background()
	st, err := store.Open(ctx, store.DriverSQLite, dbPath)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	newKey := func(name, owner string) (string, *auth.Key) {
		secret, err := auth.GenerateSecret()
		require.NoError(t, err)
		k := &auth.Key{ID: auth.NewKeyID(), Name: name, Prefix: auth.DisplayPrefix(secret), Hash: auth.HashKey(secret), Owner: owner}
		return secret, k
	}
	annLaptop, laptop := newKey("ann laptop", "usr_ann")
	annCI, ci := newKey("ann ci", "usr_ann")
	deploy, bot := newKey("deploy", "svc:deploy")
	for _, k := range []*auth.Key{laptop, ci, bot} {
		require.NoError(t, st.CreateKey(ctx, k))
	}
	annNew, replacement := newKey("ann laptop", "")
	_, err = st.RotateKey(ctx, laptop.ID, replacement, time.Time{}, time.Hour)
	require.NoError(t, err)

	chat := `{"model":"chat-a","messages":[{"role":"user","content":"hi"}]}`
	bearer := func(secret string) []string { return []string{"Authorization", "Bearer " + secret} }
	// Wait for the cache to know the newest key: the others were stored before it.
	require.Eventually(t, func() bool {
		r, err := g.send("POST", "/v1/chat/completions", chat, bearer(annNew)...)
		return err == nil && r.Status == 200
	}, waitShort, pollEvery, "the gateway never accepted the rotated key")
	want := map[string]int64{"usr_ann": 1, "svc:deploy": 0, "": 0}
	for _, call := range []struct{ secret, owner string }{
		{annLaptop, "usr_ann"}, {annCI, "usr_ann"}, {annCI, "usr_ann"}, {deploy, "svc:deploy"}, {testKey, ""}, {testKey, ""},
	} {
		r := g.call(t, "POST", "/v1/chat/completions", chat, bearer(call.secret)...)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		want[call.owner]++
	}

	usage := func(query string) (int, []byte) {
		resp, err := http.Get(g.admin + "/switchyard/usage?" + query)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	var body []byte
	require.Eventually(t, func() bool { // the ledger writes in batches
		status, b := usage("group=owner")
		body = b
		got := map[string]int64{}
		for _, row := range gjson.GetBytes(b, "rows").Array() {
			got[row.Get("owner").Str] = row.Get("requests").Int()
		}
		return status == 200 && assert.ObjectsAreEqual(want, got)
	}, waitShort, pollEvery, "usage by owner: want %v, last answer %s", want, body)
	assert.Equal(t, []any{"owner"}, gjson.GetBytes(body, "group").Value())

	status, b := usage("owner=usr_ann&group=key")
	require.Equal(t, 200, status, "%s", b)
	keys := map[string]int64{}
	for _, row := range gjson.GetBytes(b, "rows").Array() {
		keys[row.Get("key_id").Str] = row.Get("requests").Int()
	}
	assert.Equal(t, map[string]int64{replacement.ID: 1, laptop.ID: 1, ci.ID: 2}, keys, "only ann's keys, the rotated one and its replacement both")
	assert.Equal(t, int64(4), gjson.GetBytes(b, "total.requests").Int())

	status, b = usage("group=team")
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, string(b), "owner", "the refusal names the groupings there are")
}
