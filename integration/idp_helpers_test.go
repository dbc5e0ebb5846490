package integration

import (
	"bufio"
	"encoding/json"
	"errors"
	"html"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A real OpenID Connect provider for sign-in tests: integration/oidcprovider, a nested Go
// module (so zitadel's dependencies stay out of the product's go.mod) built on zitadel's
// op package. startOIDCProvider builds it once per test process and runs one per test,
// on 127.0.0.1 and a free port.

// The provider's sign-in form, as a browser test finds it: element ids (the inputs carry
// the same names). A wrong password answers 401 with the form again and #idpErrorID.
const (
	idpFormID     = "login"
	idpUsernameID = "username"
	idpPasswordID = "password"
	idpSubmitID   = "submit"
	idpErrorID    = "error"
	// The hidden input naming the sign-in in progress (its name is the same).
	idpAuthRequestField = "authRequestID"
	idpLoginPath        = "/login"
)

// idpConfig is who may sign in at the provider and which clients may ask it to.
type idpConfig struct {
	Users   []idpUser   `json:"users"`
	Clients []idpClient `json:"clients"`
	// Zero leaves the provider's default of five minutes.
	IDTokenLifetime     time.Duration `json:"-"`
	AccessTokenLifetime time.Duration `json:"-"`
}

// idpUser is a user of the provider. Its ID token and userinfo carry sub (Subject, or
// the username when empty), name and preferred_username (scope profile), email and
// email_verified (scope email), and groups always (a string array, empty when none).
type idpUser struct {
	Username      string   `json:"username"`
	Password      string   `json:"password"`
	Subject       string   `json:"subject,omitempty"`
	Email         string   `json:"email,omitempty"`
	EmailVerified bool     `json:"email_verified"`
	Name          string   `json:"name,omitempty"`
	Groups        []string `json:"groups"`
}

// idpClient is a relying party. Every client must send PKCE with S256; one with a secret
// authenticates with HTTP Basic at the token endpoint unless AuthMethod says
// "client_secret_post"; one without is a public client ("none").
type idpClient struct {
	ClientID               string   `json:"client_id"`
	ClientSecret           string   `json:"client_secret,omitempty"`
	AuthMethod             string   `json:"auth_method,omitempty"`
	RedirectURIs           []string `json:"redirect_uris"`
	PostLogoutRedirectURIs []string `json:"post_logout_redirect_uris,omitempty"`
}

// idp is a running provider.
type idp struct {
	// Issuer is the provider's issuer URL, http://127.0.0.1:PORT; discovery is at
	// Issuer + "/.well-known/openid-configuration".
	Issuer string
	origin *url.URL
}

var oidcProviderBuild struct {
	once sync.Once
	bin  string
	err  error
}

// buildOIDCProvider builds the provider binary once for the test process. On a clean
// machine go build first downloads zitadel's modules from the module proxy.
func buildOIDCProvider(t *testing.T) string {
	t.Helper()
	b := &oidcProviderBuild
	b.once.Do(func() {
		dir := runDir
		if dir == "" { // not under this package's TestMain
			dir = os.TempDir()
		}
		b.bin = filepath.Join(dir, "oidcprovider-"+strconv.Itoa(os.Getpid()))
		build := exec.Command("go", "build", "-o", b.bin, ".")
		build.Dir = "oidcprovider"
		// The nested module is built on its own, whatever go.work may be around.
		build.Env = append(os.Environ(), "GOWORK=off")
		if out, err := build.CombinedOutput(); err != nil {
			b.err = errors.New("go build in integration/oidcprovider: " + err.Error() + "\n" + string(out))
		}
	})
	if b.err != nil {
		// No skip, in CI or not: Go is always there, and the modules come from the proxy.
		t.Fatal(b.err)
	}
	return b.bin
}

// startOIDCProvider runs a provider with cfg until the test ends, and returns once it
// accepts connections. Its log is added to the test's output when the test fails; at
// the end it is sent SIGTERM and must exit cleanly.
func startOIDCProvider(t *testing.T, cfg idpConfig) *idp {
	t.Helper()
	bin := buildOIDCProvider(t)
	dir := t.TempDir()
	configPath := filepath.Join(dir, "oidcprovider.json")
	data, err := json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(configPath, data, 0o600))

	args := []string{"-config", configPath, "-port", "0"}
	if cfg.IDTokenLifetime > 0 {
		args = append(args, "-id-token-lifetime", cfg.IDTokenLifetime.String())
	}
	if cfg.AccessTokenLifetime > 0 {
		args = append(args, "-access-token-lifetime", cfg.AccessTokenLifetime.String())
	}
	cmd := exec.Command(bin, args...)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	exited := make(chan error, 1)
	ready := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			if issuer, ok := strings.CutPrefix(lines.Text(), "READY "); ok {
				select {
				case ready <- issuer:
				default:
				}
			}
		}
		// The pipe is drained to its end before Wait, as os/exec asks.
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("the OpenID provider did not exit cleanly on SIGTERM: %v", err)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("the OpenID provider was still running 10s after SIGTERM")
		}
		if t.Failed() {
			t.Logf("OpenID provider log:\n%s", stderr.String())
		}
	})

	select {
	case issuer := <-ready:
		origin, err := url.Parse(issuer)
		require.NoError(t, err)
		return &idp{Issuer: issuer, origin: origin}
	case err := <-exited:
		exited <- err // for the cleanup
		t.Fatalf("the OpenID provider exited before it was ready (%v):\n%s", err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the OpenID provider printed no READY line within 30s:\n%s", stderr.String())
	}
	return nil
}

// onProvider reports whether u is on the provider's own origin.
func (p *idp) onProvider(u *url.URL) bool {
	return u.Scheme == p.origin.Scheme && u.Host == p.origin.Host
}

// noFollow is client with redirects handed back rather than followed (and its cookie
// jar, if any, shared).
func noFollow(client *http.Client) *http.Client {
	c := *client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

var idpAuthRequestInput = regexp.MustCompile(`<input type="hidden" id="` + idpAuthRequestField + `" name="` + idpAuthRequestField + `" value="([^"]*)">`)

// openLoginForm follows startURL (an authorization URL, or a page of the relying party
// that redirects to one) to the provider's sign-in form, checks the form has the fields
// a browser test uses, and returns the id of the sign-in in progress.
func (p *idp) openLoginForm(t *testing.T, client *http.Client, startURL string) string {
	t.Helper()
	resp, err := client.Get(startURL)
	require.NoError(t, err)
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the sign-in form, at %s:\n%s", resp.Request.URL, body)
	require.True(t, p.onProvider(resp.Request.URL) && resp.Request.URL.Path == idpLoginPath,
		"expected the provider's sign-in form, got %s", resp.Request.URL)
	page := string(body)
	for _, id := range []string{idpFormID, idpUsernameID, idpPasswordID, idpSubmitID} {
		require.Contains(t, page, `id="`+id+`"`, "the sign-in form lost an element a browser test finds by id")
	}
	m := idpAuthRequestInput.FindStringSubmatch(page)
	require.NotNil(t, m, "no sign-in id on the form:\n%s", page)
	return html.UnescapeString(m[1])
}

// idpAnswer is the provider's answer to a posted sign-in form, not followed.
type idpAnswer struct {
	Status   int
	Location *url.URL // nil when the answer is not a redirect
	Body     string
}

// submitLogin posts the form as a browser would and returns the answer unfollowed.
func (p *idp) submitLogin(t *testing.T, client *http.Client, authRequestID, username, password string) idpAnswer {
	t.Helper()
	form := url.Values{idpAuthRequestField: {authRequestID}, "username": {username}, "password": {password}}
	resp, err := noFollow(client).PostForm(p.Issuer+idpLoginPath, form)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	require.NoError(t, err)
	answer := idpAnswer{Status: resp.StatusCode, Body: string(body)}
	if loc, err := resp.Location(); err == nil {
		answer.Location = loc
	}
	return answer
}

// followToClient follows the provider's redirects from location and returns the first
// URL off the provider, unvisited: after a sign-in, the client's redirect_uri with code
// and state (or error).
func (p *idp) followToClient(t *testing.T, client *http.Client, location *url.URL) *url.URL {
	t.Helper()
	c := noFollow(client)
	for hops := 0; p.onProvider(location); hops++ {
		require.Less(t, hops, 10, "the provider keeps redirecting to itself")
		resp, err := c.Get(location.String())
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		next, err := resp.Location()
		require.NoError(t, err, "%s answered %d, not a redirect", location, resp.StatusCode)
		location = next
	}
	return location
}

// signIn goes from startURL through the provider's form with the user's credentials and
// returns where the provider then sends the browser (unvisited): the client's
// redirect_uri with code and state.
func (p *idp) signIn(t *testing.T, client *http.Client, startURL, username, password string) *url.URL {
	t.Helper()
	id := p.openLoginForm(t, client, startURL)
	answer := p.submitLogin(t, client, id, username, password)
	require.Equal(t, http.StatusFound, answer.Status, "signing in as %s:\n%s", username, answer.Body)
	require.NotNil(t, answer.Location)
	return p.followToClient(t, client, answer.Location)
}
