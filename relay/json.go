package relay

import (
	"errors"
	"io"
	"time"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// relayJSON reads a whole JSON answer, then sends it with the service model spliced in.
// A body that breaks off before its end, or is not one JSON object, is a failed attempt
// the client never sees.
func (a *attempt) relayJSON() bool {
	req, out := a.req, a.out
	b, err := protocols.ReadBounded(&activityReader{r: a.resp.Body, clock: a.clock}, a.resp.ContentLength, MaxJSONBody)
	if err == nil && !protocols.ValidJSONObject(b) {
		err = errNotJSON
	}
	if err != nil {
		a.att.Reason = brokenOrTimedOut(a.clock, err)
		if errors.Is(err, errNotJSON) {
			a.att.Reason = routing.ReasonBadResponse
		}
		return false
	}
	a.clock.stop()
	b = a.scrub.ScrubSecrets(b)
	shape := protocols.ShapeOf(req.Op.Kind)
	model, obs := shape.Answer(b)
	if req.KeepFinishReason {
		obs.FinishReason = shape.FinishReason(b)
	}
	if a.ctx.Err() != nil {
		// The client left after the upstream had the whole body: the work is done and
		// billed upstream, so it is billed here too, and Serve reports the client gone.
		a.meterGone(obs)
		return false
	}
	out.Obs = obs
	answer := protocols.SpliceAt(b, len(b), len(b), nil)
	if model.Exists() && model.Index > 0 {
		answer = protocols.SpliceAt(b, model.Index, model.Index+len(model.Raw), protocols.AppendJSONString(nil, req.ServiceModel))
	}
	a.commit(answer.Len())
	out.TimeToFirstByte = time.Since(a.start)
	out.finalize(req, a.up)
	_, _ = answer.WriteTo(a.w)
	return true
}

var errNotJSON = errors.New("upstream answer is not one JSON object")

// activityReader restarts the idle limit whenever data arrives.
type activityReader struct {
	r     io.Reader
	clock *attemptClock
}

func (a *activityReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.clock.activity()
	}
	return n, err
}
