// Command oidcprovider is a standards OpenID Connect provider for Switchyard's tests,
// built on zitadel's op package: discovery, JWKS, authorize with a plain HTML sign-in
// form, token (authorization code with PKCE S256 required; refresh tokens for
// offline_access), userinfo and end_session. Its users and clients come from a JSON
// file; its state lives in memory and ends with the process.
//
// It listens on 127.0.0.1 only, over plain HTTP, and prints one line on stdout when it
// accepts connections:
//
//	READY http://127.0.0.1:PORT
//
// where the URL is the issuer. It serves until SIGINT or SIGTERM. Logs go to stderr.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/zitadel/oidc/v3/pkg/op"
)

func main() {
	configPath := flag.String("config", "", "JSON file of users and clients (required)")
	port := flag.Int("port", 0, "port on 127.0.0.1 to listen on; 0 picks a free one")
	idTokenTTL := flag.Duration("id-token-lifetime", 5*time.Minute, "how long an ID token is valid")
	accessTTL := flag.Duration("access-token-lifetime", 5*time.Minute, "how long an access token is valid")
	flag.Parse()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err := run(*configPath, *port, *idTokenTTL, *accessTTL); err != nil {
		fmt.Fprintln(os.Stderr, "oidcprovider:", err)
		os.Exit(1)
	}
}

func run(configPath string, port int, idTokenTTL, accessTTL time.Duration) error {
	if configPath == "" {
		return errors.New("-config is required")
	}
	if port < 0 || port > 65535 {
		return fmt.Errorf("-port %d is not a port", port)
	}
	if idTokenTTL <= 0 || accessTTL <= 0 {
		return errors.New("token lifetimes must be positive")
	}
	cfg, err := loadConfig(configPath)
	if err != nil {
		return err
	}
	storage, err := newMemoryStorage(cfg, idTokenTTL, accessTTL)
	if err != nil {
		return err
	}

	// The issuer names the port, so the listener comes first.
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	issuer := "http://" + ln.Addr().String()

	var cryptoKey [32]byte // encrypts the opaque access tokens; fresh each start
	if _, err := rand.Read(cryptoKey[:]); err != nil {
		return err
	}
	provider, err := op.NewProvider(&op.Config{
		CryptoKey:             cryptoKey,
		CryptoKeyId:           rand.Text(),
		CodeMethodS256:        true,
		AuthMethodPost:        true,
		GrantTypeRefreshToken: true,
		SupportedClaims:       append(slices.Clone(op.DefaultSupportedClaims), "groups"),
		SupportedScopes:       append(slices.Clone(op.DefaultSupportedScopes), groupsScope),
		// Where end_session sends a browser that names no registered post-logout URI.
		DefaultLogoutRedirectURI: loggedOutPath,
	}, storage, op.StaticIssuer(issuer),
		// An http:// issuer is refused unless allowed; this provider only ever
		// listens on loopback for tests.
		op.WithAllowInsecure(),
	)
	if err != nil {
		return err
	}

	login := &loginHandler{storage: storage, callback: op.AuthCallbackURL(provider)}
	mux := http.NewServeMux()
	// op.AuthCallbackURL reads the issuer from the request context, which op's
	// interceptor puts there.
	mux.Handle(loginPath, op.NewIssuerInterceptor(provider.IssuerFromRequest).Handler(login))
	mux.HandleFunc(loggedOutPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "Signed out.")
	})
	mux.Handle("/", provider)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    64 << 10,
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	// The listener already accepts connections, so the line is true when printed.
	fmt.Println("READY " + issuer)

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

const loggedOutPath = "/logged-out"
