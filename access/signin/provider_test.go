package signin

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Keys are made once: RSA generation is slow.
var (
	keysOnce          sync.Once
	goodKey, otherKey *rsa.PrivateKey
)

func testKeys(t *testing.T) (*rsa.PrivateKey, *rsa.PrivateKey) {
	keysOnce.Do(func() {
		var err error
		if goodKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
		if otherKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
	})
	return goodKey, otherKey
}

// testClock is the clock of a test: the service, the provider's tokens and the
// verifier's expiry check all read it.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// grantRequest is what the fake provider remembers of an authorization request.
type grantRequest struct {
	nonce, challenge, method, redirect string
}

// fakeProvider is an OpenID provider in the test: discovery, a key set, an
// authorization endpoint that signs in whoever the test says, and a token endpoint
// that checks the client and the PKCE verifier and issues ID tokens the test can spoil.
type fakeProvider struct {
	t      *testing.T
	srv    *httptest.Server
	clock  *testClock
	key    *rsa.PrivateKey
	secret string

	mu sync.Mutex
	// claims are the person's claims in the next ID tokens (sub, email, name, groups).
	claims map[string]any
	// spoil changes an ID token's claims before signing; signWith signs with another key.
	spoil    func(map[string]any)
	signWith *rsa.PrivateKey
	// codes are authorization codes issued, reusable on purpose so that a replayed
	// callback meets our own refusal, not the provider's.
	codes map[string]grantRequest
	// refreshes are the refresh tokens that still work; a refresh rotates.
	refreshes map[string]bool
	// down makes every endpoint answer 503; discoveries counts discovery requests.
	down        bool
	discoveries int
	refreshSeen int
	// errorBody is put in every token endpoint error, to prove it is never shown.
	errorBody string
	// The next holdRefresh refreshes announce themselves on arrived and wait for a
	// release before they are answered.
	holdRefresh       int
	arrived, released chan struct{}
}

func newFakeProvider(t *testing.T, clock *testClock) *fakeProvider {
	good, _ := testKeys(t)
	p := &fakeProvider{
		t: t, clock: clock, key: good, secret: "client-secret-for-tests",
		claims:    map[string]any{"sub": "person-1", "email": "ada@example.com", "name": "Ada", "groups": []string{"eng-a"}},
		codes:     map[string]grantRequest{},
		refreshes: map[string]bool{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", p.discovery)
	mux.HandleFunc("/keys", p.keys)
	mux.HandleFunc("/authorize", p.authorize)
	mux.HandleFunc("/token", p.token)
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *fakeProvider) issuer() string { return p.srv.URL }

func (p *fakeProvider) set(f func(p *fakeProvider)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

func (p *fakeProvider) isDown(w http.ResponseWriter) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return true
	}
	return false
}

func (p *fakeProvider) discovery(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.discoveries++
	p.mu.Unlock()
	if p.isDown(w) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"issuer":                                p.issuer(),
		"authorization_endpoint":                p.issuer() + "/authorize",
		"token_endpoint":                        p.issuer() + "/token",
		"jwks_uri":                              p.issuer() + "/keys",
		"id_token_signing_alg_values_supported": []string{"RS256"},
		"response_types_supported":              []string{"code"},
		"subject_types_supported":               []string{"public"},
	})
}

func (p *fakeProvider) keys(w http.ResponseWriter, r *http.Request) {
	if p.isDown(w) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: &p.key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"},
	}})
}

// authorize signs in the test's person at once and sends the browser back with a code.
func (p *fakeProvider) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("client_id") != "switchyard" || q.Get("response_type") != "code" {
		http.Error(w, "bad authorization request", http.StatusBadRequest)
		return
	}
	code := randomString()
	p.mu.Lock()
	p.codes[code] = grantRequest{nonce: q.Get("nonce"), challenge: q.Get("code_challenge"), method: q.Get("code_challenge_method"), redirect: q.Get("redirect_uri")}
	p.mu.Unlock()
	back, _ := url.Parse(q.Get("redirect_uri"))
	bq := back.Query()
	bq.Set("code", code)
	bq.Set("state", q.Get("state"))
	back.RawQuery = bq.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

func (p *fakeProvider) tokenError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": p.errorBody})
}

func (p *fakeProvider) token(w http.ResponseWriter, r *http.Request) {
	if p.isDown(w) {
		return
	}
	if err := r.ParseForm(); err != nil {
		p.tokenError(w, http.StatusBadRequest, "invalid_request")
		return
	}
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if id != "switchyard" || secret != p.secret {
		p.tokenError(w, http.StatusUnauthorized, "invalid_client")
		return
	}
	p.mu.Lock()
	hold := p.holdRefresh > 0 && r.PostForm.Get("grant_type") == "refresh_token"
	if hold {
		p.holdRefresh--
	}
	p.mu.Unlock()
	if hold {
		p.arrived <- struct{}{}
		<-p.released
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var nonce string
	switch r.PostForm.Get("grant_type") {
	case "authorization_code":
		g, ok := p.codes[r.PostForm.Get("code")]
		if !ok || g.redirect != r.PostForm.Get("redirect_uri") {
			p.tokenError(w, http.StatusBadRequest, "invalid_grant")
			return
		}
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		if g.method != "S256" || base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge {
			p.tokenError(w, http.StatusBadRequest, "invalid_grant")
			return
		}
		nonce = g.nonce
	case "refresh_token":
		p.refreshSeen++
		rt := r.PostForm.Get("refresh_token")
		if !p.refreshes[rt] {
			p.tokenError(w, http.StatusBadRequest, "invalid_grant")
			return
		}
		delete(p.refreshes, rt)
	default:
		p.tokenError(w, http.StatusBadRequest, "unsupported_grant_type")
		return
	}
	now := p.clock.Now()
	claims := map[string]any{
		"iss": p.issuer(), "aud": "switchyard",
		"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(),
	}
	if nonce != "" {
		claims["nonce"] = nonce
	}
	for k, v := range p.claims {
		claims[k] = v
	}
	if p.spoil != nil {
		p.spoil(claims)
	}
	key := p.key
	if p.signWith != nil {
		key = p.signWith
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
	if err != nil {
		p.t.Error(err)
		return
	}
	raw, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		p.t.Error(err)
		return
	}
	refresh := "rt-" + randomString()
	p.refreshes[refresh] = true
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"access_token": "at-" + randomString(), "token_type": "Bearer", "expires_in": 300,
		"id_token": raw, "refresh_token": refresh,
	})
}

// authorizeBrowser follows a login's redirect to the fake provider as a browser would,
// and returns the callback's query the provider sent it back with.
func (p *fakeProvider) authorizeBrowser(t *testing.T, loc string) string {
	t.Helper()
	if !strings.HasPrefix(loc, p.issuer()+"/authorize?") {
		t.Fatalf("login sent the browser to %q, not to the provider", loc)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(loc)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("provider's authorize answered %d", resp.StatusCode)
	}
	back, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	return back.RawQuery
}
