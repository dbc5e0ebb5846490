package caddymodule

import (
	"io"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// The gateway's own time limits on a request body, for a server whose operator set none
// of Caddy's (timeouts { read_body … } or a read_body_idle min_rate): without them a body
// that trickles a byte now and then holds its connection, its buffer and its admission
// for as long as the client likes (Caddy's default read_body_idle of a minute never
// fires on a trickle).
const (
	// DefaultBodyIdle is how long a body may pause, and the grace before its average
	// rate is held to DefaultBodyMinRate.
	DefaultBodyIdle = 10 * time.Second
	// DefaultBodyMinRate is the least average rate of a body after the grace, bytes/s.
	DefaultBodyMinRate = 64 << 10
)

// bodyTimes is a body's time limits: idle is the longest pause and the grace before
// minRate (bytes/s, 0: none) holds on average.
type bodyTimes struct {
	idle    time.Duration
	minRate int64
}

// bodyTimes is the gateway's own limit on bodies, from its options; idle <= 0: none.
func (a *App) bodyTimes() bodyTimes {
	t := bodyTimes{idle: DefaultBodyIdle, minRate: DefaultBodyMinRate}
	if a.DefaultBodyIdle != 0 {
		t.idle, t.minRate = time.Duration(a.DefaultBodyIdle), a.DefaultBodyMinRate
	}
	return t
}

// limitBodyTime puts the gateway's time limits on r's body when the Caddy server it
// arrives on has none of its own (a ceiling or a minimum rate): from then on each read
// of the body must end by the earlier of a pause of idle and the time the body would
// have arrived at minRate after a grace of idle. A read past it fails with
// os.ErrDeadlineExceeded, which the handlers answer with 408. Either way the body's end
// is read once it is whole, so that no read deadline outlives it.
func limitBodyTime(w http.ResponseWriter, r *http.Request, t bodyTimes) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return
	}
	srv, _ := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	// The operator's own limits apply when set (a negative read_body_idle says a proxy
	// in front already bounds bodies).
	own := t.idle > 0 && srv != nil && srv.ReadTimeout <= 0 && srv.ReadMinRate <= 0 && srv.ReadIdleTimeout >= 0
	r.Body = &timedBody{ReadCloser: r.Body, rc: http.NewResponseController(w), times: t, own: own, start: time.Now(), length: r.ContentLength}
}

// timedBody sets the read deadline before each read of the body it wraps (when own).
// Through Caddy's idle reader (when there is one) the deadline is a ceiling on Caddy's.
type timedBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	times   bodyTimes
	own     bool
	start   time.Time
	length  int64 // Content-Length; -1: unknown
	arrived int64
	done    bool
}

func (b *timedBody) Read(p []byte) (int, error) {
	if b.done {
		return b.ReadCloser.Read(p)
	}
	if b.own {
		deadline := time.Now().Add(b.times.idle)
		if b.times.minRate > 0 {
			onAverage := b.start.Add(b.times.idle + time.Duration(b.arrived)*time.Second/time.Duration(b.times.minRate))
			if onAverage.Before(deadline) {
				deadline = onAverage
			}
		}
		if b.rc.SetReadDeadline(deadline) != nil {
			b.own = false // the connection takes no deadline
		}
	}
	n, err := b.ReadCloser.Read(p)
	b.arrived += int64(n)
	if err == nil && b.arrived == b.length {
		// Whole, but its reader may stop here without seeing the end: Caddy's idle
		// reader clears its deadline (a read_body ceiling included) only at the end.
		var end [1]byte
		if m, endErr := b.ReadCloser.Read(end[:]); m == 0 && endErr != nil && endErr != io.EOF {
			err = endErr
		}
	}
	switch {
	case err == io.EOF || err == nil && b.arrived == b.length:
		// A deadline left on the connection would cancel the request while its answer
		// streams (net/http reads on in the background to see the client leave).
		b.done = true
		if b.own {
			_ = b.rc.SetReadDeadline(time.Time{})
		}
	case err != nil:
		// Kept when it expired: net/http drains an unread body before it writes the
		// answer, which a stalled client must not hold up.
		b.done = true
	}
	return n, err
}
