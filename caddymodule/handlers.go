package caddymodule

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/switchyard-gw/switchyard/admission"
	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/metering"
	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/relay"
	"github.com/switchyard-gw/switchyard/routing"
)

func init() {
	caddy.RegisterModule(Auth{})
	caddy.RegisterModule(Model{})
	caddy.RegisterModule(Proxy{})
	caddy.RegisterModule(Errors{})
}

// RequestIDHeader carries the gateway's id of every request, on every response.
const RequestIDHeader = "X-Switchyard-Request-Id"

// Request variables shared by the handlers of one request.
const (
	varIdentity = "switchyard.identity"
	varRoute    = "switchyard.route"
	// varLog holds the request's *requestLog, its id included.
	varLog = "switchyard.log"
	// varEntered holds the request's first admission phase, for the second.
	varEntered = "switchyard.entered"
)

// route is what switchyard_model resolved, for switchyard_proxy.
type route struct {
	op    protocols.Operation
	model *routing.Model
	// parsed is the whole body once known; body is where it lies, still arriving (and
	// forwarded as it arrives) while parsed is nil.
	parsed *protocols.ParsedRequest
	body   relay.Body
}

func loadApp(ctx caddy.Context) (*App, error) {
	a, err := ctx.App("switchyard")
	if err != nil {
		return nil, fmt.Errorf("loading the switchyard app: %v", err)
	}
	return a.(*App), nil
}

// newRequestID is "sy_" and 24 hex digits: the time in milliseconds (12 digits), then 48
// random bits. Ids made later sort later, so each usage record lands at the right edge of
// the ledger's request-id index instead of on a random page of it; that kept the database
// writer's cost per record flat as the table grows (make bench, issue 14).
func newRequestID() string {
	const hex = "0123456789abcdef"
	var b [27]byte
	copy(b[:], "sy_")
	ms := uint64(time.Now().UnixMilli())
	for i := 14; i >= 3; i, ms = i-1, ms>>4 {
		b[i] = hex[ms&0xf]
	}
	for i, v := 15, rand.Uint64(); i < len(b); i, v = i+1, v>>4 {
		b[i] = hex[v&0xf]
	}
	return string(b[:])
}

func requestID(r *http.Request) string { return logOf(r).requestID }

// requestLog is what the gateway adds to the access log line of a request. It goes into
// Caddy's extra log fields once, as one inline field, and the handlers fill it in as the
// request goes: Caddy writes the line after they return. (Each field set on its own made
// Caddy clear its handler cache, an allocation per field, seven times a request.)
type requestLog struct {
	requestID, keyID, operation, model, candidate string
	attempts, retries                             int
	retryWait                                     time.Duration
	failovers                                     []string
	streamInterrupted                             bool
	// trace is the request's span; nil when the request is not traced.
	trace *requestTrace

	// clientKeys are the secrets the client sent in its key headers, which
	// switchyard_auth took off the request: the relay keeps a forwarded header holding
	// one from the upstream. Held here, in the request's one allocation, in keyWords
	// when there are few. Never logged (MarshalLogObject writes only the fields it
	// names) nor printed (String).
	clientKeys []string
	keyWords   [2]string
}

// String is what a placeholder naming the request variable prints: the request id,
// never the fields behind it.
func (l *requestLog) String() string { return l.requestID }

// MarshalLogObject writes the fields known so far.
func (l *requestLog) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	for _, f := range []struct{ key, value string }{
		{"switchyard_request_id", l.requestID}, {"switchyard_key_id", l.keyID},
		{"switchyard_operation", l.operation}, {"switchyard_model", l.model},
		{"switchyard_candidate", l.candidate},
	} {
		if f.value != "" {
			enc.AddString(f.key, f.value)
		}
	}
	if l.attempts > 0 {
		enc.AddInt("switchyard_attempts", l.attempts)
	}
	if l.retries > 0 {
		enc.AddInt("switchyard_retries", l.retries)
		enc.AddInt64("switchyard_retry_wait_ms", l.retryWait.Milliseconds())
	}
	if len(l.failovers) > 0 {
		_ = enc.AddArray("switchyard_failovers", zapcore.ArrayMarshalerFunc(func(a zapcore.ArrayEncoder) error {
			for _, f := range l.failovers {
				a.AppendString(f)
			}
			return nil
		}))
	}
	if l.streamInterrupted {
		enc.AddBool("switchyard_stream_interrupted", true)
	}
	return nil
}

// startLog puts the request's log fields into Caddy's access log.
func startLog(r *http.Request, requestID string) *requestLog {
	l := &requestLog{requestID: requestID}
	caddyhttp.SetVar(r.Context(), varLog, l)
	if extra, ok := r.Context().Value(caddyhttp.ExtraLogFieldsCtxKey).(*caddyhttp.ExtraLogFields); ok {
		extra.Add(zap.Inline(l))
	}
	return l
}

// logOf is the request's log fields; one that no longer reaches a log when
// switchyard_auth has not run.
func logOf(r *http.Request) *requestLog {
	if l, ok := caddyhttp.GetVar(r.Context(), varLog).(*requestLog); ok {
		return l
	}
	return &requestLog{}
}

// fail hands an APIError to Caddy's error routes, where switchyard_errors renders it.
func fail(e *protocols.APIError) error { return caddyhttp.Error(e.Status, e) }

// failBody is fail for the request's body refused. One refused before its end was read
// (too large, no memory for it, too slow: any but a 400, which comes of a body read
// whole) closes the connection after the answer: the rest is of no use, and net/http
// would otherwise read up to 256 KiB of it before it sends the answer, waiting on a
// client that stopped sending, or that asked for `100 Continue` and sends nothing.
func failBody(w http.ResponseWriter, e *protocols.APIError) error {
	if e.Status != http.StatusBadRequest {
		w.Header().Set("Connection", "close")
	}
	return fail(e)
}

// Auth is the `switchyard_auth` handler: it resolves the request's API key to an
// identity and lets nothing else run for a missing, wrong or revoked key.
type Auth struct {
	app *App
}

// CaddyModule returns the Caddy module information.
func (Auth) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.switchyard_auth", New: func() caddy.Module { return new(Auth) }}
}

// Provision implements caddy.Provisioner.
func (h *Auth) Provision(ctx caddy.Context) (err error) {
	h.app, err = loadApp(ctx)
	return err
}

func (h *Auth) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	id := newRequestID()
	w.Header().Set(RequestIDHeader, id)
	log := startLog(r, id)
	log.trace = startTrace(r.Context(), id)
	err := h.serve(w, r, next, log)
	log.trace.maskServerSpan(r, log.clientKeys, h.isKey)
	if err != nil {
		if apiErr := gatewayError(err); apiErr != nil {
			// The gateway writes its own error answers here rather than leave them to
			// handle_errors: Caddy's `tracing` handler ends the request's server span as
			// the handlers return, before any error route runs, and takes the span's
			// status from what was written by then. The relay returns an error only with
			// nothing written.
			apiErr.Write(w, id)
			log.trace.end(err)
			return nil
		}
	}
	// Ends once the handlers have returned: after a streamed answer's last byte.
	log.trace.end(err)
	return err
}

// gatewayError is the answer the gateway phrased for err, or nil when err is none of
// its own. errors.As needs its target on the heap: kept out of line, so that only a
// failed request pays for it.
//
//go:noinline
func gatewayError(err error) *protocols.APIError {
	var apiErr *protocols.APIError
	if !errors.As(err, &apiErr) {
		return nil
	}
	return apiErr
}

// isKey reports whether s is a key of this gateway.
func (h *Auth) isKey(s string) bool {
	_, known := h.app.verifier.Verify(s)
	return known
}

func (h *Auth) serve(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, log *requestLog) error {
	secret := auth.KeyFromRequest(r.Header)
	// The key has been read: its headers go, so no later handler sees them, and the
	// secrets in them stay with the request, so that no copy of the key leaves in a
	// header that is forwarded, nor reaches a span.
	log.clientKeys = auth.TakeKeyHeaders(r.Header, log.keyWords[:0])
	if auth.KeyInQuery(r.URL.RawQuery, h.isKey) {
		// Never forwarded, and refused so that the client learns to stop putting it in
		// URLs, which proxies and logs keep.
		return fail(protocols.ErrKeyInQuery(protocols.FamilyOfPath(r.URL.Path)))
	}
	identity, ok := h.app.verifier.Verify(secret)
	if !ok {
		return fail(protocols.ErrInvalidKey())
	}
	caddyhttp.SetVar(r.Context(), varIdentity, identity)
	log.keyID = identity.KeyID
	log.trace.identity(identity)
	return next.ServeHTTP(w, r)
}

// Model is the `switchyard_model` handler: it classifies the operation, reads the body
// once, finds and checks the model, runs the family's validation, and answers
// GET /v1/models itself.
type Model struct {
	app *App
}

// CaddyModule returns the Caddy module information.
func (Model) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.switchyard_model", New: func() caddy.Module { return new(Model) }}
}

// Provision implements caddy.Provisioner.
func (h *Model) Provision(ctx caddy.Context) (err error) {
	h.app, err = loadApp(ctx)
	return err
}

func (h *Model) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	identity, _ := caddyhttp.GetVar(r.Context(), varIdentity).(*auth.Identity)
	if identity == nil {
		return fail(protocols.ErrMisconfigured(protocols.FamilyA, "switchyard_auth must run before switchyard_model"))
	}
	upgrade := strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
	op, known, methodOK := protocols.Classify(r.Method, r.URL.EscapedPath(), upgrade)
	if !known {
		return fail(protocols.ErrUnknownPath(protocols.FamilyOfPath(r.URL.Path), r.Method, r.URL.Path))
	}
	if !methodOK {
		w.Header().Set("Allow", op.AllowedMethods())
		return fail(protocols.ErrMethodNotAllowed(op, r.Method, r.URL.Path))
	}
	log := logOf(r)
	log.operation = op.Kind.String()
	log.trace.operationKnown(op)

	switch op.Kind {
	case protocols.KindModels:
		return h.serveModels(w, identity, op)
	case protocols.KindStatefulResponses, protocols.KindResponsesWebSocket:
		return fail(protocols.ErrNotServed(op))
	}

	// Limits that do not depend on the body are taken before a byte of it is read, and
	// held until the request ends, whichever way.
	entered, apiErr := h.enter(w, r, identity, op)
	if apiErr != nil {
		return fail(apiErr)
	}
	defer entered.Release()
	caddyhttp.SetVar(r.Context(), varEntered, entered)

	if !protocols.RequestEncodingOK(r.Header) {
		return fail(protocols.ErrCompressedBody(op.Family))
	}
	limitBodyTime(w, r, h.app.bodyTimes())
	// A large body is forwarded while it arrives once its model is known and allowed;
	// any other is read to its end here, scanned on the way in.
	var forwarded *routing.Model
	body, apiErr := relay.ReadBody(op, http.MaxBytesReader(w, r.Body, h.app.MaxRequestBody), r.ContentLength,
		relay.BodyLimits{Max: h.app.MaxRequestBody, Memory: h.app.bodyMemory, Key: identity.KeyID},
		func(modelID string) (func(*protocols.ParsedRequest) *protocols.APIError, bool) {
			model, ok := h.app.catalog.Lookup(modelID)
			if !ok || !identity.MayCall(modelID) || !model.Supports(op.Family) {
				return nil, false
			}
			forwarded = model
			return func(parsed *protocols.ParsedRequest) *protocols.APIError {
				rt, _, apiErr := h.check(r.Header, identity, op, parsed)
				if apiErr == nil && rt.model != model {
					// The model was read from the same scan: not reachable.
					return protocols.ErrBodyUnreadable(op.Family)
				}
				return apiErr
			}, true
		})
	if apiErr != nil {
		return failBody(w, apiErr)
	}
	err := h.serveBody(w, r, next, identity, op, body, forwarded)
	// An error is written after this handler returns, and may quote the body (a model
	// that does not exist): only a request that ended well lets its buffer serve another.
	// Release waits for a body still arriving: r.Body is net/http's again once the
	// handler returns.
	body.Release(err == nil)
	return err
}

// serveBody checks a body read whole and hands the request on; a body still arriving
// (whose model, forwarded, was found and allowed) is handed on at once: the rest is read
// and checked beside the relay, which forwards what has passed so far and commits
// nothing before the whole body has passed.
func (h *Model) serveBody(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, identity *auth.Identity,
	op protocols.Operation, body relay.Body, forwarded *routing.Model) error {
	var rt *route
	if parsed := body.Parsed(); parsed != nil {
		checked, modelID, apiErr := h.check(r.Header, identity, op, parsed)
		if apiErr != nil {
			if modelID != "" {
				log := logOf(r)
				log.model = modelID // a request that fails never lends its body's buffer on
				log.trace.modelKnown(modelID)
			}
			return fail(apiErr)
		}
		rt = checked
		rt.body = body
	} else {
		rt = &route{op: op, model: forwarded, body: body}
	}
	log := logOf(r)
	log.model = rt.model.ID // not modelID: the body's buffer may serve another request
	log.trace.modelKnown(rt.model.ID)
	caddyhttp.SetVar(r.Context(), varRoute, rt)
	return next.ServeHTTP(w, r)
}

// check runs what a scanned body must pass: a model that exists, that the key may call,
// that is offered in the request's family, and the shape's own checks. modelID is set
// once the model was found.
func (h *Model) check(header http.Header, identity *auth.Identity, op protocols.Operation, parsed *protocols.ParsedRequest) (rt *route, modelID string, _ *protocols.APIError) {
	modelID, apiErr := parsed.Model(op.Family)
	if apiErr != nil {
		return nil, "", apiErr
	}
	model, ok := h.app.catalog.Lookup(modelID)
	if !ok || !identity.MayCall(modelID) {
		return nil, "", protocols.ErrModelNotFound(op.Family, modelID)
	}
	if !model.Supports(op.Family) {
		return nil, modelID, protocols.ErrProtocolNotOffered(op.Family, modelID)
	}
	if apiErr := parsed.Validate(op, header); apiErr != nil {
		return nil, modelID, apiErr
	}
	if apiErr := parsed.CheckOutputCap(op, modelID, model.MaxOutputTokens); apiErr != nil {
		return nil, modelID, apiErr
	}
	return &route{op: op, model: model, parsed: parsed}, modelID, nil
}

func (h *Model) serveModels(w http.ResponseWriter, identity *auth.Identity, op protocols.Operation) error {
	var body []byte
	if op.ModelID != "" {
		if body = h.app.models.one(identity, op.ModelID); body == nil {
			return fail(protocols.ErrModelNotListed(op.ModelID))
		}
	} else {
		body = h.app.models.list(identity)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(body)
	return err
}

// Proxy is the `switchyard_proxy` handler: it sends the resolved request to the model's
// candidates on the ingress protocol until one answers.
type Proxy struct {
	app    *App
	logger *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (Proxy) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.switchyard_proxy", New: func() caddy.Module { return new(Proxy) }}
}

// Provision implements caddy.Provisioner.
func (h *Proxy) Provision(ctx caddy.Context) (err error) {
	h.logger = ctx.Logger()
	h.app, err = loadApp(ctx)
	return err
}

func (h *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	rt, _ := caddyhttp.GetVar(r.Context(), varRoute).(*route)
	if rt == nil {
		return fail(protocols.ErrMisconfigured(protocols.FamilyOfPath(r.URL.Path), "switchyard_model must run before switchyard_proxy"))
	}
	identity, _ := caddyhttp.GetVar(r.Context(), varIdentity).(*auth.Identity)
	// Counted until its usage record is made: a stop waits for it, and ends it when the
	// grace period is over.
	h.app.inFlight.enter()
	defer h.app.inFlight.leave()
	if rt.parsed == nil && h.needsWholeBody(r, rt, identity) {
		parsed, bodyErr := rt.body.Wait()
		if bodyErr != nil {
			return failBody(w, bodyErr)
		}
		rt.parsed = parsed
	}
	requestID := requestID(r)
	req := &relay.Request{
		Op:           rt.op,
		ServiceModel: rt.model.ID,
		Body:         rt.body,
		Header:       r.Header,
		ClientKeys:   logOf(r).clientKeys,
		RawQuery:     r.URL.RawQuery,
		ID:           requestID,
		// What admission reserves for a request without a cap of its own.
		DeclaredOutputCap:    rt.model.MaxOutputTokens,
		Timeout:              rt.model.RequestTimeout,
		FailoverAfterTimeout: rt.model.FailoverAfterTimeout,
		KeepFinishReason:     logOf(r).trace != nil,
		Drain:                h.app.inFlight.drain,
	}
	// Admission: the request's worst case is reserved against every limit on its path
	// before any upstream is called; the answer's metered cost replaces it at the end,
	// and a request no answer came of costs nothing.
	adm := h.admit(w, r, rt, identity, requestID)
	if adm.Err != nil {
		return fail(adm.Err)
	}
	var outcome *relay.Outcome
	var apiErr *protocols.APIError
	started := time.Now()
	// Serve settles the reservation on every way out of the relay, a panic included.
	adm.Admitted.Serve(func(used *admission.Usage) {
		req.Finalize = func(out *relay.Outcome) {
			rt.parsed = req.Body.Parsed() // an arriving body has passed before any answer commits
			used.Tokens, used.CostMicros = h.meter(rt, identity, requestID, out)
		}
		outcome, apiErr = h.serve(w, r, rt, req)
	})
	loadMetrics().observe(rt.model.ID, rt.op.Family, outcome)

	log := logOf(r)
	log.attempts = len(outcome.Attempts)
	for _, a := range outcome.Attempts {
		if a.Retry > 0 {
			log.retries++
			log.retryWait += a.Wait
		}
		if a.Reason != routing.ReasonNone {
			log.failovers = append(log.failovers, a.Candidate+":"+string(a.Reason))
		}
	}
	if outcome.Served != nil {
		log.candidate = outcome.Served.Candidate.Name
	}
	log.streamInterrupted = outcome.StreamError != nil
	if log.trace != nil {
		// Admission let the request through to get here.
		log.trace.served(rt, outcome, h.app.upstreamsFor(rt.model, rt.op.Family))
	}
	if outcome.Served == nil && apiErr != nil {
		// No answer reached the client, so meter never ran: the request log still
		// shows the request and what its attempts met.
		h.app.journalUnserved(unserved{requestID: requestID, identity: identity, model: rt.model.ID, op: rt.op,
			status: apiErr.Status, outcome: metering.OutcomeFailed, attempts: outcome.Attempts, started: started})
	}
	if apiErr != nil {
		return fail(apiErr)
	}
	return nil
}

// serve sends an admitted request to its model's candidates, a conversation to the
// candidate that served it last.
func (h *Proxy) serve(w http.ResponseWriter, r *http.Request, rt *route, req *relay.Request) (*relay.Outcome, *protocols.APIError) {
	// A conversation goes back to the candidate that served it last, while it is
	// healthy: thinking signatures and prompt caches only hold there.
	var conversation string
	if aff := h.app.affinity; aff != nil {
		if id := protocols.ConversationID(rt.parsed, r.Header, h.app.affinityHeader()); id != "" {
			conversation = routing.ConversationKey(rt.model.ID, rt.op.Family, id)
			req.Preferred, _ = aff.Get(conversation, time.Now())
		}
	}
	outcome, apiErr := relay.Serve(r.Context(), w, req, h.app.upstreamsFor(rt.model, rt.op.Family))
	if outcome.Served == nil {
		// A body that failed is the client's answer, whatever the candidates did.
		if _, bodyErr := rt.body.Wait(); bodyErr != nil {
			apiErr = bodyErr
			if bodyErr.Status != http.StatusBadRequest {
				w.Header().Set("Connection", "close") // as failBody says
			}
		}
	}
	if conversation != "" && outcome.Served != nil && outcome.StreamError == nil && !outcome.TimedOut {
		h.app.affinity.Set(conversation, outcome.Served.Identity, time.Now())
	}
	return outcome, apiErr
}

// needsWholeBody reports whether the request must be read to its end before any
// candidate is called: a limit reserves its worst case, which needs the output cap
// wherever the body puts it; and among several candidates, conversation affinity without
// a session header takes its id from the body (prompt_cache_key).
func (h *Proxy) needsWholeBody(r *http.Request, rt *route, identity *auth.Identity) bool {
	if identity != nil && h.app.admission.Applies(whoOf(identity), rt.model.ID) {
		return true
	}
	return h.app.affinity != nil && len(h.app.upstreamsFor(rt.model, rt.op.Family)) > 1 &&
		protocols.ConversationID(nil, r.Header, h.app.affinityHeader()) == ""
}

// Errors is the `switchyard_errors` handler, for `handle_errors`: it writes the
// error in the native envelope of the request's protocol family. Internal error text is
// never shown; only errors the gateway phrased for clients are.
type Errors struct{}

// CaddyModule returns the Caddy module information.
func (Errors) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.switchyard_errors", New: func() caddy.Module { return new(Errors) }}
}

func (Errors) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	err, _ := r.Context().Value(caddyhttp.ErrorCtxKey).(error)
	var apiErr *protocols.APIError
	if !errors.As(err, &apiErr) {
		apiErr = protocols.ErrGeneric(protocols.FamilyOfPath(r.URL.Path), statusOf(err))
	}
	apiErr.Write(w, requestID(r))
	return nil
}

// UnmarshalCaddyfile reads `switchyard_auth` (no options).
func (h *Auth) UnmarshalCaddyfile(d *caddyfile.Dispenser) error { return takesNoOptions(d) }

// UnmarshalCaddyfile reads `switchyard_model` (no options).
func (h *Model) UnmarshalCaddyfile(d *caddyfile.Dispenser) error { return takesNoOptions(d) }

// UnmarshalCaddyfile reads `switchyard_proxy` (no options).
func (h *Proxy) UnmarshalCaddyfile(d *caddyfile.Dispenser) error { return takesNoOptions(d) }

// UnmarshalCaddyfile reads `switchyard_errors` (no options).
func (h *Errors) UnmarshalCaddyfile(d *caddyfile.Dispenser) error { return takesNoOptions(d) }

// Interface guards
var (
	_ caddyfile.Unmarshaler       = (*Auth)(nil)
	_ caddyfile.Unmarshaler       = (*Model)(nil)
	_ caddyfile.Unmarshaler       = (*Proxy)(nil)
	_ caddyfile.Unmarshaler       = (*Errors)(nil)
	_ caddyhttp.MiddlewareHandler = (*Auth)(nil)
	_ caddyhttp.MiddlewareHandler = (*Model)(nil)
	_ caddyhttp.MiddlewareHandler = (*Proxy)(nil)
	_ caddyhttp.MiddlewareHandler = (*Errors)(nil)
	_ caddy.Provisioner           = (*Auth)(nil)
	_ caddy.Provisioner           = (*Model)(nil)
	_ caddy.Provisioner           = (*Proxy)(nil)
)
