package routing

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/protocols"
)

var (
	famA = protocols.FamilyA
	famB = protocols.FamilyB
)

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}

func cand(t *testing.T, name string, f protocols.Family, base, upstream string, priority int) *Candidate {
	return &Candidate{Name: name, Protocol: f, BaseURL: mustURL(t, base), UpstreamModel: upstream, Credential: "sk-up", Priority: priority, Weight: 1}
}

func TestNewCatalogDerivesProtocolsAndOrdersCandidates(t *testing.T) {
	sonnet := &Model{
		ID: "acme/sonnet",
		Candidates: []*Candidate{
			cand(t, "backup-b", famB, "https://b2.example", "claude-sonnet-4-5", 2),
			cand(t, "primary-b", famB, "https://b1.example", "claude-sonnet-4-5-20250929", 1),
			cand(t, "compat-a", famA, "https://a1.example/v1", "claude-sonnet-4-5", 1),
			cand(t, "backup-b2", famB, "http://10.0.0.5:8080", "claude-sonnet-4-5", 2),
		},
		Prices: Prices{Input: 3_000_000, Output: 15_000_000},
	}
	chat := &Model{
		ID:         "acme/chat",
		Candidates: []*Candidate{cand(t, "openai", famA, "https://api.a.example/v1", "gpt-4o-2024-08-06", 0)},
		Prices:     Prices{Input: 2_500_000, Output: 10_000_000, Reasoning: 12_000_000},
	}
	c, err := NewCatalog([]*Model{sonnet, chat})
	require.NoError(t, err)

	// Listed under the protocols it is actually supplied on, in token order.
	assert.Equal(t, []protocols.Family{famA, famB}, sonnet.Protocols)
	assert.Equal(t, []protocols.Family{famA}, chat.Protocols)
	assert.True(t, sonnet.Supports(famB))
	assert.True(t, chat.Supports(famA))
	assert.False(t, chat.Supports(famB))

	// Priority first; the declared order breaks ties.
	names := func(cs []*Candidate) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	assert.Equal(t, []string{"primary-b", "compat-a", "backup-b", "backup-b2"}, names(sonnet.Candidates))
	assert.Equal(t, []string{"primary-b", "backup-b", "backup-b2"}, names(sonnet.CandidatesFor(famB)))
	assert.Equal(t, []string{"compat-a"}, names(sonnet.CandidatesFor(famA)))
	assert.Empty(t, chat.CandidatesFor(famB))

	// Lookup is exact and case-sensitive.
	m, ok := c.Lookup("acme/sonnet")
	require.True(t, ok)
	assert.Same(t, sonnet, m)
	for _, id := range []string{"Acme/Sonnet", "acme/SONNET", "acme/sonnet ", " acme/sonnet", "acme-sonnet", "sonnet", ""} {
		_, ok := c.Lookup(id)
		assert.False(t, ok, "%q", id)
	}

	// Declaration order is kept for GET /v1/models.
	assert.Equal(t, []*Model{sonnet, chat}, c.Models())

	// Reasoning output is billed at the output price unless a price is given.
	assert.Equal(t, int64(15_000_000), sonnet.Prices.Reasoning)
	assert.Equal(t, int64(12_000_000), chat.Prices.Reasoning)
}

func TestNewCatalogDeclaredProtocols(t *testing.T) {
	m := &Model{
		ID:        "acme/chat",
		Protocols: []protocols.Family{famA},
		Candidates: []*Candidate{
			cand(t, "a", famA, "https://a.example/v1", "gpt-4o", 0),
		},
	}
	_, err := NewCatalog([]*Model{m})
	require.NoError(t, err)
	assert.Equal(t, []protocols.Family{famA}, m.Protocols)
}

func TestNewCatalogSortIsStableAcrossEqualPriorities(t *testing.T) {
	var cs []*Candidate
	for _, n := range []string{"c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9", "c10", "c11", "c12", "c13", "c14", "c15", "c16", "c17", "c18", "c19", "c20"} {
		cs = append(cs, cand(t, n, famA, "https://a.example/v1", "m", 5))
	}
	declared := make([]string, len(cs))
	for i, c := range cs {
		declared[i] = c.Name
	}
	cs = append(cs, cand(t, "first", famA, "https://a.example/v1", "m", -1))
	m := &Model{ID: "x", Candidates: cs}
	_, err := NewCatalog([]*Model{m})
	require.NoError(t, err)
	assert.Equal(t, "first", m.Candidates[0].Name)
	for i, c := range m.Candidates[1:] {
		assert.Equal(t, declared[i], c.Name)
	}
}

func TestNewCatalogErrors(t *testing.T) {
	good := func() *Model {
		return &Model{ID: "acme/chat", Candidates: []*Candidate{cand(t, "primary", famA, "https://a.example/v1", "gpt-4o", 0)}}
	}
	cases := []struct {
		name   string
		models func() []*Model
		// Every fragment must appear: the error names the model, the candidate and the field.
		want []string
	}{
		{"duplicate model", func() []*Model { return []*Model{good(), good()} },
			[]string{`"acme/chat"`, "twice"}},
		{"model without id", func() []*Model { m := good(); m.ID = ""; return []*Model{m} },
			[]string{"id"}},
		{"model without candidates", func() []*Model { m := good(); m.Candidates = nil; return []*Model{m} },
			[]string{`"acme/chat"`, "candidate"}},
		{"candidate protocol not in the model's protocols", func() []*Model {
			m := good()
			m.Protocols = []protocols.Family{famA}
			m.Candidates = append(m.Candidates, cand(t, "claude-direct", famB, "https://b.example", "claude-x", 0))
			return []*Model{m}
		}, []string{`"acme/chat"`, `"claude-direct"`, "protocol", "family_b"}},
		{"declared protocol without a candidate", func() []*Model {
			m := good()
			m.Protocols = []protocols.Family{famA, famB}
			return []*Model{m}
		}, []string{`"acme/chat"`, "protocols", "family_b"}},
		{"candidate without protocol", func() []*Model {
			m := good()
			m.Candidates[0].Protocol = 0
			return []*Model{m}
		}, []string{`"acme/chat"`, `"primary"`, "protocol"}},
		{"relative URL", func() []*Model {
			m := good()
			m.Candidates[0].BaseURL = mustURL(t, "/v1")
			return []*Model{m}
		}, []string{`"acme/chat"`, `"primary"`, "url"}},
		{"URL without host", func() []*Model {
			m := good()
			m.Candidates[0].BaseURL = mustURL(t, "https:///v1")
			return []*Model{m}
		}, []string{`"acme/chat"`, `"primary"`, "url"}},
		{"URL with another scheme", func() []*Model {
			m := good()
			m.Candidates[0].BaseURL = mustURL(t, "ftp://a.example/v1")
			return []*Model{m}
		}, []string{`"acme/chat"`, `"primary"`, "url"}},
		{"missing URL", func() []*Model {
			m := good()
			m.Candidates[0].BaseURL = nil
			return []*Model{m}
		}, []string{`"acme/chat"`, `"primary"`, "url"}},
		{"missing upstream model", func() []*Model {
			m := good()
			m.Candidates[0].UpstreamModel = ""
			return []*Model{m}
		}, []string{`"acme/chat"`, `"primary"`, "upstream_model"}},
		{"negative weight", func() []*Model {
			m := good()
			m.Candidates[0].Weight = -1
			return []*Model{m}
		}, []string{`"acme/chat"`, `"primary"`, "weight"}},
		{"candidate without name", func() []*Model {
			m := good()
			m.Candidates = append(m.Candidates, cand(t, "", famA, "https://a.example/v1", "gpt-4o", 0))
			return []*Model{m}
		}, []string{`"acme/chat"`, "#2", "name"}},
		{"candidate name used twice", func() []*Model {
			m := good()
			m.Candidates = append(m.Candidates, cand(t, "primary", famA, "https://b.example/v1", "gpt-4o", 0))
			return []*Model{m}
		}, []string{`"acme/chat"`, `"primary"`, "name"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewCatalog(tc.models())
			require.Error(t, err)
			assert.Nil(t, c)
			for _, frag := range tc.want {
				assert.Contains(t, err.Error(), frag)
			}
		})
	}
}

func TestCandidateIdentity(t *testing.T) {
	a := cand(t, "primary", famA, "https://a.example/v1", "gpt-4o", 0)
	b := cand(t, "primary", famA, "https://a.example/v1", "gpt-4o", 9) // priority does not matter
	assert.Equal(t, a.Identity("acme/chat"), b.Identity("acme/chat"))
	assert.NotEqual(t, a.Identity("acme/chat"), a.Identity("acme/chat2"))
	c := cand(t, "primary", famA, "https://a.example/v1", "gpt-4o-mini", 0)
	assert.NotEqual(t, a.Identity("acme/chat"), c.Identity("acme/chat"))
	d := cand(t, "primary", famA, "https://other.example/v1", "gpt-4o", 0)
	assert.NotEqual(t, a.Identity("acme/chat"), d.Identity("acme/chat"))
}

// A reservation must hold whichever candidate serves: the ceiling takes, kind by kind,
// the dearest of the model's and its candidates' prices; an answer is billed at the
// serving candidate's own prices, or the model's when it has none.
func TestCandidatePricesAndTheirCeiling(t *testing.T) {
	own := &Prices{Input: 5, Output: 1, Reasoning: 1}
	plain := &Candidate{Name: "plain"}
	dear := &Candidate{Name: "dear", Prices: own}
	m := &Model{ID: "m", Prices: Prices{Input: 2, CachedInput: 1, Output: 8, Reasoning: 8}, Candidates: []*Candidate{plain, dear}}
	assert.Equal(t, Prices{Input: 5, CachedInput: 1, Output: 8, Reasoning: 8}, m.CeilingPrices())
	assert.Equal(t, *own, m.PricesOf(dear))
	assert.Equal(t, m.Prices, m.PricesOf(plain))
	assert.Equal(t, m.Prices, m.PricesOf(nil))
}
