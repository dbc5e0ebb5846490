package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
)

// maxConfigBytes bounds what the provider reads of its JSON file: a test writes a
// handful of users and clients, so anything larger is a mistake, not a bigger test.
const maxConfigBytes = 1 << 20

// providerConfig is the JSON file the provider is started with (-config): who may
// sign in and which relying parties may ask it to.
type providerConfig struct {
	Users   []userConfig   `json:"users"`
	Clients []clientConfig `json:"clients"`
}

type userConfig struct {
	Username      string   `json:"username"`
	Password      string   `json:"password"`
	Subject       string   `json:"subject"`
	Email         string   `json:"email"`
	EmailVerified bool     `json:"email_verified"`
	Name          string   `json:"name"`
	Groups        []string `json:"groups"`
}

type clientConfig struct {
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
	// AuthMethod is how the client authenticates at the token endpoint:
	// "client_secret_basic" (the default with a secret), "client_secret_post", or
	// "none" (the default without a secret: a public client, held to PKCE alone).
	AuthMethod             string   `json:"auth_method"`
	RedirectURIs           []string `json:"redirect_uris"`
	PostLogoutRedirectURIs []string `json:"post_logout_redirect_uris"`
}

// loadConfig reads and checks the file; every mistake is reported before the
// provider listens, so a test sees it as a failed start rather than a failed login.
func loadConfig(path string) (*providerConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxConfigBytes)
	}
	var cfg providerConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &cfg, nil
}

func (c *providerConfig) check() error {
	if len(c.Users) == 0 {
		return errors.New("no users: nobody could sign in")
	}
	if len(c.Clients) == 0 {
		return errors.New("no clients: nothing could ask for a sign-in")
	}
	usernames, subjects := map[string]bool{}, map[string]bool{}
	for i := range c.Users {
		u := &c.Users[i]
		if u.Username == "" || u.Password == "" {
			return fmt.Errorf("user %d needs a username and a password", i)
		}
		if u.Subject == "" {
			u.Subject = u.Username
		}
		if usernames[u.Username] || subjects[u.Subject] {
			return fmt.Errorf("user %q: username or subject used twice", u.Username)
		}
		usernames[u.Username], subjects[u.Subject] = true, true
	}
	ids := map[string]bool{}
	for i := range c.Clients {
		cl := &c.Clients[i]
		if cl.ClientID == "" {
			return fmt.Errorf("client %d needs a client_id", i)
		}
		if ids[cl.ClientID] {
			return fmt.Errorf("client %q listed twice", cl.ClientID)
		}
		ids[cl.ClientID] = true
		if len(cl.RedirectURIs) == 0 {
			return fmt.Errorf("client %q needs at least one redirect_uri", cl.ClientID)
		}
		for _, list := range [][]string{cl.RedirectURIs, cl.PostLogoutRedirectURIs} {
			for _, raw := range list {
				if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					return fmt.Errorf("client %q: %q is not an absolute http(s) URL", cl.ClientID, raw)
				}
			}
		}
		switch cl.AuthMethod {
		case "":
			cl.AuthMethod = "client_secret_basic"
			if cl.ClientSecret == "" {
				cl.AuthMethod = "none"
			}
		case "client_secret_basic", "client_secret_post":
			if cl.ClientSecret == "" {
				return fmt.Errorf("client %q: auth_method %s needs a client_secret", cl.ClientID, cl.AuthMethod)
			}
		case "none":
			if cl.ClientSecret != "" {
				return fmt.Errorf("client %q: auth_method none takes no client_secret", cl.ClientID)
			}
		default:
			return fmt.Errorf("client %q: unknown auth_method %q", cl.ClientID, cl.AuthMethod)
		}
	}
	return nil
}
