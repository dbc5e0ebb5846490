package protocols

import (
	"errors"
	"io"
)

// ErrTooLarge is ReadBounded's error for a body longer than its limit.
var ErrTooLarge = errors.New("body exceeds the gateway's limit")

// FirstBodyBuffer is the most memory a body is given before its bytes arrive: a declared
// Content-Length is a promise, and memory is committed only as it is kept.
const FirstBodyBuffer = 64 << 10

// unknownLengthFirst is the first buffer of a body that declares no length.
const unknownLengthFirst = 16 << 10

// ReadBounded reads a body, a client's or an upstream's, into one buffer that starts
// small (Content-Length sizes it only up to FirstBodyBuffer) and doubles as bytes arrive.
// A body longer than limit is ErrTooLarge: at most limit+1 bytes are ever read, whatever
// the sender claims or sends.
func ReadBounded(r io.Reader, contentLength int64, limit int) ([]byte, error) {
	b, _, err := readBounded(r, contentLength, limit, noCeiling{})
	return b, err
}

// ErrNoBodyMemory is ReadBoundedWithin's error for a body the ceiling had no room for.
var ErrNoBodyMemory = errors.New("the gateway's body memory is full")

// Ceiling is what a body's buffers are taken from before they are allocated, and given
// back to once nothing reads them (the relay's BodyMemory).
type Ceiling interface {
	// Take takes n bytes, perhaps after a wait; false when there is no room.
	Take(n int64) bool
	// Give gives back n bytes taken before.
	Give(n int64)
}

// noCeiling is no ceiling at all.
type noCeiling struct{}

func (noCeiling) Take(int64) bool { return true }
func (noCeiling) Give(int64)      {}

// ReadBoundedWithin is ReadBounded for a client's body, whose buffers are taken from mem
// before they are allocated. held is what was taken, for the caller to Give back once
// nothing reads the body; on an error nothing is held (and no body is given). A body mem
// has no room for is ErrNoBodyMemory.
func ReadBoundedWithin(r io.Reader, contentLength int64, limit int, mem Ceiling) (body []byte, held int64, err error) {
	b, held, err := readBounded(r, contentLength, limit, mem)
	if err != nil {
		mem.Give(held)
		return nil, 0, err
	}
	return b, held, nil
}

func readBounded(r io.Reader, contentLength int64, limit int, mem Ceiling) ([]byte, int64, error) {
	end := limit + 1 // the declared length and one byte more, so the last Read sees EOF
	first := unknownLengthFirst
	if contentLength >= 0 && contentLength <= int64(limit) {
		end = int(contentLength) + 1
		first = min(end, FirstBodyBuffer)
	}
	first = min(first, limit+1)
	if !mem.Take(int64(first)) {
		return nil, 0, ErrNoBodyMemory
	}
	held := int64(first)
	b := make([]byte, 0, first)
	for {
		if len(b) == cap(b) {
			size := grownSize(cap(b), end, limit+1)
			if !mem.Take(int64(size)) {
				return nil, held, ErrNoBodyMemory
			}
			grown := make([]byte, len(b), size)
			copy(grown, b)
			mem.Give(held)
			b, held = grown, int64(size)
		}
		n, err := r.Read(b[len(b):min(cap(b), limit+1)])
		b = b[:len(b)+n]
		if len(b) > limit {
			return b[:limit], held, ErrTooLarge
		}
		if err == io.EOF {
			return b, held, nil
		}
		if err != nil {
			return b, held, err
		}
	}
}

// grownSize is the buffer a body outgrows size for: twice as large, but no larger than
// end (its declared length and a byte) while it is short of it, nor than most.
func grownSize(size, end, most int) int {
	next := 2 * size
	if size < end {
		next = min(next, end)
	}
	return min(next, most)
}
