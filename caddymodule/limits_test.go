package caddymodule

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/switchyard-gw/switchyard/admission"
	"github.com/switchyard-gw/switchyard/limits"
	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// The limiter the glue opens counts budgets from the store's ledger, and admission holds
// keys without limits of their own to key_defaults: a key whose ledger shows its budget
// nearly spent is refused on its first request after a start.
func TestOpenLimiterSeedsFromTheLedgerAndAppliesKeyDefaults(t *testing.T) {
	monthly, err := limits.ParseBudget("1/month")
	require.NoError(t, err)
	var seeded []limits.Scope
	a := &App{
		Limits:   &LimitsConfig{KeyDefaults: &limits.Policy{Budget: &monthly}, DefaultOutputTokens: 100},
		logger:   zap.NewNop(),
		storeKey: t.Name(), // a limiter of its own in the pool
		spend: func(_ context.Context, s limits.Scope, _ time.Time) (int64, error) {
			seeded = append(seeded, s)
			return 999_990, nil
		},
	}
	require.NoError(t, a.openLimiter(caddy.NewReplacer()))
	t.Cleanup(func() { _, _ = limiterPool.Delete(a.limiterKey) })

	op := protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindChat}
	parsed, apiErr := protocols.ParseRequest(op.Family, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	require.Nil(t, apiErr)
	who := admission.Who{KeyID: "key_1"}
	require.True(t, a.admission.Applies(who, "m"), "key_defaults apply to a key without limits")
	res := a.admission.Admit(context.Background(), admission.Request{
		ID: "req_1", Who: who, Op: op, Parsed: parsed,
		Model: admission.Model{ID: "m", Prices: routing.Prices{Input: 1_000_000, Output: 1_000_000}},
	}, http.Header{})
	require.NotNil(t, res.Err, "999,990 of 1,000,000 spent: 100 output tokens do not fit")
	assert.Equal(t, "key_budget", res.Refused)
	assert.Equal(t, []limits.Scope{{Kind: limits.ScopeKey, ID: "key_1"}}, seeded)
}

// A rate or budget beyond what the counters hold exactly is refused in the Caddyfile and
// in Caddy JSON, not accepted and then shown as used up in every allowance header.
func TestLimitsBeyondTheMaximumAreRefusedInConfiguration(t *testing.T) {
	withDefaults := func(lines string) string {
		return "{\n\tswitchyard {\n\t\tlimits {\n\t\t\tkey_defaults {\n" + lines + "\t\t\t}\n\t\t}\n" +
			"\t\tmodel m {\n\t\t\tcandidate east {\n\t\t\t\tprotocol family_a\n\t\t\t\turl http://127.0.0.1:9/v1\n\t\t\t\tupstream_model up\n\t\t\t}\n\t\t}\n\t}\n}\n"
	}
	for src, want := range map[string]string{
		"\t\t\t\ttpm 9223372036854775807\n": "tpm: 9223372036854775807 is more than the most it may be, 1000000000000",
		"\t\t\t\trpm 1000000000001\n":       "rpm: 1000000000001 is more than the most it may be",
		"\t\t\t\tbudget 1000000001/day\n":   "more than the most a budget may be",
		"\t\t\t\tbudget \"\"\n":             "want <amount>/<day|month|total>",
	} {
		_, err := adapt(t, withDefaults(src))
		require.Error(t, err, src)
		assert.Contains(t, err.Error(), want, src)
	}
	require.NoError(t, validate(t, withDefaults("\t\t\t\ttpm 1000000000000\n\t\t\t\tbudget 1000000000/total\n")))

	t.Setenv("XDG_DATA_HOME", t.TempDir())
	var lc LimitsConfig
	require.NoError(t, json.Unmarshal([]byte(`{"key_defaults":{"concurrency":1000000000001}}`), &lc))
	a := App{Limits: &lc, Models: []ModelConfig{{ID: "m",
		Candidates: []CandidateConfig{{Name: "c", Protocol: "family_a", URL: "http://127.0.0.1:9/v1", UpstreamModel: "u"}}}}}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: t.Context()})
	defer cancel()
	err := a.Provision(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "limits: key_defaults: concurrency 1000000000001 is more than the most it may be")
}

// Configurations share a limiter (and its Redis client) only when they name the same
// Redis: the kind, every URL and the Sentinel master name each make another one, and a
// reload that changes none keeps it. Placeholders are resolved first.
func TestRedisStoreKeyNamesEveryFieldOfEveryKind(t *testing.T) {
	t.Setenv("SWITCHYARD_TEST_REDIS_NODE", "rediss://gw:pw@n3.example:6379")
	repl := caddy.NewReplacer()
	keyOf := func(lc LimitsConfig) string {
		t.Helper()
		st, err := redisStoreOf(&lc, repl)
		require.NoError(t, err)
		if lc.Redis != "" || lc.RedisCluster != nil || lc.RedisSentinel != nil {
			require.NotNil(t, st.client)
		}
		return st.key
	}
	node := func(n string) string { return "rediss://gw:pw@" + n + ".example:6379" }
	configs := map[string]LimitsConfig{
		"memory":                 {},
		"one server":             {Redis: node("n1")},
		"cluster":                {RedisCluster: []string{node("n1")}},
		"cluster, two nodes":     {RedisCluster: []string{node("n1"), node("n2")}},
		"cluster, other two":     {RedisCluster: []string{node("n1"), "{env.SWITCHYARD_TEST_REDIS_NODE}"}},
		"sentinel":               {RedisSentinel: &RedisSentinelConfig{Master: "a", Sentinels: []string{node("n1")}}},
		"sentinel, other master": {RedisSentinel: &RedisSentinelConfig{Master: "b", Sentinels: []string{node("n1")}}},
		"sentinel, two":          {RedisSentinel: &RedisSentinelConfig{Master: "a", Sentinels: []string{node("n1"), node("n2")}}},
	}
	seen := map[string]string{}
	for name, lc := range configs {
		k := keyOf(lc)
		if other, ok := seen[k]; ok {
			t.Errorf("%s and %s share a limiter", name, other)
		}
		seen[k] = name
		assert.Equal(t, k, keyOf(lc), "%s: the same configuration again (a reload) keeps its limiter", name)
	}
	// A placeholder resolves to the same node as its value written out.
	assert.Equal(t, keyOf(LimitsConfig{RedisCluster: []string{node("n1"), node("n3")}}), keyOf(configs["cluster, other two"]))
}

// redis_tls_ca is read at load: a file of PEM certificates trusted for rediss:// (with the
// system's), refused when missing, when it holds none, or when the Redis is not TLS.
func TestRedisTLSCAIsCheckedAtLoad(t *testing.T) {
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(caFile, testCAPEM(t), 0o600))
	junk := filepath.Join(dir, "junk.pem")
	require.NoError(t, os.WriteFile(junk, []byte("not a certificate"), 0o600))
	repl := caddy.NewReplacer()
	tlsCluster := []string{"rediss://gw:pw@n1.example:6379"}

	for _, c := range []struct {
		name string
		lc   LimitsConfig
		want string
	}{
		{"missing file", LimitsConfig{RedisCluster: tlsCluster, RedisTLSCA: filepath.Join(dir, "none.pem")}, "redis_tls_ca"},
		{"no certificate", LimitsConfig{RedisCluster: tlsCluster, RedisTLSCA: junk}, "holds no PEM certificate"},
		{"not TLS", LimitsConfig{Redis: "redis://gw:pw@n1.example:6379", RedisTLSCA: caFile}, "redis is not rediss://"},
		{"no Redis", LimitsConfig{RedisTLSCA: caFile}, "no redis, redis_cluster or redis_sentinel"},
	} {
		_, err := redisStoreOf(&c.lc, repl)
		require.Error(t, err, c.name)
		assert.Contains(t, err.Error(), c.want, c.name)
		assert.NotContains(t, err.Error(), "gw:pw", c.name)
	}

	st, err := redisStoreOf(&LimitsConfig{RedisCluster: tlsCluster, RedisTLSCA: caFile}, repl)
	require.NoError(t, err)
	cl := st.client().(*redis.ClusterClient)
	defer cl.Close()
	require.NotNil(t, cl.Options().TLSConfig.RootCAs, "the CA is trusted")
	plain, err := redisStoreOf(&LimitsConfig{RedisCluster: tlsCluster}, repl)
	require.NoError(t, err)
	assert.NotEqual(t, plain.key, st.key, "a CA makes another limiter")
}

// testCAPEM is a self-signed CA certificate, PEM.
func testCAPEM(t *testing.T) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
