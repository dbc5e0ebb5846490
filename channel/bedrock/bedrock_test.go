package bedrock

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/channel"
	"github.com/switchyard-gw/switchyard/protocols"
)

var messagesOp = protocols.Operation{Family: protocols.FamilyB, Kind: protocols.KindMessages}

const (
	profileID = "us.anthropic.claude-sonnet-4-20250514-v1:0"
	arnID     = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-20250514-v1:0"
	testAKID  = "AKIDEXAMPLE"
	testSK    = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
)

// clientHeader is what the relay passes on from a typical Claude Code request, plus
// headers that must never reach Bedrock.
func clientHeader() http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Anthropic-Version", "2023-06-01")
	h.Add("Anthropic-Beta", "interleaved-thinking-2025-05-14, context-1m-2025-08-07")
	h.Add("Anthropic-Beta", " ,fine-grained-tool-streaming-2025-05-14")
	h.Set("User-Agent", "claude-cli/2.0.0")
	h.Set("X-Api-Key", "sk-client-key-should-not-travel")
	h.Set("Authorization", "Bearer sk-client-key-should-not-travel")
	h.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	h.Set("X-Forwarded-For", "203.0.113.9")
	h.Set("X-Stainless-Retry-Count", "0")
	return h
}

func newStatic(t *testing.T, endpoint string) *Channel {
	t.Helper()
	c, err := New(Config{Region: "us-east-1", Endpoint: endpoint, AccessKeyID: testAKID, SecretAccessKey: testSK})
	require.NoError(t, err)
	return c
}

// wire sends req to a local server and returns the request line's target and the
// request as the server saw it.
func wire(t *testing.T, req *http.Request) (string, *http.Request, []byte) {
	t.Helper()
	type seen struct {
		uri  string
		r    *http.Request
		body []byte
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.RequestURI, r, b}
	}))
	defer srv.Close()
	// The request was built for the channel's endpoint; point it at the test server.
	req.URL.Host = strings.TrimPrefix(srv.URL, "http://")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	s := <-got
	return s.uri, s.r, s.body
}

func TestNewRequestInvokeWithInferenceProfile(t *testing.T) {
	c := newStatic(t, "http://127.0.0.1:1")
	body := `{"model":"` + profileID + `","max_tokens":64,"stream":false,"messages":[{"role":"user","content":"hi"}]}`
	req, err := c.NewRequest(context.Background(), messagesOp, []byte(body), false, clientHeader())
	require.NoError(t, err)

	uri, r, sent := wire(t, req)
	assert.Equal(t, "/model/"+profileID+"/invoke", uri, "the id travels as one segment, ':' as is")
	assert.Equal(t, http.MethodPost, r.Method)
	assert.False(t, gjson.GetBytes(sent, "model").Exists(), "model is in the path, not the body")
	assert.False(t, gjson.GetBytes(sent, "stream").Exists(), "the path says whether to stream")
	assert.Equal(t, "bedrock-2023-05-31", gjson.GetBytes(sent, "anthropic_version").String())
	assert.Equal(t, `["interleaved-thinking-2025-05-14","context-1m-2025-08-07","fine-grained-tool-streaming-2025-05-14"]`,
		gjson.GetBytes(sent, "anthropic_beta").Raw, "betas move from the header into the body, trimmed")
	assert.Equal(t, int64(64), gjson.GetBytes(sent, "max_tokens").Int())
	assert.Equal(t, "hi", gjson.GetBytes(sent, "messages.0.content").String())

	assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
	assert.Equal(t, "application/json", r.Header.Get("Accept"))
	assert.Empty(t, r.Header.Get("X-Amzn-Bedrock-Accept"))
	assert.Equal(t, "claude-cli/2.0.0", r.Header.Get("User-Agent"))
	for _, gone := range []string{"Anthropic-Version", "Anthropic-Beta", "X-Api-Key", "Traceparent", "X-Forwarded-For", "X-Stainless-Retry-Count"} {
		assert.Empty(t, r.Header.Values(gone), gone)
	}
	auth := r.Header.Get("Authorization")
	assert.True(t, strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential="+testAKID+"/"), auth)
	assert.Contains(t, auth, "/us-east-1/bedrock/aws4_request")
	assert.NotContains(t, auth, "sk-client-key")
	assert.NotEmpty(t, r.Header.Get("X-Amz-Date"))
}

func TestNewRequestStreamWithARN(t *testing.T) {
	c := newStatic(t, "http://127.0.0.1:1/prefix/")
	body := `{"model":"` + arnID + `","max_tokens":8,"stream":true,"anthropic_beta":["context-1m-2025-08-07"],"messages":[]}`
	h := http.Header{}
	h.Set("Anthropic-Beta", "context-1m-2025-08-07,token-efficient-tools-2025-02-19")
	req, err := c.NewRequest(context.Background(), messagesOp, []byte(body), true, h)
	require.NoError(t, err)

	uri, r, sent := wire(t, req)
	assert.Equal(t, "/prefix/model/arn:aws:bedrock:us-east-1:123456789012:inference-profile%2Fus.anthropic.claude-sonnet-4-20250514-v1:0/invoke-with-response-stream", uri,
		"an ARN's '/' is escaped so the id stays one segment, after the endpoint's path")
	assert.Equal(t, "application/json", r.Header.Get("X-Amzn-Bedrock-Accept"))
	assert.Empty(t, r.Header.Get("Accept"))
	assert.False(t, gjson.GetBytes(sent, "stream").Exists())
	assert.Equal(t, `["context-1m-2025-08-07","token-efficient-tools-2025-02-19"]`, gjson.GetBytes(sent, "anthropic_beta").Raw,
		"a beta already in the body is not repeated")
}

// TestSignatureKnownAnswer recomputes the signature of a Bedrock request by hand, from
// the SigV4 specification, for a fixed time and key: the canonical URI escapes the wire
// path once more (":" -> %3A, "%2F" -> %252F), which is where Bedrock signatures break.
func TestSignatureKnownAnswer(t *testing.T) {
	for _, tc := range []struct{ model, canonicalPath string }{
		{profileID, "/model/us.anthropic.claude-sonnet-4-20250514-v1%3A0/invoke"},
		{arnID, "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%252Fus.anthropic.claude-sonnet-4-20250514-v1%3A0/invoke"},
	} {
		c := newStatic(t, "")
		c.now = func() time.Time { return time.Date(2025, 8, 30, 12, 36, 0, 0, time.UTC) }
		req, err := c.NewRequest(context.Background(), messagesOp, []byte(`{"model":"`+tc.model+`","max_tokens":1}`), false, http.Header{})
		require.NoError(t, err)
		sent, err := io.ReadAll(req.Body)
		require.NoError(t, err)

		payload := sha256.Sum256(sent)
		canonical := strings.Join([]string{
			"POST",
			tc.canonicalPath,
			"",
			"accept:application/json",
			"content-length:" + strconv.Itoa(len(sent)),
			"content-type:application/json",
			"host:bedrock-runtime.us-east-1.amazonaws.com",
			"x-amz-date:20250830T123600Z",
			"",
			"accept;content-length;content-type;host;x-amz-date",
			hex.EncodeToString(payload[:]),
		}, "\n")
		crHash := sha256.Sum256([]byte(canonical))
		toSign := "AWS4-HMAC-SHA256\n20250830T123600Z\n20250830/us-east-1/bedrock/aws4_request\n" + hex.EncodeToString(crHash[:])
		key := []byte("AWS4" + testSK)
		for _, part := range []string{"20250830", "us-east-1", "bedrock", "aws4_request"} {
			key = mac(key, part)
		}
		want := "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20250830/us-east-1/bedrock/aws4_request, " +
			"SignedHeaders=accept;content-length;content-type;host;x-amz-date, Signature=" + hex.EncodeToString(mac(key, toSign))
		assert.Equal(t, want, req.Header.Get("Authorization"), tc.model)
	}
}

func mac(key []byte, s string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(s))
	return h.Sum(nil)
}

// TestSignV4PostVanilla is the "post-vanilla" case of AWS's SigV4 test suite, through
// the helper the channel signs with.
func TestSignV4PostVanilla(t *testing.T) {
	req, err := http.NewRequest(http.MethodPost, "https://example.amazonaws.com/", nil)
	require.NoError(t, err)
	cr := aws.Credentials{AccessKeyID: testAKID, SecretAccessKey: testSK}
	at := time.Date(2015, 8, 30, 12, 36, 0, 0, time.UTC)
	require.NoError(t, signV4(context.Background(), v4.NewSigner(), cr, req, nil, "service", "us-east-1", at))
	assert.Equal(t, "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "+
		"SignedHeaders=host;x-amz-date, Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b",
		req.Header.Get("Authorization"))
}

func TestNewRequestWithAPIKeyIsNotSigned(t *testing.T) {
	c, err := New(Config{Region: "eu-west-1", APIKey: "ABSKexamplekey0123456789"})
	require.NoError(t, err)
	assert.Equal(t, "https://bedrock-runtime.eu-west-1.amazonaws.com", c.Endpoint().String())
	req, err := c.NewRequest(context.Background(), messagesOp, []byte(`{"model":"`+profileID+`","max_tokens":1}`), false, clientHeader())
	require.NoError(t, err)
	assert.Equal(t, "Bearer ABSKexamplekey0123456789", req.Header.Get("Authorization"))
	assert.Empty(t, req.Header.Get("X-Amz-Date"))
	assert.Empty(t, req.Header.Values("X-Api-Key"))
}

func TestCredentialFailureIsErrCredentialWithoutDetail(t *testing.T) {
	failing := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{}, errors.New("AccessDenied: arn:aws:iam::123456789012:role/secret-role cannot assume")
	})
	c, err := New(Config{Region: "us-east-1", Credentials: failing})
	require.NoError(t, err)
	_, err = c.NewRequest(context.Background(), messagesOp, []byte(`{"model":"m","max_tokens":1}`), false, http.Header{})
	require.ErrorIs(t, err, channel.ErrCredential)
	assert.NotContains(t, err.Error(), "123456789012")
	assert.NotContains(t, err.Error(), "secret-role")
	assert.ErrorIs(t, c.CheckCredentials(context.Background()), channel.ErrCredential)
}

func TestNewRefusesBadConfigNamingFieldsNotValues(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "region is required"},
		{Config{Region: "us-east-1.evil.example/x"}, "region:"},
		{Config{Region: "us-east-1", Endpoint: "ftp://vpce-0a1b2c.example"}, "endpoint:"},
		{Config{Region: "us-east-1", APIKey: "k", AccessKeyID: "AKIAVERYSECRET", SecretAccessKey: "s"}, "exclusive"},
		{Config{Region: "us-east-1", AccessKeyID: "AKIAVERYSECRET"}, "secret_access_key"},
	} {
		_, err := New(tc.cfg)
		require.Error(t, err, tc.want)
		assert.Contains(t, err.Error(), tc.want)
		for _, secret := range []string{"evil", "vpce-0a1b2c", "AKIAVERYSECRET"} {
			assert.NotContains(t, err.Error(), secret)
		}
	}
}

func TestSecrets(t *testing.T) {
	c := newStatic(t, "")
	assert.ElementsMatch(t, []string{testAKID, testSK}, c.Secrets(), "the secret key too: an endpoint may echo anything")
	assert.Equal(t, []string{"us-east-1"}, c.Names(), "a region is masked in errors only")
	k, err := New(Config{Region: "eu-central-1", APIKey: "ABSKexamplekey0123456789"})
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"ABSKexamplekey0123456789"}, k.Secrets())
	assert.Equal(t, []string{"123456789012"}, ModelSecrets(arnID))
	assert.Empty(t, ModelSecrets(profileID))
}

func TestOffersMessagesAndCountTokens(t *testing.T) {
	c := newStatic(t, "")
	assert.True(t, c.Offers(messagesOp))
	assert.True(t, c.Offers(countOp))
	for _, op := range []protocols.Operation{
		{Family: protocols.FamilyA, Kind: protocols.KindChat},
		{Family: protocols.FamilyA, Kind: protocols.KindResponses},
		{Family: protocols.FamilyA, Kind: protocols.KindResponsesInputTokens},
	} {
		assert.False(t, c.Offers(op), op.Kind.String())
		_, err := c.NewRequest(context.Background(), op, []byte(`{"model":"m"}`), false, http.Header{})
		assert.Error(t, err)
	}
}

var countOp = protocols.Operation{Family: protocols.FamilyB, Kind: protocols.KindMessagesCountTokens}

// countedBody is the InvokeModel body a CountTokens request carries, decoded.
func countedBody(t *testing.T, sent []byte) []byte {
	t.Helper()
	require.True(t, gjson.ValidBytes(sent), "%s", sent)
	outer := gjson.ParseBytes(sent)
	require.Equal(t, []string{"input"}, keys(outer), "%s", sent)
	require.Equal(t, []string{"invokeModel"}, keys(outer.Get("input")), "%s", sent)
	require.Equal(t, []string{"body"}, keys(outer.Get("input.invokeModel")), "%s", sent)
	inner, err := base64.StdEncoding.DecodeString(outer.Get("input.invokeModel.body").String())
	require.NoError(t, err)
	return inner
}

func keys(r gjson.Result) []string {
	var out []string
	r.ForEach(func(k, _ gjson.Result) bool { out = append(out, k.String()); return true })
	return out
}

func TestNewRequestCountTokensWrapsTheInvokeBody(t *testing.T) {
	c := newStatic(t, "http://127.0.0.1:1/prefix")
	body := `{"model":"` + arnID + `","system":"be brief","messages":[{"role":"user","content":"hi"}],"tools":[]}`
	req, err := c.NewRequest(context.Background(), countOp, []byte(body), false, clientHeader())
	require.NoError(t, err)
	uri, r, sent := wire(t, req)
	assert.Equal(t, "/prefix/model/arn:aws:bedrock:us-east-1:123456789012:inference-profile%2Fus.anthropic.claude-sonnet-4-20250514-v1:0/count-tokens", uri)
	assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
	assert.Equal(t, "application/json", r.Header.Get("Accept"))
	assert.True(t, strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential="+testAKID+"/"))
	for _, gone := range []string{"Anthropic-Version", "Anthropic-Beta", "X-Api-Key", "Traceparent"} {
		assert.Empty(t, r.Header.Values(gone), gone)
	}

	// The wrapped body is exactly what invoke would send, max_tokens 1 standing in.
	inner := countedBody(t, sent)
	withMax := strings.Replace(body, `"system"`, `"max_tokens":1,"system"`, 1)
	ireq, err := c.NewRequest(context.Background(), messagesOp, []byte(withMax), false, clientHeader())
	require.NoError(t, err)
	_, _, invoked := wire(t, ireq)
	assert.JSONEq(t, string(invoked), string(inner))
	assert.False(t, gjson.GetBytes(inner, "model").Exists())
	assert.Equal(t, "bedrock-2023-05-31", gjson.GetBytes(inner, "anthropic_version").String())
	assert.Equal(t, int64(1), gjson.GetBytes(inner, "max_tokens").Int())
	assert.Equal(t, `["interleaved-thinking-2025-05-14","context-1m-2025-08-07","fine-grained-tool-streaming-2025-05-14"]`,
		gjson.GetBytes(inner, "anthropic_beta").Raw)

	// A max_tokens the client gave is kept; a stream flag never makes it a stream.
	req, err = c.NewRequest(context.Background(), countOp, []byte(`{"model":"`+profileID+`","max_tokens":700,"stream":true,"messages":[]}`), true, http.Header{})
	require.NoError(t, err)
	uri, r, sent = wire(t, req)
	assert.Equal(t, "/prefix/model/"+profileID+"/count-tokens", uri)
	assert.Empty(t, r.Header.Get("X-Amzn-Bedrock-Accept"))
	inner = countedBody(t, sent)
	assert.Equal(t, int64(700), gjson.GetBytes(inner, "max_tokens").Int())
	assert.False(t, gjson.GetBytes(inner, "stream").Exists())
}

// Keys a credential source hands out while the gateway runs (a role's, rotating) are
// secrets of the channel from then on: the current set and the one before, no more.
func TestKeysFromTheCredentialSourceAreRuntimeSecrets(t *testing.T) {
	n := 0
	c, err := New(Config{Region: "us-east-1", Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		n++
		s := strconv.Itoa(n)
		return aws.Credentials{AccessKeyID: "ASIAROLE" + s, SecretAccessKey: "role-secret-" + s, SessionToken: "role-session-" + s}, nil
	})})
	require.NoError(t, err)
	assert.Empty(t, c.RuntimeSecrets())
	require.NoError(t, c.CheckCredentials(context.Background()))
	assert.Equal(t, []string{"ASIAROLE1", "role-secret-1", "role-session-1"}, c.RuntimeSecrets(), "known from the check at load on")
	for range 3 {
		_, err := c.NewRequest(context.Background(), messagesOp, []byte(`{"model":"m","max_tokens":1}`), false, http.Header{})
		require.NoError(t, err)
	}
	assert.Equal(t, []string{"ASIAROLE4", "role-secret-4", "role-session-4", "ASIAROLE3", "role-secret-3", "role-session-3"}, c.RuntimeSecrets())
	var _ channel.RuntimeSecrets = c
}
