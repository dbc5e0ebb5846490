package integration

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"
)

// The provider the console's sign-in tests run against must speak the protocol as a
// real one does, or those tests prove nothing. These tests drive it as the gateway's
// sign-in will: go-oidc discovery and ID token verification, x/oauth2 with PKCE.

const testRedirectURI = "http://127.0.0.1:1/auth/callback" // never visited: the tests stop at the redirect

func testIDPConfig() idpConfig {
	return idpConfig{
		Users: []idpUser{{
			Username: "ada", Password: "correct horse", Subject: "user-ada",
			Email: "ada@example.test", EmailVerified: true, Name: "Ada Lovelace",
			Groups: []string{"switchyard-admins", "ops"},
		}},
		Clients: []idpClient{{
			ClientID: "switchyard-console", ClientSecret: "console-secret",
			RedirectURIs:           []string{testRedirectURI},
			PostLogoutRedirectURIs: []string{"http://127.0.0.1:1/signed-out"},
		}},
	}
}

// browserClient is a plain HTTP client with a cookie jar, as a browser would have.
func browserClient(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar, Timeout: 10 * time.Second}
}

type idTokenClaims struct {
	Email         string   `json:"email"`
	EmailVerified bool     `json:"email_verified"`
	Name          string   `json:"name"`
	Groups        []string `json:"groups"`
}

func oauthErrorCode(t *testing.T, err error) string {
	t.Helper()
	var re *oauth2.RetrieveError
	require.True(t, errors.As(err, &re), "not an OAuth error response: %v", err)
	return re.ErrorCode
}

func TestOIDCProviderCodeFlowWithPKCE(t *testing.T) {
	cfg := testIDPConfig()
	cfg.IDTokenLifetime = 2 * time.Minute // not the provider's default of five
	p := startOIDCProvider(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	provider, err := oidc.NewProvider(ctx, p.Issuer) // discovery; go-oidc checks the issuer it states
	require.NoError(t, err)
	endpoint := provider.Endpoint()
	endpoint.AuthStyle = oauth2.AuthStyleInHeader
	conf := oauth2.Config{
		ClientID: "switchyard-console", ClientSecret: "console-secret",
		Endpoint: endpoint, RedirectURL: testRedirectURI,
		Scopes: []string{oidc.ScopeOpenID, "profile", "email", oidc.ScopeOfflineAccess},
	}
	verifier, state, nonce := oauth2.GenerateVerifier(), rand.Text(), rand.Text()
	authURL := conf.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oidc.Nonce(nonce))

	browser := browserClient(t)
	id := p.openLoginForm(t, browser, authURL)

	// A wrong password: the form again, with an error, and no way on to the client.
	refused := p.submitLogin(t, browser, id, "ada", "wrong horse")
	assert.Equal(t, http.StatusUnauthorized, refused.Status)
	assert.Nil(t, refused.Location, "a wrong password must not redirect anywhere")
	assert.Contains(t, refused.Body, `id="`+idpErrorID+`"`)
	assert.Contains(t, refused.Body, `id="`+idpPasswordID+`"`)
	assert.NotContains(t, refused.Body, "code=")
	unknown := p.submitLogin(t, browser, id, "nobody", "correct horse")
	assert.Equal(t, http.StatusUnauthorized, unknown.Status)
	assert.Nil(t, unknown.Location)

	// The right one, on the same form, as a person would retry.
	answer := p.submitLogin(t, browser, id, "ada", "correct horse")
	require.Equal(t, http.StatusFound, answer.Status, answer.Body)
	back := p.followToClient(t, browser, answer.Location)
	assert.Equal(t, testRedirectURI, (&url.URL{Scheme: back.Scheme, Host: back.Host, Path: back.Path}).String())
	assert.Equal(t, state, back.Query().Get("state"))
	code := back.Query().Get("code")
	require.NotEmpty(t, code, "no code in %s", back)

	// The code alone, or with another verifier, is refused: the client must prove it
	// holds the verifier whose challenge started the sign-in.
	_, err = conf.Exchange(ctx, code)
	require.Error(t, err, "a code was exchanged without the PKCE verifier")
	assert.Equal(t, "invalid_request", oauthErrorCode(t, err))
	_, err = conf.Exchange(ctx, code, oauth2.VerifierOption(oauth2.GenerateVerifier()))
	require.Error(t, err, "a code was exchanged with the wrong PKCE verifier")
	assert.Equal(t, "invalid_grant", oauthErrorCode(t, err))
	wrongSecret := conf
	wrongSecret.ClientSecret = "not-the-secret"
	_, err = wrongSecret.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	require.Error(t, err, "a code was exchanged with the wrong client secret")

	tok, err := conf.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	require.NoError(t, err)
	rawIDToken, ok := tok.Extra("id_token").(string)
	require.True(t, ok, "no id_token in the token response")

	// go-oidc checks issuer, audience, expiry and the signature against the JWKS.
	idToken, err := provider.Verifier(&oidc.Config{ClientID: conf.ClientID}).Verify(ctx, rawIDToken)
	require.NoError(t, err)
	assert.Equal(t, "user-ada", idToken.Subject)
	assert.Equal(t, nonce, idToken.Nonce)
	assert.WithinDuration(t, time.Now().Add(cfg.IDTokenLifetime), idToken.Expiry, 30*time.Second)
	require.NoError(t, idToken.VerifyAccessToken(tok.AccessToken))
	var claims idTokenClaims
	require.NoError(t, idToken.Claims(&claims))
	assert.Equal(t, idTokenClaims{
		Email: "ada@example.test", EmailVerified: true, Name: "Ada Lovelace",
		Groups: []string{"switchyard-admins", "ops"},
	}, claims)
	_, err = provider.Verifier(&oidc.Config{ClientID: "another-client"}).Verify(ctx, rawIDToken)
	assert.Error(t, err, "an ID token for the console must not verify for another audience")

	// The code is spent.
	_, err = conf.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	require.Error(t, err, "an authorization code was exchanged twice")
	assert.Equal(t, "invalid_grant", oauthErrorCode(t, err))

	// userinfo carries the groups too.
	info, err := provider.UserInfo(ctx, oauth2.StaticTokenSource(tok))
	require.NoError(t, err)
	assert.Equal(t, "ada@example.test", info.Email)
	var infoClaims idTokenClaims
	require.NoError(t, info.Claims(&infoClaims))
	assert.Equal(t, []string{"switchyard-admins", "ops"}, infoClaims.Groups)
	assert.Equal(t, "Ada Lovelace", infoClaims.Name)

	// offline_access gave a refresh token; it yields a new ID token once, then is spent.
	require.NotEmpty(t, tok.RefreshToken)
	refreshed, err := conf.TokenSource(ctx, &oauth2.Token{RefreshToken: tok.RefreshToken}).Token()
	require.NoError(t, err)
	refreshedRaw, ok := refreshed.Extra("id_token").(string)
	require.True(t, ok, "no id_token on refresh")
	refreshedID, err := provider.Verifier(&oidc.Config{ClientID: conf.ClientID}).Verify(ctx, refreshedRaw)
	require.NoError(t, err)
	var refreshedClaims idTokenClaims
	require.NoError(t, refreshedID.Claims(&refreshedClaims))
	assert.Equal(t, claims.Groups, refreshedClaims.Groups)
	_, err = conf.TokenSource(ctx, &oauth2.Token{RefreshToken: tok.RefreshToken}).Token()
	assert.Error(t, err, "a rotated refresh token was accepted again")

	// end_session sends the browser to the registered post-logout URI with the state,
	// and the user's tokens at the console stop working.
	var meta struct {
		EndSession string `json:"end_session_endpoint"`
	}
	require.NoError(t, provider.Claims(&meta))
	require.NotEmpty(t, meta.EndSession)
	logout := meta.EndSession + "?" + url.Values{
		"id_token_hint":            {rawIDToken},
		"post_logout_redirect_uri": {"http://127.0.0.1:1/signed-out"},
		"state":                    {"bye"},
	}.Encode()
	resp, err := noFollow(browser).Get(logout)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusFound, resp.StatusCode)
	assert.Equal(t, "http://127.0.0.1:1/signed-out?state=bye", resp.Header.Get("Location"))
	_, err = provider.UserInfo(ctx, oauth2.StaticTokenSource(refreshed))
	assert.Error(t, err, "an access token still answered userinfo after end_session")
}

// TestOIDCProviderRequiresPKCE: an authorization request without an S256 challenge is
// answered with an error at the client's redirect_uri, before any form.
func TestOIDCProviderRequiresPKCE(t *testing.T) {
	p := startOIDCProvider(t, testIDPConfig())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	provider, err := oidc.NewProvider(ctx, p.Issuer)
	require.NoError(t, err)
	conf := oauth2.Config{
		ClientID: "switchyard-console", ClientSecret: "console-secret",
		Endpoint: provider.Endpoint(), RedirectURL: testRedirectURI,
		Scopes: []string{oidc.ScopeOpenID, "email"},
	}
	browser := browserClient(t)
	for name, authURL := range map[string]string{
		"no challenge":    conf.AuthCodeURL("s1"),
		"plain challenge": conf.AuthCodeURL("s2", oauth2.SetAuthURLParam("code_challenge", oauth2.GenerateVerifier()), oauth2.SetAuthURLParam("code_challenge_method", "plain")),
	} {
		resp, err := noFollow(browser).Get(authURL)
		require.NoError(t, err, name)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusFound, resp.StatusCode, name)
		back, err := resp.Location()
		require.NoError(t, err, name)
		assert.Equal(t, "127.0.0.1:1", back.Host, "%s: the error goes back to the client", name)
		assert.Equal(t, "invalid_request", back.Query().Get("error"), name)
		assert.Empty(t, back.Query().Get("code"), name)
	}
}
