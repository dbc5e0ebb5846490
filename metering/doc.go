// Package metering turns what an upstream reported into exact token counts and a price,
// and keeps a ledger of one record per request that loses nothing: every record is in a
// local journal before the answer's last byte reaches the client, and reaches the
// database from there. It knows nothing about Caddy.
package metering
