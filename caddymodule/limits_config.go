package caddymodule

import (
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/switchyard-gw/switchyard/limits"
	"github.com/switchyard-gw/switchyard/protocols"
)

// LimitsConfig says where limit counters live and what keys and projects without limits
// of their own get. Limits themselves are set per key and per project (console, admin
// API, CLI) or per static key here.
type LimitsConfig struct {
	// Redis is the URL of the Redis that several gateways share counters in
	// (redis://[user:password@]host:port/db, rediss:// for TLS); placeholders such as
	// {env.SWITCHYARD_REDIS} are replaced at load. Default: none, counters in this
	// gateway's memory.
	Redis string `json:"redis,omitempty"`
	// RedisCluster are the redis:// or rediss:// URLs of some nodes of a Redis Cluster to
	// share counters in (one is enough: the others are learnt from it; more help while
	// one is down). They share one scheme, user and password: a managed cluster's
	// (ElastiCache, Memorystore, Azure Cache) with rediss:// for TLS. Placeholders are
	// replaced at load. At most one of redis, redis_cluster and redis_sentinel.
	RedisCluster []string `json:"redis_cluster,omitempty"`
	// RedisSentinel is a Redis primary watched by Sentinel to share counters in: the
	// gateways follow it when the Sentinels promote a replica in its place. At most one
	// of redis, redis_cluster and redis_sentinel.
	RedisSentinel *RedisSentinelConfig `json:"redis_sentinel,omitempty"`
	// RedisTLSCA is a file of PEM certificates of the authorities to trust, besides the
	// system's, for a rediss:// Redis whose certificate a private CA signed (Memorystore's
	// server CA, say). Placeholders are replaced at load. Default: the system's only.
	RedisTLSCA string `json:"redis_tls_ca,omitempty"`
	// RedisPrefix starts every counter's name in Redis, followed by a colon; it may not
	// hold '{' or '}' (the names use them for Redis Cluster hash tags). Default:
	// "switchyard".
	RedisPrefix string `json:"redis_prefix,omitempty"`
	// WhenUnreachable is what a request with a spend budget on its path gets while Redis
	// (or, for a budget's first use in a period, the store it is seeded from) does not
	// answer: "refuse" (503, never overspend) or "local" (count in this gateway's memory
	// meanwhile, seeded from the ledger). Rate and concurrency limits always count
	// locally meanwhile. Default: "refuse".
	WhenUnreachable string `json:"when_unreachable,omitempty"`
	// Mode is how a gateway counts in Redis: "lease" takes allowance from Redis in
	// batches and spends it in memory, asking Redis about once in many requests while a
	// scope is far from its limit and at every request near it; "exact" asks Redis at
	// every request, in one round trip, and never refuses while another gateway holds
	// unused allowance. Without redis it has no effect. Default: "lease".
	Mode string `json:"mode,omitempty"`
	// Lease is how long what a gateway that died holds in Redis stays held: in exact
	// mode its unsettled reservations and their concurrency slots (default 15m); through
	// leases, its leases, which a running gateway renews every third of it (default 30s).
	Lease caddy.Duration `json:"lease,omitempty"`
	// DefaultOutputTokens is the output reserved for a request that sets no output cap on
	// a model that declares no max_output_tokens. Default: 4096.
	DefaultOutputTokens int64 `json:"default_output_tokens,omitempty"`
	// DefaultToolUses is the uses reserved for each server-side tool a request declares
	// without a count of its own (a Responses tool, a Messages web search or web fetch
	// without max_uses, each MCP server), at the model's tool prices. Default: 10.
	DefaultToolUses int64 `json:"default_tool_uses,omitempty"`
	// KeyDefaults apply to every key without limits of its own. Default: none.
	KeyDefaults *limits.Policy `json:"key_defaults,omitempty"`
	// ProjectDefaults apply to every project without limits of its own. Default: none.
	ProjectDefaults *limits.Policy `json:"project_defaults,omitempty"`
}

// RedisSentinelConfig names a Redis primary watched by Sentinel.
type RedisSentinelConfig struct {
	// Master is the name the Sentinels know the primary by (their `sentinel monitor`).
	Master string `json:"master,omitempty"`
	// Sentinels are redis:// or rediss:// URLs of the Sentinels. The user, password and
	// database in them are the primary's (and its replicas'); the Sentinels themselves
	// are asked without a password. They share one scheme, user, password and database.
	// Placeholders are replaced at load.
	Sentinels []string `json:"sentinels,omitempty"`
}

// parseLimits reads the `limits` block of the global option:
//
//	limits {
//		redis <url>
//		redis_cluster <url> [<url>...]
//		redis_sentinel <master-name> <sentinel-url> [<sentinel-url>...]
//		redis_tls_ca <pem-file>
//		redis_prefix <prefix>
//		when_unreachable refuse|local
//		mode lease|exact
//		lease <duration>
//		default_output_tokens <n>
//		default_tool_uses <n>
//		key_defaults { <policy> }
//		project_defaults { <policy> }
//	}
func parseLimits(d *caddyfile.Dispenser) (*LimitsConfig, error) {
	lc := new(LimitsConfig)
	if d.NextArg() {
		return nil, d.Errf("limits: takes no arguments, only a block of options")
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		switch opt {
		case "key_defaults", "project_defaults":
			if d.NextArg() {
				return nil, d.Errf("limits: %s: takes a block of limits", opt)
			}
			p, err := parsePolicyBlock(d, "limits: "+opt, true)
			if err != nil {
				return nil, err
			}
			if opt == "key_defaults" {
				lc.KeyDefaults = p
			} else {
				lc.ProjectDefaults = p
			}
			continue
		case "redis_cluster":
			urls := d.RemainingArgs()
			if len(urls) == 0 {
				return nil, d.Errf("limits: redis_cluster: expected the URL of one or more of the cluster's nodes")
			}
			lc.RedisCluster = urls
			continue
		case "redis_sentinel":
			args := d.RemainingArgs()
			if len(args) < 2 {
				return nil, d.Errf("limits: redis_sentinel: expected <master-name> <sentinel-url> [<sentinel-url>...]")
			}
			lc.RedisSentinel = &RedisSentinelConfig{Master: args[0], Sentinels: args[1:]}
			continue
		}
		var v string
		if !d.Args(&v) || d.NextArg() {
			return nil, d.Errf("limits: %s: expected one value", opt)
		}
		switch opt {
		case "redis":
			lc.Redis = v
		case "redis_tls_ca":
			lc.RedisTLSCA = v
		case "redis_prefix":
			if strings.ContainsAny(v, "{}") {
				return nil, d.Errf("limits: redis_prefix: %q holds '{' or '}', which the counters' names use as Redis Cluster hash tags", v)
			}
			lc.RedisPrefix = v
		case "when_unreachable":
			if v != "refuse" && v != "local" {
				return nil, d.Errf("limits: when_unreachable: %q is neither refuse nor local", v)
			}
			lc.WhenUnreachable = v
		case "mode":
			if v != "lease" && v != "exact" {
				return nil, d.Errf("limits: mode: %q is neither lease nor exact", v)
			}
			lc.Mode = v
		case "lease":
			dur, err := caddy.ParseDuration(v)
			if err != nil || dur <= 0 {
				return nil, d.Errf("limits: lease: %q is not a duration", v)
			}
			lc.Lease = caddy.Duration(dur)
		case "default_output_tokens":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 {
				return nil, d.Errf("limits: default_output_tokens: %q is not a positive whole number", v)
			}
			lc.DefaultOutputTokens = n
		case "default_tool_uses":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 || n > protocols.MaxToolUses {
				return nil, d.Errf("limits: default_tool_uses: %q is not a whole number from 1 to %d", v, protocols.MaxToolUses)
			}
			lc.DefaultToolUses = n
		default:
			return nil, d.Errf("limits: unknown option %q", opt)
		}
	}
	return lc, nil
}

// parsePolicyOption reads one limit (rpm, tpm, concurrency, budget, or with perModel a
// `model <id> { ... }` variant) into p; known is false for another option.
func parsePolicyOption(d *caddyfile.Dispenser, where string, p *limits.Policy, perModel bool) (known bool, err error) {
	opt := d.Val()
	switch opt {
	case "rpm", "tpm", "concurrency":
		var v string
		if !d.Args(&v) || d.NextArg() {
			return true, d.Errf("%s: %s: expected one whole number", where, opt)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return true, d.Errf("%s: %s: %q is not a positive whole number", where, opt, v)
		}
		if n > limits.MaxRate {
			return true, d.Errf("%s: %s: %d is more than the most it may be, %d", where, opt, n, int64(limits.MaxRate))
		}
		*map[string]*int64{"rpm": &p.RPM, "tpm": &p.TPM, "concurrency": &p.Concurrency}[opt] = n
	case "budget":
		var v string
		if !d.Args(&v) || d.NextArg() {
			return true, d.Errf("%s: budget: expected <amount>/<day|month|total>, e.g. 50/month", where)
		}
		b, err := limits.ParseBudget(v)
		if err != nil {
			return true, d.Errf("%s: %v", where, err)
		}
		p.Budget = &b
	case "model":
		if !perModel {
			return false, nil
		}
		var id string
		if !d.Args(&id) || d.NextArg() {
			return true, d.Errf("%s: model: expected `model <id> { ... }`", where)
		}
		v, err := parsePolicyBlock(d, where+": model "+strconv.Quote(id), false)
		if err != nil {
			return true, err
		}
		if p.Models == nil {
			p.Models = map[string]*limits.Policy{}
		}
		p.Models[id] = v
	default:
		return false, nil
	}
	return true, nil
}

// parsePolicyBlock reads a block made only of limits.
func parsePolicyBlock(d *caddyfile.Dispenser, where string, perModel bool) (*limits.Policy, error) {
	p := new(limits.Policy)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		known, err := parsePolicyOption(d, where, p, perModel)
		if err != nil {
			return nil, err
		}
		if !known {
			return nil, d.Errf("%s: unknown option %q (rpm, tpm, concurrency, budget%s)", where, d.Val(), map[bool]string{true: ", model", false: ""}[perModel])
		}
	}
	return p, nil
}
