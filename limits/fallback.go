package limits

import (
	"context"
	"time"
)

// call runs one backend call, bounded by the Timeout when the backend is Redis.
func (l *Limiter) call(ctx context.Context, c Counters, f func(context.Context) (outcome, error)) (outcome, error) {
	if c != Counters(l.redis) || l.redis == nil {
		return f(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	out, err := f(ctx)
	if err != nil {
		return out, &backendError{err}
	}
	return out, nil
}

// sharedUsable reports whether this request should use the shared counters: yes while
// they answer; while they do not, one request every RetryEvery tries them again (after
// resynchronising what was counted elsewhere meanwhile).
func (l *Limiter) sharedUsable(ctx context.Context) bool {
	if !l.down.Load() {
		return true
	}
	since := time.Since(l.base)
	if since-time.Duration(l.lastTry.Load()) < l.retryEvery || !l.probing.CompareAndSwap(false, true) {
		return false
	}
	defer l.probing.Store(false)
	l.lastTry.Store(int64(time.Since(l.base)))
	pctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	if err := l.redis.resync(pctx); err != nil {
		return false
	}
	l.markUp()
	return true
}

func (l *Limiter) markDown(err error) {
	err = withoutAddress(err)
	l.downMu.Lock()
	defer l.downMu.Unlock()
	l.lastTry.Store(int64(time.Since(l.base)))
	if l.down.Swap(true) {
		return
	}
	if l.onDown != nil {
		l.onDown(err)
	}
}

func (l *Limiter) markUp() {
	l.downMu.Lock()
	defer l.downMu.Unlock()
	if !l.down.Swap(false) {
		return
	}
	// What the fallback counted is stale by the next outage: seed again then.
	l.fallback.unseed()
	if l.onDown != nil {
		l.onDown(nil)
	}
}
