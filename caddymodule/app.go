// Package caddymodule is the thin layer that puts Switchyard into Caddy: the `switchyard`
// app (models, candidates, keys), the HTTP handler modules, and their Caddyfile syntax.
// Protocol, routing and relay logic live in their own packages.
package caddymodule

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/admission"
	"github.com/switchyard-gw/switchyard/alerts"
	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/channel"
	"github.com/switchyard-gw/switchyard/limits"
	"github.com/switchyard-gw/switchyard/metering"
	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/relay"
	"github.com/switchyard-gw/switchyard/routing"
)

func init() {
	caddy.RegisterModule(App{})
}

// DefaultMaxRequestBody is the largest request body accepted when none is configured:
// the size Family B's native API accepts.
const DefaultMaxRequestBody = 32 << 20

// DefaultMaxBodyMemory is the ceiling on request-body bytes held at once when none is
// configured: 32 bodies of the largest default size, a small share of a 2-core 24 GiB
// machine, and far more than the bodies its cores can scan and forward at a time.
const DefaultMaxBodyMemory = 1 << 30

// App is the `switchyard` app: the service models, their candidates, and the keys that
// may call them. The handler modules read it.
type App struct {
	// Models are the service models, in the order GET /v1/models lists them.
	Models []ModelConfig `json:"models,omitempty"`
	// Keys are static API keys.
	Keys []KeyConfig `json:"keys,omitempty"`
	// MaxRequestBody is the largest request body accepted, in bytes. Default: 32 MiB.
	MaxRequestBody int64 `json:"max_request_body,omitempty"`
	// MaxBodyMemory is the most request-body bytes the gateway holds at once, across all
	// requests; a body past it waits up to a second for room, then gets 503 with
	// Retry-After. Default: 1 GiB.
	MaxBodyMemory int64 `json:"max_body_memory,omitempty"`
	// MaxBodyMemoryPerKey is the most of MaxBodyMemory that one key's bodies hold at
	// once; a body of a key past it waits up to a second, then gets 429 with
	// Retry-After, while other keys still find room. Default: half of MaxBodyMemory.
	MaxBodyMemoryPerKey int64 `json:"max_body_memory_per_key,omitempty"`
	// DefaultBodyIdle and DefaultBodyMinRate (bytes/s, 0: none) are the time limits on
	// a request body arriving on a server that sets none of Caddy's own (read_body, or
	// read_body_idle with a min_rate): the longest pause, and the least average rate after
	// a grace of DefaultBodyIdle. Default: 10s and 64 KiB/s; a negative idle: none.
	DefaultBodyIdle    caddy.Duration `json:"default_body_idle,omitempty"`
	DefaultBodyMinRate int64          `json:"default_body_min_rate,omitempty"`
	// Health tunes the candidates' circuit breakers. Default: see HealthConfig.
	Health *HealthConfig `json:"health,omitempty"`
	// Retry is the retry policy of every candidate that sets none of its own, and the
	// request deadline of every model that sets none. Default: see RetryConfig.
	Retry *RetryConfig `json:"retry,omitempty"`
	// Affinity tunes conversation affinity. Default: on, see AffinityConfig.
	Affinity *AffinityConfig `json:"affinity,omitempty"`
	// Store is where keys live; SQLite in Caddy's data directory by default.
	Store *StoreConfig `json:"store,omitempty"`
	// Limits says where limit counters live and the defaults for keys and projects
	// without limits of their own. Default: counters in memory, no default limits.
	Limits *LimitsConfig `json:"limits,omitempty"`
	// Journal is the directory of the usage journal (default: beside the SQLite file,
	// or in Caddy's data directory).
	Journal string `json:"journal,omitempty"`
	// Alerts sends webhooks when budgets cross thresholds, circuits open or close, or
	// the usage journal cannot reach the database. Default: none.
	Alerts *AlertsConfig `json:"alerts,omitempty"`

	manager     *auth.Manager // nil without a key store
	storeKey    string
	ledger      *metering.Ledger // nil without a store
	usageReader metering.Reader  // nil when the store keeps no usage
	// people keeps people, sessions and API tokens: the store, when there is one.
	people access.Store
	// stopSweep ends the departure sweep (nil: not running).
	stopSweep  context.CancelFunc
	requestLog metering.RequestLog // nil when the store keeps no request log
	refusalLog *refusalSampler     // how many of a key's refusals the request log keeps
	ledgerKey  string
	ledgerSink metering.Sink
	ledgerDir  string

	latencyReader metering.LatencyReader // nil when the store keeps no usage
	// ledgerReady is closed once Start has opened the ledger; requests that arrive first
	// (Caddy starts apps in no fixed order) wait for it rather than go unrecorded.
	ledgerReady chan struct{}
	limiter     *limits.Limiter   // nil until provisioned
	limiterKey  string            // in limiterPool
	admission   *admission.Policy // nil until provisioned: nothing is limited
	spend       limits.Seeder     // the store's spend query; nil without a store
	affinity    *routing.Affinity
	affinityKey string // in affinityPool
	healthKeys  []string
	prober      *routing.Prober // nil when nothing is probed
	catalog     *routing.Catalog
	verifier    auth.Verifier
	upstreams   map[*routing.Candidate]*relay.Upstream
	bodyMemory  *relay.BodyMemory // the ceiling every request body is taken from
	models      *modelList
	logger      *zap.Logger
	outbox      alerts.Outbox  // the store's alert outbox; nil without a store
	alerts      *alertsRuntime // nil without alerts

	ctx caddy.Context
	// inFlight counts this configuration's requests in the relay and ends them when the
	// grace period of a stop is over.
	inFlight *inFlight
	// grace is the http app's grace_period (zero: none, requests run to their end).
	grace time.Duration
}

// ModelConfig declares one service model.
type ModelConfig struct {
	// ID is the service model identifier clients send; matched exactly, case included.
	// Required.
	ID string `json:"id"`
	// DisplayName is the model's name for people, in GET /v1/models. Default: the id.
	DisplayName string `json:"display_name,omitempty"`
	// OwnedBy is reported as the model's owner in GET /v1/models. Default: "switchyard".
	OwnedBy string `json:"owned_by,omitempty"`
	// Created is when the model was added (RFC 3339 date or time); reported by GET
	// /v1/models. Default: when the configuration was loaded.
	Created string `json:"created,omitempty"`
	// Protocols lists the protocol tokens the model is offered on (family_a, family_b).
	// When empty, it is the set of its candidates' protocols.
	Protocols []string `json:"protocols,omitempty"`
	// Capabilities are boolean capability tags; `reasoning` is always reported (default
	// false).
	Capabilities map[string]bool `json:"capabilities,omitempty"`
	// Prices are what the model's tokens cost, for metering. Default: all zero.
	Prices *PriceConfig `json:"prices,omitempty"`
	// Candidates are the upstreams that serve the model; at least one is required.
	Candidates []CandidateConfig `json:"candidates,omitempty"`
	// ContextWindow is the model's context window in tokens (input and output
	// together), reported by GET /v1/models and put in client set-ups. Default: none
	// declared.
	ContextWindow int64 `json:"context_window,omitempty"`
	// MaxOutputTokens is the most tokens the model generates in one answer; a request
	// asking for more is refused with 400 before any upstream is called. It must not
	// exceed ContextWindow. Default: none declared (no check).
	MaxOutputTokens int64 `json:"max_output_tokens,omitempty"`
	// RequestTimeout bounds what one request may spend, from its whole body on, before
	// the first byte of an answer: every attempt, retry, back-off and failover together.
	// Default: the retry block's request_timeout (10m).
	RequestTimeout caddy.Duration `json:"request_timeout,omitempty"`
	// FailoverAfterTimeout, when true, lets a request go on to the next candidate after
	// an attempt timed out once its upstream had the whole body (the upstream may still
	// be doing, and billing, that work). Default: the retry block's (false).
	FailoverAfterTimeout *bool `json:"failover_after_timeout,omitempty"`
}

// maxRetries bounds a candidate's retries: each is a full attempt on an upstream that
// just failed, and clients retry on their own as well.
const maxRetries = 10

// RetryConfig is how candidates are tried again within one request.
type RetryConfig struct {
	// Retries is how many further attempts a request may make on one candidate after a
	// failure that retrying can fix (connection refused or reset, a first-byte or
	// first-event timeout, 429, 500, 502, 503, 504). Default: 1.
	Retries *int `json:"retries,omitempty"`
	// Backoff bounds the wait before a first retry; the bound doubles per retry up to
	// MaxBackoff, and the wait is drawn at random below it, never shorter than the
	// upstream's Retry-After. Default: 500ms and 8s.
	Backoff    caddy.Duration `json:"backoff,omitempty"`
	MaxBackoff caddy.Duration `json:"max_backoff,omitempty"`
	// RequestTimeout is the request deadline of models that set none. Default: 10m.
	RequestTimeout caddy.Duration `json:"request_timeout,omitempty"`
	// FailoverAfterTimeout is the failover_after_timeout of models that set none: false
	// ends a request whose attempt timed out after its upstream had the whole body with
	// a 504, billed; true tries the next candidate, which starts the work again.
	// Default: false.
	FailoverAfterTimeout bool `json:"failover_after_timeout,omitempty"`
}

// policy is the retry policy these settings give, the defaults filling what they leave.
func (rc *RetryConfig) policy() (routing.Retry, time.Duration) {
	r, timeout := routing.DefaultRetry, routing.DefaultRequestTimeout
	if rc == nil {
		return r, timeout
	}
	if rc.Retries != nil {
		r.Retries = *rc.Retries
	}
	if rc.Backoff > 0 {
		r.Backoff = time.Duration(rc.Backoff)
	}
	if rc.MaxBackoff > 0 {
		r.MaxBackoff = time.Duration(rc.MaxBackoff)
	}
	r.MaxBackoff = max(r.MaxBackoff, r.Backoff)
	if rc.RequestTimeout > 0 {
		timeout = time.Duration(rc.RequestTimeout)
	}
	return r, timeout
}

// PriceConfig holds decimal prices per million tokens, in the currency the operator
// bills in (kept as micro-units).
type PriceConfig struct {
	// Input is the price of uncached input tokens. Default: 0.
	Input string `json:"input,omitempty"`
	// CachedInput is the price of input read from the prompt cache. Default: Input.
	CachedInput string `json:"cached_input,omitempty"`
	// CacheWrite is the price of input written to the prompt cache. Default: Input.
	CacheWrite string `json:"cache_write,omitempty"`
	// Output is the price of output tokens. Default: 0.
	Output string `json:"output,omitempty"`
	// Reasoning is the price of reasoning and thinking output; it defaults to Output.
	Reasoning string `json:"reasoning,omitempty"`
	// Tools are the prices of server-side tools' uses, per 1,000 uses (not per million
	// tokens), by tool: web_search, web_fetch, file_search, code_interpreter,
	// image_generation, mcp. A tool without a price costs nothing; its uses are still
	// recorded. A candidate's prices take the model's for a tool they leave out.
	// Default: none.
	Tools map[string]string `json:"tools,omitempty"`
}

// setsTokens reports whether the prices set any token price (not only tool prices).
func (pc *PriceConfig) setsTokens() bool {
	return pc.Input != "" || pc.CachedInput != "" || pc.CacheWrite != "" || pc.Output != "" || pc.Reasoning != ""
}

// CandidateConfig declares one supply channel of a model.
type CandidateConfig struct {
	// Name identifies the candidate in logs, metrics and health; never shown to clients.
	// Required, unique within the model.
	Name string `json:"name"`
	// Protocol is the family the upstream speaks: family_a or family_b. Required.
	Protocol string `json:"protocol"`
	// URL is the upstream base URL, path prefix included (required). Family A bases end where the
	// family's SDKs expect (for example https://api.example.com/v1); Family B bases are
	// the API root (https://api.example.com).
	URL string `json:"url,omitempty"`
	// UpstreamModel is the model name the upstream knows; never shown to clients.
	// Required.
	UpstreamModel string `json:"upstream_model"`
	// Credential is sent in the protocol's native header; placeholders such as
	// {env.UPSTREAM_KEY} are replaced when the config loads, and one that resolves to
	// nothing is a configuration error. Default: none sent.
	Credential string `json:"credential,omitempty"`
	// Priority orders candidates: lower is tried first. Default: 0.
	Priority int `json:"priority,omitempty"`
	// Weight shares traffic between healthy candidates of one priority. Default: 1.
	Weight int `json:"weight,omitempty"`
	// DialTimeout bounds connecting to the upstream (TLS included). Default: 5s.
	DialTimeout caddy.Duration `json:"dial_timeout,omitempty"`
	// HeaderTimeout bounds the wait for the response headers; a non-streamed answer's
	// come only when the generation is done. Default: 10m.
	HeaderTimeout caddy.Duration `json:"header_timeout,omitempty"`
	// FirstByteTimeout bounds the time until the answer's first byte (for a stream, its
	// first event); past it the request moves on to the next candidate. Default: 60s
	// for a stream, HeaderTimeout otherwise.
	FirstByteTimeout caddy.Duration `json:"first_byte_timeout,omitempty"`
	// FirstTokenTimeout bounds the wait from a stream's headers to its first event,
	// within what FirstByteTimeout leaves; past it the request moves on (or retries).
	// Default: 15s, or 60s for a model with the reasoning capability.
	FirstTokenTimeout caddy.Duration `json:"first_token_timeout,omitempty"`
	// IdleTimeout ends an answer whose upstream goes silent for longer. Default: 5m.
	IdleTimeout caddy.Duration `json:"idle_timeout,omitempty"`
	// Retries overrides the retry block's retries for this candidate (0: never retried).
	Retries *int `json:"retries,omitempty"`
	// ChannelRaw is the cloud channel the candidate is reached through (a
	// switchyard.channels.* module: bedrock, vertex, azure). With a channel the URL
	// and the credential come from the channel's own block and must not be set here.
	// Default: none, the family's own API at URL.
	ChannelRaw json.RawMessage `json:"channel,omitempty" caddy:"namespace=switchyard.channels inline_key=name"`
	// Prices are what the model's tokens cost when this candidate serves them (regions
	// and channels price one model differently); the ledger bills each answer at the
	// prices of the candidate that served it. Default: the model's prices.
	Prices *PriceConfig `json:"prices,omitempty"`
}

// ChannelModule is a switchyard.channels.* module: once provisioned, the channel of one
// candidate, its credentials loaded.
type ChannelModule interface {
	Channel() channel.Channel
}

// KeyConfig is a static API key.
type KeyConfig struct {
	// Name identifies the key in logs and usage (its id is "static:<name>"). Required.
	Name string `json:"name"`
	// Secret is the key; placeholders such as {env.GATEWAY_KEY} are replaced at load.
	Secret string `json:"secret"`
	// Models, when set, limits the key to these service models. Default: every model.
	Models []string `json:"models,omitempty"`
	// Limits are the key's rates, concurrency and budget. Default: the limits'
	// key_defaults.
	Limits *limits.Policy `json:"limits,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "switchyard", New: func() caddy.Module { return new(App) }}
}

// Provision builds the catalog, the key verifier and one upstream per candidate.
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	a.ctx = ctx
	a.inFlight = newInFlight()
	repl := caddy.NewReplacer()
	now := time.Now().UTC().Truncate(time.Second)

	models := make([]*routing.Model, 0, len(a.Models))
	channels := make(map[*routing.Candidate]channel.Channel)
	for i := range a.Models {
		mc := &a.Models[i]
		loaded, err := mc.loadChannels(ctx)
		if err != nil {
			return err
		}
		m, err := mc.build(repl, now, a.Retry, loaded)
		if err != nil {
			return err
		}
		for j, ch := range loaded {
			if ch != nil {
				channels[m.Candidates[j]] = ch
			}
		}
		models = append(models, m)
	}
	catalog, err := routing.NewCatalog(models)
	if err != nil {
		return err
	}
	a.catalog = catalog

	keys := make([]auth.StaticKey, 0, len(a.Keys))
	for _, k := range a.Keys {
		if _, err := auth.CheckKeyName(k.Name); err != nil {
			return fmt.Errorf("key %q: %v", k.Name, err)
		}
		for _, m := range k.Models {
			if _, ok := catalog.Lookup(m); !ok {
				return fmt.Errorf("key %q: models: %q is not a declared model", k.Name, m)
			}
		}
		if err := k.Limits.Validate(); err != nil {
			return fmt.Errorf("key %q: %v", k.Name, err)
		}
		if err := a.checkPolicyModels(k.Limits); err != nil {
			return fmt.Errorf("key %q: %v", k.Name, err)
		}
		keys = append(keys, auth.StaticKey{Name: k.Name, Secret: repl.ReplaceKnown(k.Secret, ""), Models: k.Models, Limits: k.Limits})
	}
	static, err := auth.NewStaticKeys(keys)
	if err != nil {
		return err
	}
	if err := a.openStore(ctx, repl, static); err != nil {
		return err
	}

	if err := a.openLimiter(repl); err != nil {
		return err
	}
	if err := loadLimitMetrics().register(ctx.GetMetricsRegistry()); err != nil {
		return err
	}

	policy := a.Health.policy()
	a.upstreams = make(map[*routing.Candidate]*relay.Upstream)
	for _, m := range catalog.Models() {
		for _, c := range m.Candidates {
			up := relay.NewUpstream(m.ID, c, relay.Options{Channel: channels[c]})
			// Generation and sub-operations keep separate health, each shared across
			// reloads under the candidate's stable identity.
			for _, h := range []struct {
				key    string
				health **routing.Health
			}{{up.Identity, &up.Health}, {up.Identity + "\x00sub", &up.SubHealth}} {
				shared, _, err := healthPool.LoadOrNew(h.key, func() (caddy.Destructor, error) {
					return routing.NewHealth(policy), nil
				})
				if err != nil {
					return err
				}
				*h.health = shared.(*routing.Health)
				(*h.health).SetPolicy(policy)
				a.healthKeys = append(a.healthKeys, h.key)
			}
			a.upstreams[c] = up
		}
	}
	if a.affinity, a.affinityKey, err = a.Affinity.table(); err != nil {
		return err
	}
	if err := loadMetrics().register(ctx.GetMetricsRegistry()); err != nil {
		return err
	}
	if err := loadUsageMetrics().register(ctx.GetMetricsRegistry()); err != nil {
		return err
	}
	if err := a.provisionAlerts(repl, a.outbox); err != nil {
		return err
	}
	a.models = newModelList(catalog)
	if a.MaxRequestBody <= 0 {
		a.MaxRequestBody = DefaultMaxRequestBody
	}
	if a.MaxBodyMemory <= 0 {
		a.MaxBodyMemory = DefaultMaxBodyMemory
	}
	if a.MaxBodyMemoryPerKey <= 0 {
		// Half: one key uploading slowly, or a great many bodies at once, leaves the
		// other half to every other key. Never less than one body of the largest size
		// needs at worst (its buffer and those it outgrew, twice its length), so that a
		// body the ceiling can hold, its key's share can too.
		a.MaxBodyMemoryPerKey = max(a.MaxBodyMemory/2, min(a.MaxBodyMemory, 2*a.MaxRequestBody))
	}
	if a.MaxBodyMemoryPerKey > a.MaxBodyMemory {
		return fmt.Errorf("max_body_memory_per_key (%d bytes) is more than max_body_memory (%d bytes)", a.MaxBodyMemoryPerKey, a.MaxBodyMemory)
	}
	a.bodyMemory = relay.NewBodyMemory(a.MaxBodyMemory, relay.DefaultBodyMemoryWait).SharePerKey(a.MaxBodyMemoryPerKey)
	if err := a.registerAppMetrics(ctx.GetMetricsRegistry()); err != nil {
		return err
	}
	return nil
}

// loadChannels provisions the channel modules of the model's candidates, in candidate
// order (nil for a candidate without one).
func (mc *ModelConfig) loadChannels(ctx caddy.Context) ([]channel.Channel, error) {
	out := make([]channel.Channel, len(mc.Candidates))
	for j := range mc.Candidates {
		cc := &mc.Candidates[j]
		if cc.ChannelRaw == nil {
			continue
		}
		if cc.URL != "" || cc.Credential != "" {
			return nil, fmt.Errorf("model %q, candidate %q: with a channel, the url and credential go in the channel's block", mc.ID, cc.Name)
		}
		mod, err := ctx.LoadModule(cc, "ChannelRaw")
		if err != nil {
			return nil, fmt.Errorf("model %q, candidate %q: channel: %v", mc.ID, cc.Name, err)
		}
		cm, ok := mod.(ChannelModule)
		if !ok {
			return nil, fmt.Errorf("model %q, candidate %q: channel: %T is not a channel", mc.ID, cc.Name, mod)
		}
		out[j] = cm.Channel()
	}
	return out, nil
}

func (mc ModelConfig) build(repl *caddy.Replacer, now time.Time, retry *RetryConfig, channels []channel.Channel) (*routing.Model, error) {
	m := &routing.Model{
		ID:              mc.ID,
		DisplayName:     mc.DisplayName,
		OwnedBy:         mc.OwnedBy,
		Created:         now,
		ContextWindow:   mc.ContextWindow,
		MaxOutputTokens: mc.MaxOutputTokens,
	}
	if m.DisplayName == "" {
		m.DisplayName = mc.ID
	}
	if m.OwnedBy == "" {
		m.OwnedBy = "switchyard"
	}
	if mc.Created != "" {
		t, err := parseCreated(mc.Created)
		if err != nil {
			return nil, fmt.Errorf("model %q: created: %v", mc.ID, err)
		}
		m.Created = t
	}
	for _, tok := range mc.Protocols {
		f, ok := protocols.ParseFamily(tok)
		if !ok {
			return nil, fmt.Errorf("model %q: protocols: %q is not a protocol token (family_a, family_b)", mc.ID, tok)
		}
		m.Protocols = append(m.Protocols, f)
	}
	for tag, on := range mc.Capabilities {
		if tag == "reasoning" {
			m.Capabilities.Reasoning = on
			continue
		}
		if m.Capabilities.Tags == nil {
			m.Capabilities.Tags = map[string]bool{}
		}
		m.Capabilities.Tags[tag] = on
	}
	if mc.Prices != nil {
		p, err := mc.Prices.build()
		if err != nil {
			return nil, fmt.Errorf("model %q: prices: %v", mc.ID, err)
		}
		m.Prices = p
	}
	retryPolicy, timeout := retry.policy()
	if retryPolicy.Retries < 0 || retryPolicy.Retries > maxRetries {
		return nil, fmt.Errorf("retry: retries: %d is not between 0 and %d", retryPolicy.Retries, maxRetries)
	}
	m.RequestTimeout = timeout
	if mc.RequestTimeout > 0 {
		m.RequestTimeout = time.Duration(mc.RequestTimeout)
	}
	m.FailoverAfterTimeout = retry != nil && retry.FailoverAfterTimeout
	if mc.FailoverAfterTimeout != nil {
		m.FailoverAfterTimeout = *mc.FailoverAfterTimeout
	}
	for j, cc := range mc.Candidates {
		var ch channel.Channel
		if j < len(channels) {
			ch = channels[j]
		}
		c, err := cc.build(repl, ch)
		if err != nil {
			return nil, fmt.Errorf("model %q, candidate %q: %v", mc.ID, cc.Name, err)
		}
		if cc.Prices != nil {
			p, err := cc.Prices.build()
			if err != nil {
				return nil, fmt.Errorf("model %q, candidate %q: prices: %v", mc.ID, cc.Name, err)
			}
			// Token prices are the candidate's when it sets any, else the model's; each
			// tool's price is the candidate's when it sets one, else the model's.
			if !cc.Prices.setsTokens() {
				p = routing.Prices{Input: m.Prices.Input, CachedInput: m.Prices.CachedInput, CacheWrite: m.Prices.CacheWrite,
					Output: m.Prices.Output, Reasoning: m.Prices.Reasoning, Tools: p.Tools}
			}
			for t := range p.Tools {
				if _, own := cc.Prices.Tools[protocols.ServerTool(t).String()]; !own {
					p.Tools[t] = m.Prices.Tools[t]
				}
			}
			c.Prices = &p
		}
		c.Retry = retryPolicy
		if cc.Retries != nil {
			if *cc.Retries < 0 || *cc.Retries > maxRetries {
				return nil, fmt.Errorf("model %q, candidate %q: retries: %d is not between 0 and %d", mc.ID, cc.Name, *cc.Retries, maxRetries)
			}
			c.Retry.Retries = *cc.Retries
		}
		if c.Timeouts.FirstToken == 0 && m.Capabilities.Reasoning {
			// A model that thinks may say nothing until it has thought.
			c.Timeouts.FirstToken = relay.DefaultReasoningFirstToken
		}
		m.Candidates = append(m.Candidates, c)
	}
	return m, nil
}

func parseCreated(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a YYYY-MM-DD date", s)
	}
	return t, nil
}

func (pc PriceConfig) build() (routing.Prices, error) {
	var p routing.Prices
	for _, f := range []struct {
		name string
		in   string
		out  *int64
	}{
		{"input", pc.Input, &p.Input},
		{"cached_input", pc.CachedInput, &p.CachedInput},
		{"cache_write", pc.CacheWrite, &p.CacheWrite},
		{"output", pc.Output, &p.Output},
		{"reasoning", pc.Reasoning, &p.Reasoning},
	} {
		if f.in == "" {
			continue
		}
		v, err := routing.ParsePrice(f.in)
		if err != nil {
			return p, fmt.Errorf("%s: %v", f.name, err)
		}
		*f.out = v
	}
	for name, in := range pc.Tools {
		t, ok := protocols.ParseServerTool(name)
		if !ok {
			return p, fmt.Errorf("tools: unknown tool %q (%s)", name, protocols.ServerToolNames())
		}
		v, err := routing.ParsePrice(in)
		if err != nil {
			return p, fmt.Errorf("tools: %s: %v", name, err)
		}
		if v > routing.MaxToolPrice {
			return p, fmt.Errorf("tools: %s: %q is above the most a tool's uses may cost, 1000000 per 1,000 uses", name, in)
		}
		p.Tools[t] = v
	}
	return p, nil
}

func (cc CandidateConfig) build(repl *caddy.Replacer, ch channel.Channel) (*routing.Candidate, error) {
	f, ok := protocols.ParseFamily(cc.Protocol)
	if !ok {
		return nil, fmt.Errorf("protocol: %q is not a protocol token (family_a, family_b)", cc.Protocol)
	}
	raw := repl.ReplaceKnown(cc.URL, "")
	if ch != nil {
		if !servesFamily(ch, f) {
			return nil, fmt.Errorf("channel %s: serves no %s operation as configured (is its mode right for this protocol?)", ch.Name(), f.Token())
		}
		raw = ch.Endpoint().String()
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("url: %q must be an absolute http or https URL", cc.URL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("url: %q must not have a query or fragment", cc.URL)
	}
	// A credential that is configured but comes out empty (an unset {env.VAR}) would
	// fail every request upstream with 401; it is a configuration error. The message
	// names the field, never a value.
	cred := repl.ReplaceKnown(cc.Credential, "")
	if cc.Credential != "" && strings.TrimSpace(cred) == "" {
		return nil, fmt.Errorf("credential: %s resolves to an empty value (is it set in the gateway's environment?); "+
			"leave the credential out for an upstream without auth", placeholderNames(cc.Credential))
	}
	return &routing.Candidate{
		Name:          cc.Name,
		Protocol:      f,
		BaseURL:       u,
		UpstreamModel: cc.UpstreamModel,
		Credential:    cred,
		Priority:      cc.Priority,
		Weight:        cc.Weight,
		Timeouts: routing.Timeouts{
			Dial:       time.Duration(cc.DialTimeout),
			Header:     time.Duration(cc.HeaderTimeout),
			FirstByte:  time.Duration(cc.FirstByteTimeout),
			FirstToken: time.Duration(cc.FirstTokenTimeout),
			Idle:       time.Duration(cc.IdleTimeout),
		},
	}, nil
}

// servesFamily reports whether a channel serves any generation operation of family f: a
// channel set up for the other family (an Azure OpenAI deployment under a family_b
// candidate) would only ever be skipped.
func servesFamily(ch channel.Channel, f protocols.Family) bool {
	kinds := []protocols.Kind{protocols.KindMessages}
	if f == protocols.FamilyA {
		kinds = []protocols.Kind{protocols.KindChat, protocols.KindResponses}
	}
	for _, k := range kinds {
		if ch.Offers(protocols.Operation{Family: f, Kind: k}) {
			return true
		}
	}
	return false
}

// placeholderPattern matches one Caddy placeholder such as {env.OPENAI_API_KEY}.
var placeholderPattern = regexp.MustCompile(`\{[^{}\s]+\}`)

// placeholderNames describes a configured value that resolved to nothing by the
// placeholders it is made of; a value with anything else in it is not quoted, so no
// part of a secret reaches an error message.
func placeholderNames(raw string) string {
	names := placeholderPattern.FindAllString(raw, -1)
	if len(names) == 0 || strings.TrimSpace(placeholderPattern.ReplaceAllString(raw, "")) != "" {
		return "the value"
	}
	return strings.Join(names, "")
}

// Start implements caddy.App.
func (a *App) Start() error {
	if a.ledgerSink != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := a.openLedger(ctx, a.ledgerDir, a.ledgerSink); err != nil {
			return err
		}
		close(a.ledgerReady)
	}
	a.startProbes()
	a.startAlerts()
	a.startDepartureSweep()
	// Every app is provisioned by now; the http app's grace period bounds how long this
	// configuration's requests may run on after a reload replaces it.
	if h, err := a.ctx.AppIfConfigured("http"); err == nil {
		if httpApp, ok := h.(*caddyhttp.App); ok {
			a.grace = time.Duration(httpApp.GracePeriod)
		}
	}
	return nil
}

// ledgerOpen reports whether the usage ledger is open (true without a store).
func (a *App) ledgerOpen() bool {
	if a.ledgerReady == nil {
		return true
	}
	select {
	case <-a.ledgerReady:
		return true
	default:
		return false
	}
}

// Stop implements caddy.App. In-flight requests keep their connections: on a reload
// Caddy lets them finish, and only idle connections of this configuration are closed.
func (a *App) Stop() error {
	if a.inFlight != nil {
		a.inFlight.stopBegun.Store(true)
	}
	if a.stopSweep != nil {
		a.stopSweep()
	}
	a.stopAlerts()
	a.stopProbes()
	for _, u := range a.upstreams {
		u.Close()
	}
	return nil
}

// Cleanup implements caddy.CleanerUpper: this configuration's hold on each candidate's
// shared health is released (the health itself lives on while a newer one uses it), and
// its hold on the ledger, the limiter and the store once its requests are over.
//
// Caddy cleans a configuration up after every app's Stop. On exit the http app's Stop
// has waited out the grace period first, so the requests still running are past it:
// they are ended here, each with its family's error event and its usage record, before
// the ledger's last flush. On a reload the old configuration's requests run on for the
// grace period, and hold what they write to until they end.
func (a *App) Cleanup() error {
	for _, key := range a.healthKeys {
		_, _ = healthPool.Delete(key)
	}
	if a.affinityKey != "" {
		_, _ = affinityPool.Delete(a.affinityKey)
	}
	release := func() {
		// The ledger goes first: its last flush needs the store. The limiter's
		// destructor gives back what it holds in Redis.
		if a.ledgerKey != "" {
			_, _ = ledgerPool.Delete(a.ledgerKey)
		}
		if a.limiterKey != "" {
			_, _ = limiterPool.Delete(a.limiterKey)
		}
		if a.storeKey != "" {
			_, _ = storePool.Delete(a.storeKey)
		}
	}
	if a.inFlight == nil { // not provisioned
		release()
		return nil
	}
	a.inFlight.settle(caddy.Exiting(), a.grace, a.logger, release)
	return nil
}

// upstreamsFor lists the upstreams of a model on one protocol, in the order to try them.
func (a *App) upstreamsFor(m *routing.Model, f protocols.Family) []*relay.Upstream {
	cands := m.CandidatesFor(f)
	out := make([]*relay.Upstream, 0, len(cands))
	for _, c := range cands {
		out = append(out, a.upstreams[c])
	}
	return out
}

// Interface guards
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
)
