package protocols

import (
	"errors"
	"io"
)

// ErrTooLarge is ReadBounded's error for a body longer than its limit.
var ErrTooLarge = errors.New("body exceeds the gateway's limit")

// ReadBounded reads a body, a client's or an upstream's, into one buffer sized from
// Content-Length when the sender gave it. A body longer than limit is ErrTooLarge: at most
// limit+1 bytes are ever read, whatever the sender claims or sends.
func ReadBounded(r io.Reader, contentLength int64, limit int) ([]byte, error) {
	size := 16 << 10
	if contentLength > 0 && contentLength <= int64(limit) {
		size = int(contentLength) + 1 // +1 lets the final Read see EOF without growing
	}
	b := make([]byte, 0, min(size, limit+1))
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):min(cap(b), limit+1)])
		b = b[:len(b)+n]
		if len(b) > limit {
			return b[:limit], ErrTooLarge
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}
