package relay

import (
	"crypto/tls"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-gw/switchyard/channel"
	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// Default limits of one attempt, used where a candidate sets none.
const (
	DefaultDialTimeout = 5 * time.Second
	// DefaultHeaderTimeout is long because a non-streamed answer's headers come only
	// when the whole generation is done, which takes minutes for a reasoning model.
	DefaultHeaderTimeout = 10 * time.Minute
	// DefaultStreamFirstByte bounds a stream's first event: a healthy upstream sends
	// one at once, so a silent one is moved on from well before a user gives up.
	DefaultStreamFirstByte = 60 * time.Second
	// DefaultFirstToken bounds the wait from a stream's headers to its first event: a
	// healthy upstream that has sent its headers sends an event within seconds, and a
	// person at a coding agent gives up long before a minute. A model that thinks before
	// its first event (OpenAI's reasoning models on Chat Completions) is given
	// DefaultReasoningFirstToken by the configuration instead.
	DefaultFirstToken          = 15 * time.Second
	DefaultReasoningFirstToken = 60 * time.Second
	// DefaultIdleTimeout bounds the silence between two reads of an answer. Reasoning
	// streams can be quiet for a while; a stalled one must still end.
	DefaultIdleTimeout = 5 * time.Minute
)

// Upstream is a candidate ready to be called: its own transport (connection pool, TLS,
// timeouts) and where it points. One is built per candidate per configuration.
type Upstream struct {
	Candidate *routing.Candidate
	// ModelID is the service model the candidate belongs to.
	ModelID string

	transport *http.Transport
	scheme    string
	host      string
	basePath  string
	// secrets are masked in anything passed back to a client; names (a channel's
	// regions, resources and deployments) only in error bodies and events.
	secrets []string
	names   []string

	// Health is the candidate's live health for generation, shared across configuration
	// reloads by whoever builds the upstream; NewUpstream gives it a fresh one.
	Health *routing.Health
	// SubHealth is its health for sub-operations (token counts, compaction), kept apart:
	// an upstream that serves generation well but one sub-operation badly is still a
	// good candidate for generation.
	SubHealth *routing.Health
	// Identity names the candidate stably across reloads (affinity, health).
	Identity string

	channel channel.Channel        // nil: the family's own API
	runtime channel.RuntimeSecrets // the channel, when it obtains credentials as it runs
}

// Options tune how upstreams are reached.
type Options struct {
	// TLS is the client TLS configuration for https upstreams; nil uses the system roots.
	TLS *tls.Config
	// Channel, when set, is the cloud channel the candidate is reached through; its
	// endpoint is then the candidate's base URL.
	Channel channel.Channel
}

// NewUpstream prepares a candidate of model modelID.
func NewUpstream(modelID string, c *routing.Candidate, opts Options) *Upstream {
	dial := c.Timeouts.Dial
	if dial <= 0 {
		dial = DefaultDialTimeout
	}
	header := c.Timeouts.Header
	if header <= 0 {
		header = DefaultHeaderTimeout
	}
	t := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: dial, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       opts.TLS,
		TLSHandshakeTimeout:   dial,
		ResponseHeaderTimeout: header,
		MaxIdleConns:          0,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		// The gateway reads every body to put the service model back, so it asks for
		// identity encoding itself and must not have the transport decode for it.
		DisableCompression: true,
		ForceAttemptHTTP2:  c.BaseURL.Scheme == "https",
		// Each open stream keeps its connection's buffers: small ones keep ten thousand
		// streams affordable, and large reads and writes bypass them anyway.
		WriteBufferSize: 2 << 10,
		ReadBufferSize:  4 << 10,
	}
	secrets := []string{c.BaseURL.Host}
	if h := c.BaseURL.Hostname(); h != c.BaseURL.Host {
		secrets = append(secrets, h)
	}
	if c.Credential != "" {
		secrets = append(secrets, c.Credential)
	}
	var names []string
	if opts.Channel != nil {
		channelSecrets := opts.Channel.Secrets()
		if ms, ok := opts.Channel.(channel.ModelSecrets); ok {
			channelSecrets = append(channelSecrets, ms.ModelSecrets(c.UpstreamModel)...)
		}
		for _, s := range channelSecrets {
			if len(s) >= 3 { // a shorter one would mask ordinary text
				secrets = append(secrets, s)
			}
		}
		for _, n := range opts.Channel.Names() {
			// A name inside the service model the client asked for is no secret from it,
			// and the upstream model is already put back as the service model.
			if len(n) >= 3 && n != c.UpstreamModel && !strings.Contains(modelID, n) {
				names = append(names, n)
			}
		}
	}
	runtime, _ := opts.Channel.(channel.RuntimeSecrets)
	return &Upstream{
		Candidate: c,
		ModelID:   modelID,
		Health:    routing.NewHealth(routing.DefaultHealthPolicy),
		SubHealth: routing.NewHealth(routing.DefaultHealthPolicy),
		Identity:  c.Identity(modelID),
		transport: t,
		scheme:    c.BaseURL.Scheme,
		host:      c.BaseURL.Host,
		basePath:  strings.TrimSuffix(c.BaseURL.Path, "/"),
		secrets:   secrets,
		names:     names,
		channel:   opts.Channel,
		runtime:   runtime,
	}
}

// scrubSecrets are what is masked in the candidate's answers: the secrets known at load
// and the credentials its channel obtained since (tokens rotate while the gateway runs).
func (u *Upstream) scrubSecrets() []string {
	if u.runtime == nil {
		return u.secrets
	}
	obtained := u.runtime.RuntimeSecrets()
	if len(obtained) == 0 {
		return u.secrets
	}
	return append(slices.Clip(u.secrets), obtained...)
}

// ChannelName is the channel the candidate is reached through: "api" for the family's
// own API, else the channel's token.
func (u *Upstream) ChannelName() string {
	if u.channel == nil {
		return "api"
	}
	return u.channel.Name()
}

// HealthFor is the health that the operation reads and moves.
func (u *Upstream) HealthFor(op protocols.Operation) *routing.Health {
	if op.SubOperation() {
		return u.SubHealth
	}
	return u.Health
}

// Close releases the upstream's idle connections.
func (u *Upstream) Close() { u.transport.CloseIdleConnections() }
