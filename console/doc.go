// Package console is the operator's side of Switchyard: a JSON API over keys and models,
// served both on Caddy's admin endpoint (for the CLI) and by the console handler (for the
// web page), and the web page itself, embedded in the binary. It knows nothing of Caddy.
package console
