package relay

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/channel/azure"
	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

const entraToken = "eyJ0eXAiOiJKV1Qi.entra-echo-token-5f2a"

// entraSource hands out one Entra ID token.
type entraSource struct{}

func (entraSource) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{Token: entraToken}, nil
}

// An Azure candidate authorised with an Entra ID token, behind an endpoint that echoes
// the bearer token it received in its answer, in a stream's chunk and in a header: the
// client gets none of it, though the token is in no configuration.
func TestAnEntraTokenEchoedByTheEndpointIsMasked(t *testing.T) {
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		w.Header().Set("Cache-Control", "private, echo="+tok)
		if !strings.Contains(r.URL.Path, "/chat/completions") {
			http.NotFound(w, r)
			return
		}
		var body [512]byte
		n, _ := r.Body.Read(body[:])
		if strings.Contains(string(body[:n]), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"content\":\"you sent %s\"},\"finish_reason\":null}]}\n\n", hiddenModel, tok)
			fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n", hiddenModel)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"you sent %s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":3,"total_tokens":6}}`, hiddenModel, tok)
	}))
	t.Cleanup(echo.Close)
	ch, err := azure.New(azure.Config{Endpoint: echo.URL, Mode: azure.ModeV1, Token: entraSource{}})
	require.NoError(t, err)
	base, err := url.Parse(echo.URL)
	require.NoError(t, err)
	up := NewUpstream("svc", &routing.Candidate{Name: "azure", Protocol: protocols.FamilyA, BaseURL: base, UpstreamModel: hiddenModel},
		Options{Channel: ch})
	t.Cleanup(up.Close)

	for _, body := range []string{plainChat, strings.Replace(plainChat, `{`, `{"stream":true,`, 1)} {
		r := serveRecorded(t, chatRequest(t, protocols.KindChat, body), up)
		require.Nil(t, r.err)
		require.Equal(t, 200, r.rec.Code, "%s", r.rec.Body)
		got := r.rec.Body.String()
		assert.Contains(t, got, "you sent [redacted]", "the echo arrived, masked: %s", body)
		assert.NotContains(t, got, "entra-echo-token")
		assert.Equal(t, "private, echo=[redacted]", r.rec.Header().Get("Cache-Control"))
	}
}
