package relay

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// Bounds of one background probe: it waits for a connection as long as a request would,
// then a few seconds for the answer (listing models is quick on a healthy upstream),
// never more than maxProbeTime in all; of its body only this much is read.
const (
	probeAnswerTime = 5 * time.Second
	maxProbeTime    = 10 * time.Second
	probeBodyLimit  = 64 << 10
)

// probeVersion is the Family B version the probe asks for: the one every Family B
// upstream serves.
const probeVersion = "2023-06-01"

// Probe asks the upstream for its model list, with the candidate's own transport and
// credential and nothing of any client's: Family A GET {base}/models, Family B GET
// {base}/v1/models. A 2xx passes; a 404 or 405 means the upstream has no such endpoint;
// anything else, a transport failure or the time running out fails. It is not client
// traffic: nothing here meters or limits it.
func (u *Upstream) Probe(ctx context.Context) routing.ProbeOutcome {
	ctx, cancel := context.WithTimeout(ctx, u.probeTimeout())
	defer cancel()
	c := u.Candidate
	header := http.Header{"Accept": {"application/json"}}
	path := "/models" // Family A bases end in the version segment
	if c.Protocol == protocols.FamilyB {
		header.Set("Anthropic-Version", probeVersion)
		path = "/v1/models"
	}
	req := (&http.Request{
		Method:     http.MethodGet,
		URL:        &url.URL{Scheme: u.scheme, Host: u.host, Path: u.basePath + path},
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     protocols.UpstreamRequestHeader(header, nil, c.Protocol, c.Credential),
		Host:       u.host,
	}).WithContext(ctx)
	// The transport itself, not a client: a redirect is an answer like any other.
	resp, err := u.transport.RoundTrip(req)
	if err != nil {
		return routing.ProbeOutcome{Result: routing.ProbeFail}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, probeBodyLimit))
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return routing.ProbeOutcome{Result: routing.ProbePass}
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		return routing.ProbeOutcome{Result: routing.ProbeNotOffered}
	}
	out := routing.ProbeOutcome{Result: routing.ProbeFail}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		// Honoured up to max_cooldown, as a live answer's is.
		out.RetryAfter = routing.RetryAfter(resp.Header, time.Now(), u.Health.MaxPause())
	}
	return out
}

// probeTimeout is the candidate's dial timeout plus a short wait for the answer, capped.
func (u *Upstream) probeTimeout() time.Duration {
	dial := u.Candidate.Timeouts.Dial
	if dial <= 0 {
		dial = DefaultDialTimeout
	}
	return min(dial+probeAnswerTime, maxProbeTime)
}
