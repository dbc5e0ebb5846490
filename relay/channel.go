package relay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/switchyard-gw/switchyard/channel"
	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// sendThroughChannel makes the attempt through the candidate's channel (Bedrock, Vertex,
// Azure). A channel rewrites the body and may sign it, so it is sent whole, once it has
// all arrived; the answer is turned back into the family's own form before it is read.
func (a *attempt) sendThroughChannel() bool {
	req, up, cand := a.req, a.up, a.up.Candidate
	if !up.channel.Offers(req.Op) {
		a.att.Reason = routing.ReasonNotOffered
		return false
	}
	parsed, bodyErr := req.Body.Wait()
	if bodyErr != nil {
		a.att.Reason, a.bodyErr = routing.ReasonClientBody, bodyErr
		return false
	}
	attemptCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.startAttemptClock(idleLimit(cand), cancel)
	defer a.stopAttemptClock()
	a.clock.limitFirstByte(firstByteLimit(cand, parsed.Streamed()), a.deadline)
	// The whole body is with the upstream once the request is written: a client that
	// leaves before its headers came cancels the call; after that the answer is read
	// on within the attempt's limits, to be billed.
	stopWatching := context.AfterFunc(a.ctx, func() {
		if a.clock.committed.Load() || a.clock.streaming.Load() {
			a.clock.clientGone()
			return
		}
		cancel()
	})
	defer stopWatching()

	upload := req.Body.Open(cand.UpstreamModel, req.DeclaredOutputCap)
	// The channel's copy of the body, and the edited copy it sends, are held beside the
	// body itself until the transport has sent them: they come out of the same ceiling.
	mem, charge := req.Body.memory(), 2*max(upload.Length(), 0)
	if !mem.Take(charge) {
		_ = upload.Close()
		a.att.Reason, a.bodyErr = routing.ReasonClientBody, mem.Refusal(req.Op.Family)
		return false
	}
	given := false
	giveBack := func() {
		if !given {
			given = true
			mem.Give(charge)
		}
	}
	defer giveBack()
	body, err := readUpload(upload)
	if err != nil {
		a.att.Reason = routing.ReasonClientBody
		a.bodyErr = protocols.ErrBodyRead(req.Op.Family, err)
		return false
	}
	header := protocols.UpstreamRequestHeader(req.Header, req.ClientKeys, cand.Protocol, "")
	upReq, err := up.channel.NewRequest(attemptCtx, req.Op, body, parsed.Streamed(), header)
	if err != nil {
		a.att.Reason = routing.ReasonConnect
		// Only a credential that cannot be had is the candidate's doing; a body the
		// channel cannot carry, or a client gone meanwhile, says nothing of it.
		a.att.Blameless = !errors.Is(err, channel.ErrCredential)
		return false
	}
	// The client's query (Claude Code's ?beta=true) is not the channel's: its URL is
	// the channel's own, and a signature covers it as built.
	a.delivered.Store(false)
	if upReq.Body != nil && upReq.Body != http.NoBody {
		var opened atomic.Pointer[deliveryWatch]
		length := upReq.ContentLength
		if length <= 0 {
			length = -1 // not known: delivered at its end
		}
		upReq.Body = watchDelivery(upReq.Body, length, &a.delivered, &opened)
	}
	resp, err := up.transport.RoundTrip(upReq)
	giveBack() // the body has gone: an answer, even a long stream, holds none of it
	if err != nil {
		a.att.Reason = classifyTransportError(err, a.clock)
		return false
	}
	return a.answer(resp, upload.usageInjected(), false)
}

// readUpload reads an attempt's whole upstream body into one buffer of its length.
func readUpload(u Upload) ([]byte, error) {
	defer u.Close()
	var buf bytes.Buffer
	if n := u.Length(); n > 0 {
		buf.Grow(int(n))
	}
	_, err := io.Copy(&buf, u)
	return buf.Bytes(), err
}
