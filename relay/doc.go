// Package relay carries one client request to a model's candidates in turn until one of
// them answers, and relays that answer with the model mapping hidden. Nothing reaches the
// client before a candidate has committed: a failover status, a transport failure or an
// in-band error as the first stream event moves the request on to the next candidate.
// It is plain net/http; the Caddy layer only calls Serve.
package relay
