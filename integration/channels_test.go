package integration

import (
	"crypto/rand"
	"crypto/rsa"
	"database/sql"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"testing"

	anthropic "github.com/anthropics/anthropic-sdk-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/simulator"
)

// One model behind Bedrock, Vertex and the plain API, each candidate at its own price:
// the official Go SDK streams through each channel and gets the same events; a
// throttled Bedrock fails over to Vertex before the client sees a byte; and the ledger
// bills each answer at the price of the candidate, and names the channel, that served it.
func TestOneModelBehindBedrockVertexAndThePlainAPI(t *testing.T) {
	sim := newChannelSim(t)
	up, bedrock, vertex := sim.up, sim.bedrock, sim.vertex
	plain := candidate("plain", "family_b", "http://"+up.hostport(), upstreamPrefix+"-multi", "priority 2")
	models := "\t\tmodel claude-multi {\n\t\t\tprotocols family_b\n\t\t\tprice input 1 output 5\n" +
		bedrock(bedrockARN+"+rate-limit+first-1", "0", "price input 3 output 15") +
		vertex("1", "price input 4 output 20") + plain + "\t\t}\n" +
		"\t\tmodel via-bedrock {\n" + bedrock(bedrockARN, "0") + "\t\t}\n" +
		"\t\tmodel via-vertex {\n" + vertex("0") + "\t\t}\n" +
		"\t\tmodel via-api {\n" + plain + "\t\t}\n"
	dbPath := filepath.Join(t.TempDir(), "usage.db")
	g := startGatewayWith(t, up, models, "\t\tstore sqlite "+dbPath+"\n")
	db, err := sql.Open("sqlite", dbPath)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })

	var wire wireLog
	client := newAnthropicV1(g, &wire)
	hi := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}
	stream := func(model string) (events []string, msg anthropic.Message, requestID string) {
		s := client.Messages.NewStreaming(sdkCtx(t), anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 256, Messages: hi})
		defer s.Close()
		for s.Next() {
			ev := s.Current()
			events = append(events, normalizeEvent(ev.RawJSON()))
			for _, leak := range []string{"123456789012", vertexProject, vertexSA, "us-east5", "us-east-1", "amazon-bedrock"} {
				assert.NotContains(t, ev.RawJSON(), leak)
			}
			require.NoError(t, msg.Accumulate(ev))
		}
		require.NoError(t, s.Err(), "%s", model)
		return events, msg, wire.last(t).respHeader.Get("X-Switchyard-Request-Id")
	}

	// Each channel's stream reaches the client as the plain API's does: the same events,
	// in the same order, with the same data (ids, the model and token counts aside).
	viaAPI, _, _ := stream("via-api")
	for _, model := range []string{"via-bedrock", "via-vertex"} {
		got, msg, _ := stream(model)
		assert.Equal(t, viaAPI, got, "%s streams as the plain API does", model)
		assert.Equal(t, model, msg.Model)
		assert.Equal(t, simulator.ReplyText, msg.Content[0].Text)
	}

	// Bedrock throttles the first request: Vertex serves it, at Vertex's price.
	_, msg, id := stream("claude-multi")
	assert.Equal(t, "claude-multi", msg.Model)
	rec := record(t, db, id)
	assert.Equal(t, "vertex", rec.Candidate)
	assert.Equal(t, 2, rec.Attempts, "Bedrock, then Vertex")
	assert.Equal(t, (rec.Input*4_000_000+rec.Output*20_000_000+500_000)/1_000_000, rec.Cost, "at Vertex's price")
	// Then Bedrock serves, at its own price.
	_, _, id = stream("claude-multi")
	rec = record(t, db, id)
	assert.Equal(t, "bedrock", rec.Candidate)
	assert.Equal(t, (rec.Input*3_000_000+rec.Output*15_000_000+500_000)/1_000_000, rec.Cost, "at Bedrock's price")
	var channel string
	require.NoError(t, db.QueryRow(`SELECT channel FROM usage_records WHERE request_id = ?`, id).Scan(&channel))
	assert.Equal(t, "bedrock", channel)
}

// channelSim is one simulated provider that plays the plain API (its credential), Bedrock
// (SigV4 with bedrockAKID and bedrockSecret) and Vertex (tokens for a service account
// whose file it writes, with the simulator's own /token as token_uri). It records what
// reached it, as newUpstream does.
type channelSim struct {
	up     *upstream
	saFile string
}

func newChannelSim(t *testing.T) *channelSim {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	up := &upstream{}
	up.Server = httptest.NewServer(simulator.New(simulator.Config{
		APIKey: upstreamCred, BedrockAccessKeyID: bedrockAKID, BedrockSecretKey: bedrockSecret,
		VertexPublicKey: &key.PublicKey, Observe: up.record(notAProbe),
	}))
	t.Cleanup(up.Close)
	return &channelSim{up: up, saFile: writeServiceAccount(t, key, up.URL+"/token")}
}

// bedrock is a candidate named bedrock on the Bedrock channel, for the Bedrock model id.
func (s *channelSim) bedrock(model, prio string, extra ...string) string {
	c := "\t\t\tcandidate bedrock {\n\t\t\t\tprotocol family_b\n\t\t\t\tupstream_model " + model + "\n\t\t\t\tpriority " + prio + "\n"
	for _, e := range extra {
		c += "\t\t\t\t" + e + "\n"
	}
	return c + "\t\t\t\tchannel bedrock {\n\t\t\t\t\tregion us-east-1\n\t\t\t\t\tendpoint " + s.up.URL +
		"\n\t\t\t\t\taccess_key_id " + bedrockAKID + "\n\t\t\t\t\tsecret_access_key " + bedrockSecret + "\n\t\t\t\t}\n\t\t\t}\n"
}

// vertex is a candidate named vertex on the Vertex channel, for claude-v@20250929.
func (s *channelSim) vertex(prio string, extra ...string) string {
	c := "\t\t\tcandidate vertex {\n\t\t\t\tprotocol family_b\n\t\t\t\tupstream_model claude-v@20250929\n\t\t\t\tpriority " + prio + "\n"
	for _, e := range extra {
		c += "\t\t\t\t" + e + "\n"
	}
	return c + "\t\t\t\tchannel vertex {\n\t\t\t\t\tproject " + vertexProject + "\n\t\t\t\t\tregion us-east5\n" +
		"\t\t\t\t\tendpoint " + s.up.URL + "\n\t\t\t\t\tcredentials_file " + s.saFile + "\n\t\t\t\t}\n\t\t\t}\n"
}

var (
	eventIDs    = regexp.MustCompile(`"id":"[^"]*"`)
	eventModels = regexp.MustCompile(`"model":"[^"]*"`)
	eventCounts = regexp.MustCompile(`"(input_tokens|output_tokens)":\d+`)
)

// normalizeEvent keeps what a stream's event says apart from its ids, model and counts.
func normalizeEvent(raw string) string {
	raw = eventIDs.ReplaceAllString(raw, `"id":""`)
	raw = eventModels.ReplaceAllString(raw, `"model":""`)
	return eventCounts.ReplaceAllString(raw, `"$1":0`)
}
