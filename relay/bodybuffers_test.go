package relay

import (
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/protocols"
)

func TestBodyBuffersAreAtMostAQuarterLargerThanAsked(t *testing.T) {
	lastSize, lastClass := 0, -1
	for n := 1; n <= 1<<maxPooledShift+1; n += 1 + n/97 {
		class, size, ok := bodyClass(n)
		if n > 1<<maxPooledShift {
			assert.False(t, ok, "a body of %d bytes is pooled", n)
			continue
		}
		require.True(t, ok, "%d", n)
		require.GreaterOrEqual(t, size, n)
		require.Less(t, class, bodyClasses)
		if n > 1<<minPooledShift {
			require.LessOrEqual(t, size, n+n/4, "%d bytes get %d", n, size)
		}
		// One size per class, and classes in the order of their sizes.
		if size == lastSize {
			require.Equal(t, lastClass, class, "%d", n)
		} else {
			require.Greater(t, size, lastSize)
			require.Greater(t, class, lastClass, "%d", n)
		}
		lastSize, lastClass = size, class
		// A buffer of a class's size goes back to the same class.
		again, againSize, _ := bodyClass(size)
		require.Equal(t, class, again)
		require.Equal(t, size, againSize)
	}
}

// recycleWatch records the buffers bodies give back, and fills each with 'X' as the
// next request would overwrite it, so a read that was still under way would see it.
type recycleWatch struct {
	mu    sync.Mutex
	count int
}

// of makes a's buffers come back through w; it returns a.
func (w *recycleWatch) of(a *ArrivingBody) *ArrivingBody {
	a.recycle = func(bufs ...*[]byte) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.count++ // one body's buffers come back together
		for _, b := range bufs {
			full := (*b)[:cap(*b)]
			for i := range full {
				full[i] = 'X'
			}
		}
	}
	return a
}

// recycled is how many bodies have given their buffers back.
func (w *recycleWatch) recycled() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.count
}

// arrivedWhole reads body as a large body is read: model first, then the rest beside
// its forwarding; it returns once the body has been judged and the reading goroutine has
// let go of it, so that the test's own Release or Close is the last one: what it gives
// back, it gives back before it returns. model is what ReadUntilModel gave, a view into
// the buffer as long as the buffer lasts.
func arrivedWhole(t *testing.T, body []byte, check func(*protocols.ParsedRequest) *protocols.APIError) (a *ArrivingBody, model string, _ *protocols.ParsedRequest, _ *protocols.APIError) {
	t.Helper()
	a = NewArrivingBody(protocols.Operation{Kind: protocols.KindResponses, Family: protocols.FamilyA}, len(body))
	src := trickle(body, uint64(len(body)), 0, nil, nil)
	model, ok := a.ReadUntilModel(src)
	require.True(t, ok)
	a.FinishWhileForwarding(src, check)
	p, err := a.Wait()
	readingOver(t, a)
	return a, model, p, err
}

// readingOver waits until the goroutine reading a's body has let go of it: Wait returns
// a moment before it does. Only the handler holds the body then, and what it gave out.
func readingOver(t *testing.T, a *ArrivingBody) {
	t.Helper()
	require.Eventually(t, func() bool { return a.holders.Load() == 1 }, 5*time.Second, 100*time.Microsecond,
		"the reading goroutine still holds the body")
}

func TestABodyBufferServesAgainOnlyOnceNothingReadsIt(t *testing.T) {
	var w recycleWatch
	body := []byte(`{"model":"m","input":"` + strings.Repeat("y", 200<<10) + `"}`)
	want, _ := prepareRequestBody(protocols.Operation{Kind: protocols.KindResponses, Family: protocols.FamilyA}, body, "up")

	t.Run("held by each upstream body until it is closed", func(t *testing.T) {
		before := w.recycled()
		a, _, parsed, err := arrivedWhole(t, body, nil)
		w.of(a)
		require.Nil(t, err)
		f := a.Forward("up", 0)
		whole, _ := parsed.Upstream(a.op, "up", 0)
		h := a.Hold(whole.Reader())
		a.Release(true)
		assert.Equal(t, before, w.recycled(), "given back while two upstream bodies could still read it")

		// The transport reads after the handler has let go, as it may after RoundTrip.
		got, readErr := io.ReadAll(f)
		require.NoError(t, readErr)
		assert.Equal(t, string(want), string(got))
		require.NoError(t, f.Close())
		require.NoError(t, f.Close())
		assert.Equal(t, before, w.recycled())
		got, readErr = io.ReadAll(h)
		require.NoError(t, readErr)
		assert.Equal(t, string(want), string(got))
		require.NoError(t, h.Close())
		assert.Equal(t, before+1, w.recycled(), "the last reader let go: the buffer serves again")
		require.NoError(t, h.Close())
		assert.Equal(t, before+1, w.recycled(), "given back twice")
		_, readErr = h.Read(make([]byte, 10))
		assert.Error(t, readErr, "a closed body still reads")
	})

	t.Run("not when the handler may still quote it", func(t *testing.T) {
		before := w.recycled()
		a, model, parsed, err := arrivedWhole(t, body, nil)
		w.of(a)
		require.Nil(t, err)
		whole, _ := parsed.Upstream(a.op, "up", 0)
		h := a.Hold(whole.Reader())
		a.Release(false)
		require.NoError(t, h.Close())
		assert.Equal(t, before, w.recycled(), "given back while the handler keeps a view into it")
		// The model read before the rest of the body is a view into the buffer: a log
		// line or an error written after the handler returned still says what the
		// client sent, not what the next request did (the recycling above writes 'X').
		assert.Equal(t, "m", model)
	})

	t.Run("not when the body was refused", func(t *testing.T) {
		before := w.recycled()
		// A field named as one the gateway reads but for its case is refused, and the
		// error names it by a view into the body.
		refused := []byte(`{"model":"m","input":"` + strings.Repeat("y", 200<<10) + `","Stream":true}`)
		a, _, _, err := arrivedWhole(t, refused, nil)
		w.of(a)
		require.NotNil(t, err)
		f := a.Forward("up", 0)
		a.Release(true)
		require.NoError(t, f.Close())
		assert.Equal(t, before, w.recycled(), "a refused body's error may still point into its buffer")
		assert.Equal(t, "Stream", err.Param, "the error, written after the handler returned, names the field the client sent")
	})

	t.Run("not when the checks after the scan refused it", func(t *testing.T) {
		before := w.recycled()
		a, _, _, err := arrivedWhole(t, body, func(*protocols.ParsedRequest) *protocols.APIError {
			return protocols.ErrBodyUnreadable(protocols.FamilyA)
		})
		w.of(a)
		require.NotNil(t, err)
		f := a.Forward("up", 0)
		a.Release(true)
		require.NoError(t, f.Close())
		assert.Equal(t, before, w.recycled(), "a refused body's buffer served another request")
	})
}

func TestClosingAnUpstreamBodyWaitsForTheReadUnderWay(t *testing.T) {
	var w recycleWatch
	body := []byte(`{"model":"m","input":"` + strings.Repeat("z", 300<<10) + `"}`)
	want, _ := prepareRequestBody(protocols.Operation{Kind: protocols.KindResponses, Family: protocols.FamilyA}, body, "up")
	for round := range 50 {
		before := w.recycled()
		a, _, parsed, err := arrivedWhole(t, body, nil)
		w.of(a)
		require.Nil(t, err)
		var bodies []io.ReadCloser
		if round%2 == 0 {
			bodies = append(bodies, a.Forward("up", 0))
		} else {
			whole, _ := parsed.Upstream(a.op, "up", 0)
			bodies = append(bodies, a.Hold(whole.Reader()))
		}
		a.Release(true)
		// One goroutine reads while another closes, as an HTTP/2 transport does when the
		// answer comes before the body is sent: what was read is the body, never the
		// bytes of the request the buffer serves next.
		var got []byte
		started, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			p := make([]byte, 1000)
			for i := 0; ; i++ {
				n, err := bodies[0].Read(p)
				got = append(got, p[:n]...)
				if i == 0 {
					close(started)
				}
				if err != nil {
					return
				}
			}
		}()
		<-started
		time.Sleep(time.Duration(round%5) * 20 * time.Microsecond)
		require.NoError(t, bodies[0].Close())
		<-done
		require.LessOrEqual(t, len(got), len(want))
		assert.Equal(t, string(want[:len(got)]), string(got), "round %d read another request's bytes", round)
		assert.Eventually(t, func() bool { return w.recycled() == before+1 }, time.Second, time.Millisecond)
	}
}
