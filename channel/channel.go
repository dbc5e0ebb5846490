// Package channel says how a candidate is reached when its upstream is a cloud provider's
// own transport for a family's native API (Amazon Bedrock, Google Vertex AI, Microsoft
// Azure) rather than the family's API itself. The body keeps its family's shape: a
// channel moves the model into the URL, changes the few body fields the provider
// wants, authorises the request its own way and turns the provider's framing and
// errors back into the family's. Nothing is translated between families. The package
// knows nothing of Caddy.
package channel

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/switchyard-gw/switchyard/protocols"
)

// Channel reaches one candidate's upstream. Implementations are safe for concurrent use.
type Channel interface {
	// Name is the channel's token in configuration, metrics and usage: "bedrock",
	// "vertex", "azure".
	Name() string
	// Endpoint is the base URL requests go to (the region's or resource's host, or the
	// operator's override); its host is one of the channel's secrets.
	Endpoint() *url.URL
	// Offers reports whether the channel serves op natively. An operation it lacks
	// moves the request on to the next candidate, and does not count against the
	// candidate's health.
	Offers(op protocols.Operation) bool
	// NewRequest builds the upstream request of op. body is the whole request body as
	// the family's own API would get it (the upstream model already in `model`);
	// stream says whether the client asked for an event stream; header holds the
	// client's headers that may be forwarded (never a key). The channel sets the URL,
	// edits the body, adds its own headers and authorises the request last (a
	// signature covers what is sent). An error is the candidate's failure (a
	// credential that cannot be had now, say) and must not carry a secret.
	NewRequest(ctx context.Context, op protocols.Operation, body []byte, stream bool, header http.Header) (*http.Request, error)
	// Response turns the provider's answer into the family's own form, in place,
	// before anything reads it: a Bedrock event stream into the SSE the family's API
	// sends (Content-Type text/event-stream), a provider's error body into the
	// family's error envelope with its status, a throttling answer into 429 with
	// Retry-After where the provider said how long. It may replace resp.Body,
	// resp.StatusCode, resp.ContentLength and resp.Header entries.
	Response(op protocols.Operation, resp *http.Response)
	// Secrets are the credentials and account identifiers that must never reach a
	// client, masked wherever they appear: keys, access key ids, account and project
	// ids. The upstream model and the endpoint's host are scrubbed anyway.
	Secrets() []string
	// Names are the account's names that read as ordinary words (regions, resource and
	// deployment names): masked in error bodies and error events, where providers write
	// them, but not in generated text, which they would mangle ("us-east-1" or a
	// deployment called "gpt-4o" in an answer about either).
	Names() []string
}

// ModelSecrets is implemented by a channel whose upstream model names can carry
// account identifiers (a Bedrock ARN holds an account id and a region): they are
// scrubbed from the candidate's answers too.
type ModelSecrets interface {
	ModelSecrets(upstreamModel string) []string
}

// ErrCredential is the error of a credential that could not be had for a request: a
// token endpoint that failed, an expired key. Its text never holds the credential.
var ErrCredential = errors.New("the channel's credential could not be obtained")
