package caddymodule

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/relay"
	"github.com/switchyard-gw/switchyard/routing"
)

// tracerName is the instrumentation scope of the gateway's spans.
const tracerName = "github.com/switchyard-gw/switchyard"

// requestTrace is the gateway's span of one request, a child of the span Caddy's
// `tracing` handler put in the request's context. Without `tracing` there is no recording
// span, no requestTrace is made, and every method below is a nil check: the gateway adds
// no allocation to an untraced request.
//
// What never goes into a span: the key's secret, an upstream's host, credential or model
// name, and the text of prompts and answers (content capture is not built).
type requestTrace struct {
	tracer trace.Tracer
	span   trace.Span
	// server is Caddy's server span, the parent of span.
	server trace.Span

	// Known as the request goes, for the span's name and its end.
	operation, model string
	status           int
	refusedBy        string
	admitted         bool
	// streamCut is a committed answer that failed before its end: its status says 200,
	// the client got an error event.
	streamCut bool
}

// startTrace starts the request's span when the request is traced; nil when it is not.
func startTrace(ctx context.Context, requestID string) *requestTrace {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return nil
	}
	// The tracer comes from the caller's span, so the gateway installs no global
	// provider and follows Caddy's exporter and sampler.
	tracer := parent.TracerProvider().Tracer(tracerName)
	_, span := tracer.Start(ctx, "switchyard", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.String("switchyard.request_id", requestID)))
	return &requestTrace{tracer: tracer, span: span, server: parent}
}

// maskServerSpan keeps keys out of Caddy's server span, which records the request's
// path (url.path) and user agent (user_agent.original) as the request arrives, and may
// be named from the request by the `tracing` directive's span name: each that holds a
// key is written again masked, under the rules the access log masks a URI by
// (auth.MaskKeys), with clientKeys (the secrets the client sent in its key headers) and
// the gateway's own keys recognised as well. It runs before the server span ends, on
// traced requests only.
func (t *requestTrace) maskServerSpan(r *http.Request, clientKeys []string, isKey func(string) bool) {
	if t == nil {
		return
	}
	// The path as the server span saw it, before any rewrite.
	path := r.URL.Path
	if orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok && orig.URL != nil {
		path = orig.URL.Path
	}
	if masked := auth.MaskKeys(path, clientKeys, isKey); masked != path {
		t.server.SetAttributes(attribute.String("url.path", masked))
	}
	if ua := r.UserAgent(); ua != "" {
		if masked := auth.MaskKeys(ua, clientKeys, nil); masked != ua {
			t.server.SetAttributes(attribute.String("user_agent.original", masked))
		}
	}
	// The SDK's spans tell their name; a span that does not cannot be checked.
	if named, ok := t.server.(interface{ Name() string }); ok {
		if name := named.Name(); name != "" {
			if masked := auth.MaskKeys(name, clientKeys, isKey); masked != name {
				t.server.SetName(masked)
			}
		}
	}
}

// identity records whose request it is: ids only, never the key itself.
func (t *requestTrace) identity(id *auth.Identity) {
	if t == nil {
		return
	}
	t.span.SetAttributes(attribute.String("switchyard.key_id", id.KeyID))
	if id.ProjectID != "" {
		t.span.SetAttributes(attribute.String("switchyard.project_id", id.ProjectID))
	}
}

// genAIOperation is the GenAI conventions' operation name for a kind of request: "chat"
// for the generation shapes (the conventions file OpenAI's Responses API under chat as
// well); the token counts and compaction have no well-known name and keep the
// gateway's own.
func genAIOperation(k protocols.Kind) string {
	switch k {
	case protocols.KindChat, protocols.KindResponses, protocols.KindMessages:
		return "chat"
	}
	return k.String()
}

func (t *requestTrace) operationKnown(op protocols.Operation) {
	if t == nil {
		return
	}
	t.operation = genAIOperation(op.Kind)
	t.span.SetName(t.operation)
	t.span.SetAttributes(attribute.String("gen_ai.operation.name", t.operation),
		attribute.String("switchyard.operation", op.Kind.String()))
}

// modelKnown names the span "{operation} {model}" as the conventions ask, once the
// requested service model is known.
func (t *requestTrace) modelKnown(modelID string) {
	if t == nil || modelID == "" || modelID == t.model {
		return
	}
	t.model = modelID
	t.span.SetName(t.operation + " " + modelID)
	t.span.SetAttributes(attribute.String("gen_ai.request.model", modelID))
}

// refused records that a limit refused the request (the limit's label: key_requests,
// project_budget, …, or unavailable).
func (t *requestTrace) refused(limit string) {
	if t == nil || limit == "" {
		return
	}
	t.refusedBy = limit
}

// served records how the relay went, for a request admission let through: the GenAI
// usage and response attributes, the serving candidate, and one child span per upstream
// attempt, made after the fact with the attempts' own times. upstreams are the model's
// candidates, to name each attempt's channel and provider.
func (t *requestTrace) served(rt *route, out *relay.Outcome, upstreams []*relay.Upstream) {
	if t == nil || out == nil {
		return
	}
	t.admitted = true
	s := t.span
	if rt.parsed != nil {
		if max, ok := rt.parsed.OutputCap(rt.op); ok {
			s.SetAttributes(attribute.Int64("gen_ai.request.max_tokens", max))
		}
	}
	s.SetAttributes(attribute.Int("switchyard.attempts", len(out.Attempts)),
		attribute.Bool("switchyard.stream", out.Stream))
	if up := out.Served; up != nil {
		// The answer's model, as the client saw it: the gateway puts the service model in
		// every answer. The upstream's own model name is a secret and stays out.
		s.SetAttributes(attribute.String("gen_ai.response.model", rt.model.ID),
			attribute.String("gen_ai.provider.name", providerName(up)),
			attribute.String("switchyard.candidate", up.Candidate.Name),
			attribute.String("switchyard.channel", up.ChannelName()))
		if out.Stream && out.TimeToFirstByte > 0 {
			// The conventions define time to first token as a metric only
			// (gen_ai.server.time_to_first_token); on the span it is ours. A whole answer's
			// first byte is its last token: only a stream's counts.
			s.SetAttributes(attribute.Float64("switchyard.time_to_first_token_s", out.TimeToFirstByte.Seconds()))
		}
	}
	if u := out.Obs.Usage; out.Obs.UsageReported {
		s.SetAttributes(attribute.Int64("gen_ai.usage.input_tokens", u.Input),
			attribute.Int64("gen_ai.usage.output_tokens", u.Output))
		for _, n := range []struct {
			key string
			v   int64
		}{
			{"gen_ai.usage.cache_read.input_tokens", u.CachedInput},
			{"gen_ai.usage.cache_creation.input_tokens", u.CacheWrite},
			{"gen_ai.usage.reasoning.output_tokens", u.Reasoning},
		} {
			if n.v > 0 {
				s.SetAttributes(attribute.Int64(n.key, n.v))
			}
		}
	}
	if out.Obs.FinishReason != "" {
		s.SetAttributes(attribute.StringSlice("gen_ai.response.finish_reasons", []string{out.Obs.FinishReason}))
	}
	if out.StreamError != nil {
		s.SetAttributes(attribute.Bool("switchyard.stream_interrupted", true))
		t.streamCut = !out.ClientGone
	}
	if out.ClientGone {
		s.SetAttributes(attribute.Bool("switchyard.client_gone", true))
	}
	t.status = out.Status

	parent := trace.ContextWithSpan(context.Background(), s)
	for _, a := range out.Attempts {
		t.attemptSpan(parent, a, upstreamNamed(upstreams, a.Candidate))
	}
}

// attemptSpan is one try on one candidate, as it happened.
func (t *requestTrace) attemptSpan(parent context.Context, a relay.Attempt, up *relay.Upstream) {
	start := a.Start
	if start.IsZero() {
		start = time.Now().Add(-a.Duration)
	}
	attrs := []attribute.KeyValue{
		attribute.String("switchyard.candidate", a.Candidate),
		attribute.Int("switchyard.retry", a.Retry),
	}
	if up != nil {
		attrs = append(attrs, attribute.String("switchyard.channel", up.ChannelName()),
			attribute.String("gen_ai.provider.name", providerName(up)))
	}
	if a.Status != 0 {
		attrs = append(attrs, attribute.Int("http.response.status_code", a.Status))
	}
	if a.Wait > 0 {
		attrs = append(attrs, attribute.Float64("switchyard.retry_wait_s", a.Wait.Seconds()))
	}
	if a.Reason != routing.ReasonNone {
		attrs = append(attrs, attribute.String("switchyard.failover_reason", string(a.Reason)))
	}
	_, span := t.tracer.Start(parent, "upstream "+a.Candidate, trace.WithTimestamp(start),
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	if a.Reason != routing.ReasonNone {
		span.SetStatus(codes.Error, string(a.Reason))
	}
	span.End(trace.WithTimestamp(start.Add(a.Duration)))
}

// end closes the request's span with its verdict and, for a request that failed, the
// status it was answered with.
func (t *requestTrace) end(err error) {
	if t == nil {
		return
	}
	s := t.span
	status := t.status
	if err != nil {
		status = statusOf(err)
	}
	refusedBy := t.refusedBy
	if refusedBy == "" && err != nil && !t.admitted {
		// Answered by the gateway before admission: the key, or the request itself.
		refusedBy = "request"
		if status == 401 {
			refusedBy = "key"
		}
	}
	switch {
	case refusedBy != "":
		s.SetAttributes(attribute.String("switchyard.verdict", "refused"),
			attribute.String("switchyard.refused_by", refusedBy))
	case t.admitted:
		s.SetAttributes(attribute.String("switchyard.verdict", "admitted"))
	}
	if status != 0 {
		s.SetAttributes(attribute.Int("switchyard.status", status))
	}
	switch {
	case err != nil || status >= 400:
		// error.type is the status the client was given: low in cardinality, and free of
		// the error's text, which may quote what the client sent.
		s.SetAttributes(attribute.String("error.type", strconv.Itoa(status)))
		s.SetStatus(codes.Error, "")
	case t.streamCut:
		s.SetAttributes(attribute.String("error.type", "stream_interrupted"))
		s.SetStatus(codes.Error, "")
	}
	s.End()
}

// statusOf is the status an error from the handlers is answered with.
func statusOf(err error) int {
	var apiErr *protocols.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Status
	}
	var he caddyhttp.HandlerError
	if errors.As(err, &he) && he.StatusCode != 0 {
		return he.StatusCode
	}
	return 500
}

// providerName is the GenAI conventions' provider of an upstream: the protocol family
// spoken, or the cloud channel it is reached through.
func providerName(up *relay.Upstream) string {
	family := up.Candidate.Protocol
	switch up.ChannelName() {
	case "bedrock":
		return "aws.bedrock"
	case "vertex":
		return "gcp.vertex_ai"
	case "azure":
		if family == protocols.FamilyB {
			return "azure.ai.inference"
		}
		return "azure.ai.openai"
	}
	if family == protocols.FamilyB {
		return "anthropic"
	}
	return "openai"
}

func upstreamNamed(upstreams []*relay.Upstream, candidate string) *relay.Upstream {
	for _, up := range upstreams {
		if up.Candidate.Name == candidate {
			return up
		}
	}
	return nil
}
