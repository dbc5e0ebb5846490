// Package limits holds what a key or a project may use (requests and tokens per minute,
// concurrent requests, a spend budget per period) and the counters that enforce it: in
// memory for one gateway, in Redis for several. Admission reserves a request's worst
// case; completion settles it to the metered cost. It knows nothing of Caddy, of HTTP
// or of the protocols.
package limits
