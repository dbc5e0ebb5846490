package limits

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// replyHolder is a TCP proxy in front of Redis that, while holding, forwards commands but
// drops Redis's answers: the commands run on the server, and the client sees a timeout.
type replyHolder struct {
	ln      net.Listener
	target  string
	holding atomic.Bool
	dropped chan struct{} // closed once an answer was dropped: a command ran unanswered
	once    sync.Once
}

func newReplyHolder(t *testing.T, target string) *replyHolder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &replyHolder{ln: ln, target: target, dropped: make(chan struct{})}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, client, server)
			mu.Unlock()
			wg.Go(func() {
				_, _ = io.Copy(server, client)
				_ = server.Close()
				_ = client.Close()
			})
			wg.Go(func() { p.answer(client, server) })
		}
	})
	return p
}

func (p *replyHolder) answer(client, server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if p.holding.Load() {
				p.once.Do(func() { close(p.dropped) })
			} else if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = client.Close()
			return
		}
	}
}

func (p *replyHolder) URL() string { return "redis://" + p.ln.Addr().String() + "/0" }

// A reservation whose Redis call timed out may still have been made on the server. It
// must be released once Redis answers again, not held for its 15-minute lease (while it
// is, it takes a concurrency slot and budget from every gateway).
func TestTimedOutReservationIsReleasedWhenRedisAnswersAgain(t *testing.T) {
	g := newGateways(t)
	clk := newClock(t0)
	proxy := newReplyHolder(t, g.srv.Addr())
	o, err := ParseRedisURL(proxy.URL())
	require.NoError(t, err)
	viaProxy := redis.NewClient(o)
	t.Cleanup(func() { _ = viaProxy.Close() })
	l := New(NewRedis(viaProxy, g.prefix), Options{Now: clk.Now, Timeout: time.Second, RetryEvery: 10 * time.Millisecond, Exact: true})
	other := g.limiter(t, Options{Now: clk.Now}) // another gateway, talking to Redis directly
	c := Check{Scope: keyScope("k1"), Policy: Policy{Concurrency: 1, Budget: budget(1000, PeriodMonth)}}

	admit(t, l, ask(0, 100, c)).Settle(context.Background(), 0, 100) // loads the scripts
	l.Flush()

	proxy.holding.Store(true)
	_, err = l.Reserve(context.Background(), ask(0, 600, c))
	require.ErrorIs(t, err, ErrUnavailable, "no answer in time: the budget cannot be counted")
	select {
	case <-proxy.dropped:
	case <-time.After(10 * time.Second):
		t.Fatal("Redis never answered the reservation")
	}
	// Redis did run it: the other gateway sees the slot and 600 held.
	st := status(t, other, c)
	require.Equal(t, int64(1), st.InFlight)
	require.Equal(t, int64(600), st.ReservedMicros)
	refuse(t, other, ask(0, 0, c))

	proxy.holding.Store(false)
	probe := Check{Scope: keyScope("probe"), Policy: Policy{RPM: 1_000_000}}
	require.Eventually(t, func() bool {
		_, err := l.Reserve(context.Background(), ask(0, 0, probe))
		return err == nil && !l.down.Load()
	}, 10*time.Second, 10*time.Millisecond)

	// Released on recovery, by request id; the clock has not moved, so no lease ran out.
	st = status(t, other, c)
	require.Equal(t, int64(0), st.InFlight, "the timed-out reservation's slot was released")
	require.Equal(t, int64(0), st.ReservedMicros, "the timed-out reservation's budget was released")
	require.Equal(t, int64(100), st.SpentMicros)
	admit(t, other, ask(0, 900, c))
}
