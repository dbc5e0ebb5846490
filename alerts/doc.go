// Package alerts tells operators by webhook when a key's or project's spend crosses a
// share of its budget, when a candidate's circuit opens or closes, and when the usage
// journal cannot drain into the database. Events go into an outbox in the store, so a
// delivery survives a restart and, with several gateways on one store, one of them sends
// it; each delivery is signed with HMAC-SHA256 over a secret shared with the receiver.
//
// The package knows nothing of Caddy or of the database: the store implements Outbox.
package alerts
