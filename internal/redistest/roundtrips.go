package redistest

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// RoundTrips is a go-redis hook that counts what a client sends: each Process and each
// pipeline is one round trip, and Cmds counts the commands in them (a new connection's
// set-up left out). Add it with client.AddHook.
type RoundTrips struct{ Trips, Cmds atomic.Int64 }

func (h *RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "hello", "client", "auth", "select":
			// A connection's set-up, not the traffic being counted.
		default:
			h.Trips.Add(1)
			h.Cmds.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.Trips.Add(1)
		h.Cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
