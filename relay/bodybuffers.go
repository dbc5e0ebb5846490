package relay

import (
	"math/bits"
	"sync"
)

// Buffers for large request bodies are reused across requests. A new megabyte per
// request made the collector run every few requests and take about a quarter of the
// gateway's CPU on large bodies. Sizes come in four steps per doubling (a buffer is at
// most a quarter larger than asked for), from ForwardWhileArrivingMin up to
// maxPooledBody; larger bodies get a buffer of their own. sync.Pool lets idle buffers go
// after two collections, so a burst of large bodies does not stay in memory.
const (
	minPooledShift = 16 // 64 KiB, ForwardWhileArrivingMin
	maxPooledShift = 26 // 64 MiB
	stepsPerDouble = 4
	bodyClasses    = 1 + (maxPooledShift-minPooledShift)*stepsPerDouble
)

var bodyBuffers [bodyClasses]sync.Pool

// bodyClass is the pool for a buffer of at least n bytes, and the size its buffers have;
// ok is false for a size no pool holds.
func bodyClass(n int) (class, size int, ok bool) {
	if n <= 1<<minPooledShift {
		return 0, 1 << minPooledShift, true
	}
	k := bits.Len(uint(n-1)) - 1 // 1<<k < n <= 1<<(k+1)
	if k >= maxPooledShift {
		return 0, 0, false
	}
	step := 1 << k / stepsPerDouble
	q := (n - 1<<k + step - 1) / step // 1..stepsPerDouble
	return (k-minPooledShift)*stepsPerDouble + q, 1<<k + q*step, true
}

// takeBodyBuffer gives a buffer of n bytes whose contents are undefined: its user reads
// only what it wrote.
func takeBodyBuffer(n int) *[]byte {
	class, size, ok := bodyClass(n)
	if !ok {
		b := make([]byte, n)
		return &b
	}
	if b, _ := bodyBuffers[class].Get().(*[]byte); b != nil {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, size)
	return &b
}

// recycleBodyBuffers gives back a body's buffers (its last and those it outgrew) once
// nothing reads any of them.
func recycleBodyBuffers(bufs ...*[]byte) {
	for _, b := range bufs {
		if class, size, ok := bodyClass(cap(*b)); ok && size == cap(*b) {
			bodyBuffers[class].Put(b)
		}
	}
}

// bodyBufferSize is the capacity takeBodyBuffer(n) gives: the memory a buffer of n bytes
// really takes, which is what the ceiling is charged.
func bodyBufferSize(n int) int {
	if _, size, ok := bodyClass(n); ok {
		return size
	}
	return n
}
