// Package routing holds the model catalog (service models, their candidates, protocols,
// capabilities and prices) and decides which candidate serves a request and what an
// outcome means for failover. It knows nothing about Caddy.
package routing
