package caddymodule

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"

	"github.com/switchyard-gw/switchyard/limits"
	"github.com/switchyard-gw/switchyard/protocols"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("switchyard", parseGlobalOption)
	for _, d := range []struct {
		name  string
		parse httpcaddyfile.UnmarshalHandlerFunc
	}{
		{"switchyard_auth", unmarshalHandler[Auth]},
		{"switchyard_model", unmarshalHandler[Model]},
		{"switchyard_proxy", unmarshalHandler[Proxy]},
		{"switchyard_errors", unmarshalHandler[Errors]},
		{"switchyard_simulator", unmarshalHandler[Simulator]},
		{"switchyard_console", unmarshalHandler[Console]},
		{"switchyard_ready", unmarshalHandler[Ready]},
	} {
		httpcaddyfile.RegisterHandlerDirective(d.name, d.parse)
		// Each lands just before reverse_proxy, in this order, so a site block needs no
		// `route` to run them in sequence.
		httpcaddyfile.RegisterDirectiveOrder(d.name, httpcaddyfile.Before, "reverse_proxy")
	}
}

// unmarshalHandler builds a handler from its directive with the handler's own
// UnmarshalCaddyfile.
func unmarshalHandler[T any, PT interface {
	*T
	caddyhttp.MiddlewareHandler
	caddyfile.Unmarshaler
}](h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	handler := PT(new(T))
	err := handler.UnmarshalCaddyfile(h.Dispenser)
	return handler, err
}

// takesNoOptions is UnmarshalCaddyfile for a directive without arguments or options.
func takesNoOptions(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	name := d.Val()
	if d.NextArg() {
		return d.ArgErr()
	}
	if d.NextBlock(0) {
		return d.Errf("%s takes no options", name)
	}
	return nil
}

// parseGlobalOption reads the `switchyard` global option:
//
//	switchyard {
//		max_request_body <size>
//		max_body_memory <size>
//		max_body_memory_per_key <size>
//		default_read_body_idle <duration> [<min_rate bytes/s>]
//		key <name> <secret> {
//			models <model...>
//			rpm <n>
//			tpm <n>
//			concurrency <n>
//			budget <amount>/<day|month|total>
//			model <id> { rpm|tpm|concurrency|budget ... }
//		}
//		limits {
//			redis <url>
//			redis_cluster <url> [<url>...]
//			redis_sentinel <master-name> <sentinel-url> [<sentinel-url>...]
//			redis_tls_ca <pem-file>
//			redis_prefix <prefix>
//			when_unreachable refuse|local
//			mode lease|exact
//			lease <duration>
//			default_output_tokens <n>
//			default_tool_uses <n>
//			key_defaults { <limits as in key> }
//			project_defaults { <limits as in key> }
//		}
//		store sqlite [file] | store postgres <dsn> | store off
//		journal <dir>
//		alerts {
//			webhook <url> {
//				secret <secret or {env.VAR}>
//				format json|slack
//				events budget|circuit|ledger...
//			}
//			budget_thresholds <percent...>
//			ledger_after <duration>
//			poll <duration>
//			backoff <duration> [<max duration>]
//		}
//		health {
//			failure_threshold <n>
//			window <duration>
//			cooldown <duration>
//			max_cooldown <duration>
//			half_open_probes <n>
//			probe models|off
//			probe_interval <duration>
//			probe_max_interval <duration>
//		}
//		retry {
//			retries <n>
//			backoff <duration> [<max duration>]
//			request_timeout <duration>
//			failover_after_timeout [true|false]
//		}
//		affinity [off] {
//			header <name>
//			ttl <duration>
//			max_entries <n>
//		}
//		model <id> {
//			display_name <text>
//			owned_by <text>
//			created <YYYY-MM-DD>
//			protocols <family_a|family_b...>
//			reasoning [true|false]
//			capability <tag> [true|false]
//			context_window <tokens>
//			max_output_tokens <tokens>
//			request_timeout <duration>
//			failover_after_timeout [true|false]
//			price <input|cached_input|cache_write|output|reasoning> <per-million> ...
//			candidate <name> {
//				protocol <family_a|family_b>
//				url <base url>
//				upstream_model <name>
//				credential <secret or {env.VAR}>
//				priority <n>
//				weight <n>
//				dial_timeout <duration>
//				header_timeout <duration>
//				first_byte_timeout <duration>
//				first_token_timeout <duration>
//				idle_timeout <duration>
//				retries <n>
//				channel <bedrock|vertex|azure> { ... }
//				price <input|cached_input|cache_write|output|reasoning> <per-million> ...
//			}
//		}
//	}
func parseGlobalOption(d *caddyfile.Dispenser, _ any) (any, error) {
	app := new(App)
	d.Next() // the option name
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "max_request_body":
			if !d.NextArg() {
				return nil, d.ArgErr()
			}
			size, err := humanize.ParseBytes(d.Val())
			if err != nil || size == 0 {
				return nil, d.Errf("max_request_body: %q is not a size", d.Val())
			}
			app.MaxRequestBody = int64(size)
		case "max_body_memory":
			if !d.NextArg() {
				return nil, d.ArgErr()
			}
			size, err := humanize.ParseBytes(d.Val())
			if err != nil || size == 0 || size > math.MaxInt64 {
				return nil, d.Errf("max_body_memory: %q is not a size", d.Val())
			}
			app.MaxBodyMemory = int64(size)
		case "max_body_memory_per_key":
			if !d.NextArg() {
				return nil, d.ArgErr()
			}
			size, err := humanize.ParseBytes(d.Val())
			if err != nil || size == 0 || size > math.MaxInt64 {
				return nil, d.Errf("max_body_memory_per_key: %q is not a size", d.Val())
			}
			app.MaxBodyMemoryPerKey = int64(size)
		case "default_read_body_idle":
			// As Caddy's timeouts { read_body_idle <duration> [<min_rate>] }.
			args := d.RemainingArgs()
			if len(args) < 1 || len(args) > 2 {
				return nil, d.ArgErr()
			}
			dur, err := caddy.ParseDuration(args[0])
			if err != nil || dur == 0 {
				return nil, d.Errf("default_read_body_idle: %q is not a duration (a negative one turns the limit off)", args[0])
			}
			app.DefaultBodyIdle = caddy.Duration(dur)
			if len(args) == 2 {
				rate, err := humanize.ParseBytes(args[1])
				if err != nil {
					return nil, d.Errf("default_read_body_idle: min_rate %q is not a size per second", args[1])
				}
				app.DefaultBodyMinRate = int64(rate)
			}
		case "key":
			k, err := parseKey(d)
			if err != nil {
				return nil, err
			}
			app.Keys = append(app.Keys, k)
		case "model":
			m, err := parseModel(d)
			if err != nil {
				return nil, err
			}
			app.Models = append(app.Models, m)
		case "store":
			sc := new(StoreConfig)
			if !d.NextArg() {
				return nil, d.Errf("store: expected `store sqlite [file]`, `store postgres <dsn>` or `store off`")
			}
			sc.Driver = d.Val()
			if d.NextArg() {
				sc.DSN = d.Val()
			}
			if d.NextArg() {
				return nil, d.Errf("store: too many arguments (quote a DSN that has spaces)")
			}
			app.Store = sc
		case "journal":
			if !d.Args(&app.Journal) || d.NextArg() {
				return nil, d.Errf("journal: expected one directory")
			}
		case "health":
			h, err := parseHealth(d)
			if err != nil {
				return nil, err
			}
			app.Health = h
		case "retry":
			rc, err := parseRetry(d)
			if err != nil {
				return nil, err
			}
			app.Retry = rc
		case "affinity":
			a, err := parseAffinity(d)
			if err != nil {
				return nil, err
			}
			app.Affinity = a
		case "limits":
			lc, err := parseLimits(d)
			if err != nil {
				return nil, err
			}
			app.Limits = lc
		case "alerts":
			ac, err := parseAlerts(d)
			if err != nil {
				return nil, err
			}
			app.Alerts = ac
		default:
			return nil, d.Errf("switchyard: unknown option %q", d.Val())
		}
	}
	return httpcaddyfile.App{Name: "switchyard", Value: caddyconfig.JSON(app, nil)}, nil
}

func parseKey(d *caddyfile.Dispenser) (KeyConfig, error) {
	var k KeyConfig
	if !d.Args(&k.Name, &k.Secret) {
		return k, d.Errf("key: expected `key <name> <secret>`")
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "models":
			k.Models = append(k.Models, d.RemainingArgs()...)
		default:
			if k.Limits == nil {
				k.Limits = new(limits.Policy)
			}
			known, err := parsePolicyOption(d, "key "+strconv.Quote(k.Name), k.Limits, true)
			if err != nil {
				return k, err
			}
			if !known {
				return k, d.Errf("key %q: unknown option %q", k.Name, d.Val())
			}
		}
	}
	return k, nil
}

func parseModel(d *caddyfile.Dispenser) (ModelConfig, error) {
	var m ModelConfig
	if !d.Args(&m.ID) {
		return m, d.Errf("model: expected `model <id> { ... }`")
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		switch opt {
		case "display_name", "owned_by", "created":
			var v string
			if !d.Args(&v) {
				return m, d.Errf("model %q: %s: expected one value", m.ID, opt)
			}
			switch opt {
			case "display_name":
				m.DisplayName = v
			case "owned_by":
				m.OwnedBy = v
			default:
				m.Created = v
			}
		case "context_window", "max_output_tokens":
			var v string
			if !d.Args(&v) || d.NextArg() {
				return m, d.Errf("model %q: %s: expected one number of tokens", m.ID, opt)
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 {
				return m, d.Errf("model %q: %s: %q is not a positive whole number of tokens", m.ID, opt, v)
			}
			if opt == "context_window" {
				m.ContextWindow = n
			} else {
				m.MaxOutputTokens = n
			}
		case "request_timeout":
			var v string
			if !d.Args(&v) || d.NextArg() {
				return m, d.Errf("model %q: request_timeout: expected one duration", m.ID)
			}
			dur, err := caddy.ParseDuration(v)
			if err != nil || dur <= 0 {
				return m, d.Errf("model %q: request_timeout: %q is not a duration", m.ID, v)
			}
			m.RequestTimeout = caddy.Duration(dur)
		case "protocols":
			m.Protocols = append(m.Protocols, d.RemainingArgs()...)
			if len(m.Protocols) == 0 {
				return m, d.Errf("model %q: protocols: expected family_a and/or family_b", m.ID)
			}
		case "failover_after_timeout":
			on, err := flagValue(d.RemainingArgs())
			if err != nil {
				return m, d.Errf("model %q: failover_after_timeout: %v", m.ID, err)
			}
			m.FailoverAfterTimeout = &on
		case "reasoning", "capability":
			tag := "reasoning"
			if opt == "capability" && !d.Args(&tag) {
				return m, d.Errf("model %q: capability: expected `capability <tag> [true|false]`", m.ID)
			}
			on := true
			if d.NextArg() {
				v, err := strconv.ParseBool(d.Val())
				if err != nil {
					return m, d.Errf("model %q: %s: %q is not true or false", m.ID, opt, d.Val())
				}
				on = v
			}
			if m.Capabilities == nil {
				m.Capabilities = map[string]bool{}
			}
			m.Capabilities[tag] = on
		case "price":
			if err := parsePrice(d, &m.Prices); err != nil {
				return m, d.Errf("model %q: %v", m.ID, err)
			}
		case "tool_price":
			if err := parseToolPrice(d, &m.Prices); err != nil {
				return m, d.Errf("model %q: %v", m.ID, err)
			}
		case "candidate":
			c, err := parseCandidate(d, m.ID)
			if err != nil {
				return m, err
			}
			m.Candidates = append(m.Candidates, c)
		default:
			return m, d.Errf("model %q: unknown option %q", m.ID, opt)
		}
	}
	return m, nil
}

func parseCandidate(d *caddyfile.Dispenser, modelID string) (CandidateConfig, error) {
	var c CandidateConfig
	if !d.Args(&c.Name) {
		return c, d.Errf("model %q: candidate: expected `candidate <name> { ... }`", modelID)
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		if opt == "channel" {
			// channel <name> { ... }: the module switchyard.channels.<name> reads its block.
			var name string
			if !d.Args(&name) {
				return c, d.Errf("model %q, candidate %q: channel: expected `channel <bedrock|vertex|azure> { ... }`", modelID, c.Name)
			}
			mod, err := caddyfile.UnmarshalModule(d, "switchyard.channels."+name)
			if err != nil {
				return c, d.Errf("model %q, candidate %q: channel %s: %v", modelID, c.Name, name, err)
			}
			c.ChannelRaw = caddyconfig.JSONModuleObject(mod, "name", name, nil)
			continue
		}
		if opt == "price" || opt == "tool_price" {
			// A candidate's own prices: a region or a channel may charge differently.
			parse := parsePrice
			if opt == "tool_price" {
				parse = parseToolPrice
			}
			if err := parse(d, &c.Prices); err != nil {
				return c, d.Errf("model %q, candidate %q: %v", modelID, c.Name, err)
			}
			continue
		}
		var v string
		if !d.Args(&v) {
			return c, d.Errf("model %q, candidate %q: %s: expected one value", modelID, c.Name, opt)
		}
		switch opt {
		case "protocol":
			c.Protocol = v
		case "url":
			c.URL = v
		case "upstream_model":
			c.UpstreamModel = v
		case "credential":
			c.Credential = v
		case "priority", "weight":
			n, err := strconv.Atoi(v)
			if err != nil {
				return c, d.Errf("model %q, candidate %q: %s: %q is not a whole number", modelID, c.Name, opt, v)
			}
			if opt == "priority" {
				c.Priority = n
			} else {
				c.Weight = n
			}
		case "dial_timeout", "header_timeout", "first_byte_timeout", "first_token_timeout", "idle_timeout":
			dur, err := caddy.ParseDuration(v)
			if err != nil || dur <= 0 {
				return c, d.Errf("model %q, candidate %q: %s: %q is not a duration", modelID, c.Name, opt, v)
			}
			*map[string]*caddy.Duration{
				"dial_timeout": &c.DialTimeout, "header_timeout": &c.HeaderTimeout,
				"first_byte_timeout": &c.FirstByteTimeout, "first_token_timeout": &c.FirstTokenTimeout,
				"idle_timeout": &c.IdleTimeout,
			}[opt] = caddy.Duration(dur)
		case "retries":
			n, err := parseRetries(v)
			if err != nil {
				return c, d.Errf("model %q, candidate %q: %v", modelID, c.Name, err)
			}
			c.Retries = &n
		default:
			return c, d.Errf("model %q, candidate %q: unknown option %q", modelID, c.Name, opt)
		}
		if d.NextArg() {
			return c, d.Errf("model %q, candidate %q: %s: takes one value", modelID, c.Name, opt)
		}
	}
	return c, nil
}

// parsePrice reads `price <kind> <per-million> ...` into *p, creating it.
func parsePrice(d *caddyfile.Dispenser, p **PriceConfig) error {
	if *p == nil {
		*p = new(PriceConfig)
	}
	args := d.RemainingArgs()
	if len(args) == 0 || len(args)%2 != 0 {
		return fmt.Errorf("price: expected pairs like `price input 0.15 output 0.60`")
	}
	for i := 0; i < len(args); i += 2 {
		target := map[string]*string{
			"input": &(*p).Input, "cached_input": &(*p).CachedInput,
			"cache_write": &(*p).CacheWrite, "output": &(*p).Output,
			"reasoning": &(*p).Reasoning,
		}[args[i]]
		if target == nil {
			return fmt.Errorf("price: unknown kind %q (input, cached_input, cache_write, output, reasoning)", args[i])
		}
		*target = args[i+1]
	}
	return nil
}

// parseToolPrice reads `tool_price <tool> <price per 1,000 uses> [<tool> <price>]...`.
func parseToolPrice(d *caddyfile.Dispenser, p **PriceConfig) error {
	if *p == nil {
		*p = new(PriceConfig)
	}
	args := d.RemainingArgs()
	if len(args) == 0 || len(args)%2 != 0 {
		return fmt.Errorf("tool_price: expected pairs of a tool and its price per 1,000 uses, like `tool_price web_search 10`")
	}
	for i := 0; i < len(args); i += 2 {
		if _, ok := protocols.ParseServerTool(args[i]); !ok {
			return fmt.Errorf("tool_price: unknown tool %q (%s)", args[i], protocols.ServerToolNames())
		}
		if (*p).Tools == nil {
			(*p).Tools = map[string]string{}
		}
		(*p).Tools[args[i]] = args[i+1]
	}
	return nil
}

// parseRetries reads a retry count.
func parseRetries(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > maxRetries {
		return 0, fmt.Errorf("retries: %q is not a whole number from 0 to %d", v, maxRetries)
	}
	return n, nil
}

// flagValue reads an option that is on when named alone: `opt`, `opt true`, `opt false`.
func flagValue(args []string) (bool, error) {
	switch len(args) {
	case 0:
		return true, nil
	case 1:
		v, err := strconv.ParseBool(args[0])
		if err != nil {
			return false, fmt.Errorf("%q is not true or false", args[0])
		}
		return v, nil
	}
	return false, fmt.Errorf("expected at most one value, true or false")
}

func parseRetry(d *caddyfile.Dispenser) (*RetryConfig, error) {
	rc := new(RetryConfig)
	if d.NextArg() {
		return nil, d.Errf("retry: takes no arguments, only a block of options")
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		args := d.RemainingArgs()
		if opt == "failover_after_timeout" {
			on, err := flagValue(args)
			if err != nil {
				return nil, d.Errf("retry: failover_after_timeout: %v", err)
			}
			rc.FailoverAfterTimeout = on
			continue
		}
		if len(args) != 1 && !(opt == "backoff" && len(args) == 2) {
			return nil, d.Errf("retry: %s: wrong number of values", opt)
		}
		switch opt {
		case "retries":
			n, err := parseRetries(args[0])
			if err != nil {
				return nil, d.Errf("retry: %v", err)
			}
			rc.Retries = &n
		case "backoff", "request_timeout":
			for i, v := range args {
				dur, err := caddy.ParseDuration(v)
				if err != nil || dur <= 0 {
					return nil, d.Errf("retry: %s: %q is not a duration", opt, v)
				}
				switch {
				case opt == "request_timeout":
					rc.RequestTimeout = caddy.Duration(dur)
				case i == 0:
					rc.Backoff = caddy.Duration(dur)
				default:
					rc.MaxBackoff = caddy.Duration(dur)
				}
			}
		default:
			return nil, d.Errf("retry: unknown option %q", opt)
		}
	}
	return rc, nil
}

func parseHealth(d *caddyfile.Dispenser) (*HealthConfig, error) {
	h := new(HealthConfig)
	if d.NextArg() {
		return nil, d.Errf("health: takes no arguments, only a block of options")
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		var v string
		if !d.Args(&v) || d.NextArg() {
			return nil, d.Errf("health: %s: expected one value", opt)
		}
		switch opt {
		case "failure_threshold", "half_open_probes":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, d.Errf("health: %s: %q is not a positive whole number", opt, v)
			}
			if opt == "failure_threshold" {
				h.FailureThreshold = n
			} else {
				h.HalfOpenProbes = n
			}
		case "window", "cooldown", "max_cooldown", "probe_interval", "probe_max_interval":
			dur, err := caddy.ParseDuration(v)
			if err != nil || dur <= 0 {
				return nil, d.Errf("health: %s: %q is not a duration", opt, v)
			}
			*map[string]*caddy.Duration{"window": &h.Window, "cooldown": &h.Cooldown, "max_cooldown": &h.MaxCooldown,
				"probe_interval": &h.ProbeInterval, "probe_max_interval": &h.ProbeMaxInterval}[opt] = caddy.Duration(dur)
		case "probe":
			if v != probeModels && v != probeOff {
				return nil, d.Errf("health: probe: expected models or off, not %q", v)
			}
			h.Probe = v
		default:
			return nil, d.Errf("health: unknown option %q", opt)
		}
	}
	if err := h.validate(); err != nil {
		return nil, d.Err(err.Error())
	}
	return h, nil
}

func parseAffinity(d *caddyfile.Dispenser) (*AffinityConfig, error) {
	a := new(AffinityConfig)
	if d.NextArg() {
		if d.Val() != "off" {
			return nil, d.Errf("affinity: expected `affinity off` or a block")
		}
		a.Disabled = true
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		var v string
		if !d.Args(&v) || d.NextArg() {
			return nil, d.Errf("affinity: %s: expected one value", opt)
		}
		switch opt {
		case "header":
			a.Header = v
		case "ttl":
			dur, err := caddy.ParseDuration(v)
			if err != nil || dur <= 0 {
				return nil, d.Errf("affinity: ttl: %q is not a duration", v)
			}
			a.TTL = caddy.Duration(dur)
		case "max_entries":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, d.Errf("affinity: max_entries: %q is not a positive whole number", v)
			}
			a.MaxEntries = n
		default:
			return nil, d.Errf("affinity: unknown option %q", opt)
		}
	}
	return a, nil
}

// parseAlerts reads the alerts block (see parseGlobalOption).
func parseAlerts(d *caddyfile.Dispenser) (*AlertsConfig, error) {
	ac := new(AlertsConfig)
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "webhook":
			var wc WebhookConfig
			if !d.Args(&wc.URL) || d.NextArg() {
				return nil, d.Errf("alerts: webhook: expected one URL")
			}
			for inner := d.Nesting(); d.NextBlock(inner); {
				switch opt := d.Val(); opt {
				case "secret", "format":
					var v string
					if !d.Args(&v) || d.NextArg() {
						return nil, d.Errf("alerts: webhook: %s: expected one value", opt)
					}
					if opt == "secret" {
						wc.Secret = v
					} else {
						wc.Format = v
					}
				case "events":
					wc.Events = d.RemainingArgs()
					if len(wc.Events) == 0 {
						return nil, d.Errf("alerts: webhook: events: expected budget, circuit or ledger")
					}
				default:
					return nil, d.Errf("alerts: webhook: unknown option %q", opt)
				}
			}
			ac.Webhooks = append(ac.Webhooks, wc)
		case "budget_thresholds":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return nil, d.ArgErr()
			}
			for _, a := range args {
				n, err := strconv.Atoi(strings.TrimSuffix(a, "%"))
				if err != nil {
					return nil, d.Errf("alerts: budget_thresholds: %q is not a percent", a)
				}
				ac.BudgetThresholds = append(ac.BudgetThresholds, n)
			}
		case "backoff":
			args := d.RemainingArgs()
			if len(args) < 1 || len(args) > 2 {
				return nil, d.ArgErr()
			}
			for i, a := range args {
				dur, err := caddy.ParseDuration(a)
				if err != nil || dur <= 0 {
					return nil, d.Errf("alerts: backoff: %q is not a duration", a)
				}
				if i == 0 {
					ac.Backoff = caddy.Duration(dur)
				} else {
					ac.MaxBackoff = caddy.Duration(dur)
				}
			}
		case "ledger_after", "poll":
			opt := d.Val()
			var v string
			if !d.Args(&v) || d.NextArg() {
				return nil, d.ArgErr()
			}
			dur, err := caddy.ParseDuration(v)
			if err != nil || dur <= 0 {
				return nil, d.Errf("alerts: %s: %q is not a duration", opt, v)
			}
			if opt == "poll" {
				ac.Poll = caddy.Duration(dur)
			} else {
				ac.LedgerAfter = caddy.Duration(dur)
			}
		default:
			return nil, d.Errf("alerts: unknown option %q", d.Val())
		}
	}
	return ac, nil
}
