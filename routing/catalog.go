package routing

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"time"

	"github.com/switchyard-gw/switchyard/protocols"
)

// Capabilities are a model's capability tags as GET /v1/models reports them.
type Capabilities struct {
	Reasoning bool
	// Tags are further boolean tags the operator declared (for example "vision").
	Tags map[string]bool
}

// Prices are per million tokens, in micro-units of the operator's currency (1 unit =
// 1,000,000 micro-units), so that billing never touches floating point.
type Prices struct {
	Input       int64
	CachedInput int64
	CacheWrite  int64
	Output      int64
	Reasoning   int64
	// Tools are the prices of server-side tools' uses (a web search, a file search, ...),
	// per 1,000 uses, in micro-units; a tool without a price costs nothing.
	Tools ToolPrices
}

// ToolPrices are the prices of each server-side tool's uses, per 1,000 uses.
type ToolPrices [protocols.NumServerTools]int64

// MaxToolPrice bounds a tool's price per 1,000 uses (10^6 units, in micro-units), so
// that protocols.MaxToolUses uses of every tool cost well within int64.
const MaxToolPrice = 1_000_000 * 1_000_000

// Timeouts bound one attempt on a candidate.
type Timeouts struct {
	Dial time.Duration
	// Header is the time allowed until the upstream's response headers.
	Header time.Duration
	// FirstByte is the time allowed until the answer can be committed to the client:
	// headers, and for a stream its first event. Past it the request moves on to the
	// next candidate. Zero means the relay's default.
	FirstByte time.Duration
	// FirstToken is the time allowed from a stream's headers to its first event, within
	// what FirstByte leaves: past it the stream is moved on from like a silent one. Zero
	// means the relay's default.
	FirstToken time.Duration
	// Idle is the longest silence allowed between two reads of a committed answer.
	Idle time.Duration
}

// Candidate is one supply channel of a model: an upstream that serves it on one protocol.
type Candidate struct {
	// Name identifies the candidate to operators (logs, metrics, health). It is never the
	// upstream model name or host, which stay hidden.
	Name          string
	Protocol      protocols.Family
	BaseURL       *url.URL
	UpstreamModel string
	Credential    string
	Priority      int // lower is tried first
	Weight        int
	Timeouts      Timeouts
	// Retry is how the candidate is tried again within one request.
	Retry Retry
	// Prices, when set, are what the model's tokens cost when this candidate serves
	// them; nil: the model's.
	Prices *Prices
}

// PricesOf is what an answer the candidate served costs: its own prices, else the model's.
func (m *Model) PricesOf(c *Candidate) Prices {
	if c != nil && c.Prices != nil {
		return *c.Prices
	}
	return m.Prices
}

// CeilingPrices are, for each kind of token, the highest price any candidate of the
// model may bill it at: what a reservation must assume before it is known who serves.
func (m *Model) CeilingPrices() Prices {
	p := m.Prices
	for _, c := range m.Candidates {
		if c.Prices == nil {
			continue
		}
		p.Input = max(p.Input, c.Prices.Input)
		p.CachedInput = max(p.CachedInput, c.Prices.CachedInput)
		p.CacheWrite = max(p.CacheWrite, c.Prices.CacheWrite)
		p.Output = max(p.Output, c.Prices.Output)
		p.Reasoning = max(p.Reasoning, c.Prices.Reasoning)
		for t := range p.Tools {
			p.Tools[t] = max(p.Tools[t], c.Prices.Tools[t])
		}
	}
	return p
}

// Identity is stable across config reloads as long as the candidate points at the same
// upstream model on the same upstream, so health can survive a reload.
func (c *Candidate) Identity(modelID string) string {
	return modelID + "\x00" + c.Name + "\x00" + c.Protocol.Token() + "\x00" + c.BaseURL.String() + "\x00" + c.UpstreamModel
}

// Model is one service model.
type Model struct {
	ID           string
	DisplayName  string
	OwnedBy      string
	Created      time.Time
	Protocols    []protocols.Family
	Capabilities Capabilities
	Prices       Prices
	Candidates   []*Candidate
	// ContextWindow is the most tokens (input and output together) the model takes in
	// one request, and MaxOutputTokens the most it may generate in one answer; zero
	// when the operator declared none. Clients learn both from GET /v1/models and the
	// client set-ups, and a request asking for more output than MaxOutputTokens is
	// refused before any upstream is called.
	ContextWindow   int64
	MaxOutputTokens int64
	// RequestTimeout bounds what one request may spend before an answer's first byte:
	// every attempt, retry, wait and failover together. Zero: none beyond each attempt's.
	RequestTimeout time.Duration
	// FailoverAfterTimeout lets a request go on to the next candidate after an attempt
	// timed out once its upstream had the whole body (off: it ends with a 504, billed).
	FailoverAfterTimeout bool
}

// Supports reports whether the model is supplied on the family.
// ProtocolTokens are the model's protocols as the models list names them, sorted.
func (m *Model) ProtocolTokens() []string {
	out := make([]string, 0, len(m.Protocols))
	for _, f := range m.Protocols {
		out = append(out, f.Token())
	}
	slices.Sort(out)
	return out
}

// CapabilityFlags are the model's capabilities as the models list reports them:
// `reasoning` always, then the operator's tags.
func (m *Model) CapabilityFlags() map[string]bool {
	out := map[string]bool{"reasoning": m.Capabilities.Reasoning}
	maps.Copy(out, m.Capabilities.Tags)
	return out
}

func (m *Model) Supports(f protocols.Family) bool { return slices.Contains(m.Protocols, f) }

// CandidatesFor lists the model's candidates on one protocol, in priority order.
func (m *Model) CandidatesFor(f protocols.Family) []*Candidate {
	out := make([]*Candidate, 0, len(m.Candidates))
	for _, c := range m.Candidates {
		if c.Protocol == f {
			out = append(out, c)
		}
	}
	return out
}

// Catalog is the immutable set of service models of one configuration.
type Catalog struct {
	byID    map[string]*Model
	ordered []*Model
}

// NewCatalog checks the models and indexes them. Errors name the model, the candidate and
// the field.
func NewCatalog(models []*Model) (*Catalog, error) {
	c := &Catalog{byID: make(map[string]*Model, len(models))}
	for _, m := range models {
		if err := checkModel(m); err != nil {
			return nil, err
		}
		if _, dup := c.byID[m.ID]; dup {
			return nil, fmt.Errorf("model %q: declared twice", m.ID)
		}
		// Candidates are tried by priority; the declared order breaks ties.
		slices.SortStableFunc(m.Candidates, func(a, b *Candidate) int { return a.Priority - b.Priority })
		c.byID[m.ID] = m
		c.ordered = append(c.ordered, m)
	}
	return c, nil
}

func checkModel(m *Model) error {
	if m.ID == "" {
		return fmt.Errorf("model: an id is required")
	}
	if len(m.Candidates) == 0 {
		return fmt.Errorf("model %q: at least one candidate is required", m.ID)
	}
	supplied := map[protocols.Family]bool{}
	names := map[string]bool{}
	for i, cand := range m.Candidates {
		where := fmt.Sprintf("model %q, candidate %q", m.ID, cand.Name)
		if cand.Name == "" {
			return fmt.Errorf("model %q, candidate #%d: a name is required", m.ID, i+1)
		}
		if names[cand.Name] {
			return fmt.Errorf("%s: name used twice in this model", where)
		}
		names[cand.Name] = true
		if cand.Protocol == 0 {
			return fmt.Errorf("%s: protocol: must be family_a or family_b", where)
		}
		if cand.BaseURL == nil || (cand.BaseURL.Scheme != "http" && cand.BaseURL.Scheme != "https") || cand.BaseURL.Host == "" {
			return fmt.Errorf("%s: url: must be an absolute http or https URL", where)
		}
		if cand.UpstreamModel == "" {
			return fmt.Errorf("%s: upstream_model: required", where)
		}
		if cand.Weight < 0 {
			return fmt.Errorf("%s: weight: must not be negative", where)
		}
		if len(m.Protocols) > 0 && !m.Supports(cand.Protocol) {
			return fmt.Errorf("%s: protocol: %s is not in the model's protocols", where, cand.Protocol.Token())
		}
		supplied[cand.Protocol] = true
	}
	if len(m.Protocols) == 0 {
		// A model is listed under the protocols it is actually supplied on.
		for _, f := range []protocols.Family{protocols.FamilyA, protocols.FamilyB} {
			if supplied[f] {
				m.Protocols = append(m.Protocols, f)
			}
		}
	}
	for _, f := range m.Protocols {
		if !supplied[f] {
			return fmt.Errorf("model %q: protocols: %s is declared but no candidate supplies it", m.ID, f.Token())
		}
	}
	switch {
	case m.ContextWindow < 0:
		return fmt.Errorf("model %q: context_window: must be a positive whole number of tokens", m.ID)
	case m.MaxOutputTokens < 0:
		return fmt.Errorf("model %q: max_output_tokens: must be a positive whole number of tokens", m.ID)
	case m.ContextWindow > 0 && m.MaxOutputTokens > m.ContextWindow:
		return fmt.Errorf("model %q: max_output_tokens: %d is above the model's context_window of %d", m.ID, m.MaxOutputTokens, m.ContextWindow)
	}
	if m.Prices.Reasoning == 0 {
		m.Prices.Reasoning = m.Prices.Output
	}
	for _, c := range m.Candidates {
		if c.Prices != nil && c.Prices.Reasoning == 0 {
			c.Prices.Reasoning = c.Prices.Output
		}
	}
	return nil
}

// Lookup finds a model by its exact, case-sensitive id.
func (c *Catalog) Lookup(id string) (*Model, bool) {
	m, ok := c.byID[id]
	return m, ok
}

// Models lists the models in declaration order.
func (c *Catalog) Models() []*Model { return c.ordered }
