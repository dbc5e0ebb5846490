package caddymodule

import (
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/switchyard-gw/switchyard/routing"
)

// AffinityConfig tunes conversation affinity.
type AffinityConfig struct {
	// Header names a further request header that carries a conversation id, beside the
	// ones coding agents send (X-Claude-Code-Session-Id, Session-Id, prompt_cache_key).
	// Default: none.
	Header string `json:"header,omitempty"`
	// TTL is how long a conversation is remembered after its last request. Default: 1h.
	TTL caddy.Duration `json:"ttl,omitempty"`
	// MaxEntries bounds how many conversations are remembered. Default: 100000.
	MaxEntries int `json:"max_entries,omitempty"`
	// Disabled turns affinity off. Default: false.
	Disabled bool `json:"disabled,omitempty"`
}

const (
	defaultAffinityTTL     = time.Hour
	defaultAffinityEntries = 100_000
)

// affinityPool keeps one table per (size, ttl), so a reload with the same settings keeps
// the conversations it knew; the last configuration to let go of a table frees it.
var affinityPool = caddy.NewUsagePool()

type sharedAffinity struct{ *routing.Affinity }

func (sharedAffinity) Destruct() error { return nil }

// table joins the affinity table these settings name; key is what to release it by
// ("" when affinity is off).
func (c *AffinityConfig) table() (table *routing.Affinity, key string, err error) {
	if c != nil && c.Disabled {
		return nil, "", nil
	}
	ttl, limit := defaultAffinityTTL, defaultAffinityEntries
	if c != nil && c.TTL > 0 {
		ttl = time.Duration(c.TTL)
	}
	if c != nil && c.MaxEntries > 0 {
		limit = c.MaxEntries
	}
	key = fmt.Sprintf("affinity/%d/%s", limit, ttl)
	shared, _, err := affinityPool.LoadOrNew(key, func() (caddy.Destructor, error) {
		return sharedAffinity{routing.NewAffinity(limit, ttl)}, nil
	})
	if err != nil {
		return nil, "", err
	}
	return shared.(sharedAffinity).Affinity, key, nil
}

func (a *App) affinityHeader() string {
	if a.Affinity == nil {
		return ""
	}
	return a.Affinity.Header
}
