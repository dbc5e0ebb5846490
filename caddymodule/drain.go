package caddymodule

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/switchyard-gw/switchyard/relay"
)

func init() {
	caddy.RegisterModule(Ready{})
}

// drainRecordWait bounds how long an exiting gateway waits, once its grace period is over,
// for the answers it ended to write their error event and their usage record: a client
// that reads nothing could otherwise hold the exit forever.
const drainRecordWait = 5 * time.Second

// inFlight is one configuration's requests in the relay, and the signal that ends those
// still running once the stop's grace period is over. Caddy lets a stopped server's
// requests run on past the grace period (it closes no connection, and on exit the process
// simply ends), so without it a stream would be cut without its error event and without
// its usage record.
type inFlight struct {
	// drain ends the requests still running when the grace period is over.
	drain *relay.Drain

	// stopBegun is set once the app's Stop has begun (readiness fails from then on).
	stopBegun atomic.Bool
	running   atomic.Int64
	stopping  atomic.Bool
	idleOnce  sync.Once
	idle      chan struct{} // closed once stopping with nothing running
}

func newInFlight() *inFlight {
	return &inFlight{idle: make(chan struct{}), drain: relay.NewDrain()}
}

// enter counts a request in; leave counts it out once its answer and its usage record
// are done.
func (f *inFlight) enter() { f.running.Add(1) }

func (f *inFlight) leave() {
	if f.running.Add(-1) == 0 && f.stopping.Load() {
		f.idleOnce.Do(func() { close(f.idle) })
	}
}

// stop marks the configuration stopped; the channel it returns is closed once nothing
// of it is running.
func (f *inFlight) stop() <-chan struct{} {
	f.stopping.Store(true)
	if f.running.Load() == 0 {
		f.idleOnce.Do(func() { close(f.idle) })
	}
	return f.idle
}

// settle lets go of release (the ledger, the limiter, the store: what requests in flight
// write to) once the configuration's requests are over. On exit Caddy has already waited
// out the grace period, so what still runs is ended now, and waited for within
// drainRecordWait. On a reload the old requests run on while the grace period (grace;
// zero is none: they run to their end) lasts, and are then ended.
func (f *inFlight) settle(exiting bool, grace time.Duration, logger *zap.Logger, release func()) {
	idle := f.stop()
	select {
	case <-idle:
		release()
		return
	default:
	}
	if exiting {
		f.drain.End()
		f.await(idle, logger)
		release()
		return
	}
	go func() {
		var graceOver <-chan time.Time
		if grace > 0 {
			t := time.NewTimer(grace)
			defer t.Stop()
			graceOver = t.C
		}
		select {
		case <-idle:
		case <-graceOver:
			f.drain.End()
			f.await(idle, logger)
		}
		release()
	}()
}

// await waits, within drainRecordWait, for the requests that were just ended.
func (f *inFlight) await(idle <-chan struct{}, logger *zap.Logger) {
	t := time.NewTimer(drainRecordWait)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
		if logger != nil {
			logger.Warn("requests still running after the grace period ended them; not waiting longer",
				zap.Int64("requests", f.running.Load()))
		}
	}
}

// Ready is the `switchyard_ready` handler: a readiness endpoint for a load balancer or
// Kubernetes. It answers 200 {"status":"ready"} while the gateway takes requests, and
// 503 once it should be sent none: {"status":"stopping"} from the moment a stop begins
// (Caddy's shutdown_delay keeps the listener open that long, so that the balancer sees
// this before connections are refused), {"status":"starting"} until the usage ledger is
// open. It takes no options and needs no key.
type Ready struct {
	app *App
}

// CaddyModule returns the Caddy module information.
func (Ready) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.switchyard_ready", New: func() caddy.Module { return new(Ready) }}
}

// Provision implements caddy.Provisioner.
func (h *Ready) Provision(ctx caddy.Context) (err error) {
	h.app, err = loadApp(ctx)
	return err
}

func (h *Ready) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	status, code := "ready", http.StatusOK
	var untilShutdown time.Duration
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		// Set by Caddy's http app when a stop that closes this listener begins.
		if down, _ := repl.Get("http.shutting_down"); down == true {
			status, code = "stopping", http.StatusServiceUnavailable
			if v, _ := repl.Get("http.time_until_shutdown"); v != nil {
				untilShutdown, _ = v.(time.Duration)
			}
		}
	}
	if code == http.StatusOK {
		switch {
		case h.app.inFlight.stopBegun.Load():
			status, code = "stopping", http.StatusServiceUnavailable
		case !h.app.ledgerOpen():
			status, code = "starting", http.StatusServiceUnavailable
		}
	}
	body := `{"status":"` + status + `"`
	if untilShutdown > 0 {
		body += `,"shutdown_in_ms":` + strconv.FormatInt(untilShutdown.Milliseconds(), 10)
	}
	body += "}\n"
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	if code != http.StatusOK {
		// The balancer's probe should not hold a connection the stop waits on.
		hdr.Set("Connection", "close")
	}
	w.WriteHeader(code)
	_, err := w.Write([]byte(body))
	return err
}

// UnmarshalCaddyfile reads `switchyard_ready` (no options).
func (h *Ready) UnmarshalCaddyfile(d *caddyfile.Dispenser) error { return takesNoOptions(d) }

// Interface guards
var (
	_ caddyfile.Unmarshaler       = (*Ready)(nil)
	_ caddyhttp.MiddlewareHandler = (*Ready)(nil)
	_ caddy.Provisioner           = (*Ready)(nil)
)
