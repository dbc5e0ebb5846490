package vertex_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// testKey is one RSA key for the whole package: generating one per test is slow under -race.
var testKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

const (
	saEmail   = "gateway-sa@secret-proj-77.iam.gserviceaccount.com"
	saProject = "secret-proj-77"
)

// serviceAccountJSON is a service-account key file whose token_uri is tokenURI.
func serviceAccountJSON(t testing.TB, tokenURI string) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(testKey())
	require.NoError(t, err)
	b, err := json.Marshal(map[string]string{
		"type":           "service_account",
		"project_id":     saProject,
		"private_key_id": "kid-1",
		"private_key":    string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email":   saEmail,
		"client_id":      "1234567890",
		"token_uri":      tokenURI,
	})
	require.NoError(t, err)
	return b
}

// writeFile puts b in a file of the test's temporary directory.
func writeFile(t testing.TB, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, b, 0o600))
	return p
}

// tokenServer is a fake Google token endpoint on 127.0.0.1: it issues tok-1, tok-2, …
// valid for expiresIn seconds, or fails with status when status is set.
type tokenServer struct {
	*httptest.Server
	mu        sync.Mutex
	issued    int
	forms     []url.Values
	expiresIn int
	status    int
}

func newTokenServer(t testing.TB, expiresIn int) *tokenServer {
	ts := &tokenServer{expiresIn: expiresIn}
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		ts.mu.Lock()
		defer ts.mu.Unlock()
		ts.forms = append(ts.forms, r.PostForm)
		if ts.status != 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(ts.status)
			_, _ = w.Write([]byte(`{"error":"invalid_grant","error_description":"account ` + saEmail + ` is disabled"}`))
			return
		}
		ts.issued++
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"access_token": "tok-" + strconv.Itoa(ts.issued),
			"expires_in":   ts.expiresIn,
			"token_type":   "Bearer",
		})
	}))
	t.Cleanup(ts.Close)
	return ts
}

func (ts *tokenServer) count() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.issued
}

func mustAtoi(t testing.TB, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}
