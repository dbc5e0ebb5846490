package protocols

import "io"

// Splice is bytes with one value replaced, kept as three slices of which only the middle
// one is new: the bytes before the value, the new value, the bytes after it. It is the one
// way the gateway changes a body (the model in a request, in a JSON answer, in a stream
// event), so a large body is never copied to change one value.
type Splice struct {
	head, value, tail []byte
}

// SpliceAt is b with b[start:end] replaced by value. It copies nothing.
func SpliceAt(b []byte, start, end int, value []byte) Splice {
	return Splice{head: b[:start], value: value, tail: b[end:]}
}

// Len is the length in bytes.
func (s Splice) Len() int { return len(s.head) + len(s.value) + len(s.tail) }

// AppendTo appends the spliced bytes to dst.
func (s Splice) AppendTo(dst []byte) []byte {
	return append(append(append(dst, s.head...), s.value...), s.tail...)
}

// Bytes joins the parts into one new slice (for tests and small bodies).
func (s Splice) Bytes() []byte { return s.AppendTo(make([]byte, 0, s.Len())) }

// WriteTo writes the three parts in turn.
func (s Splice) WriteTo(w io.Writer) (int64, error) {
	return (&partsReader{parts: [3][]byte{s.head, s.value, s.tail}}).WriteTo(w)
}

// Reader reads the bytes from their start; each attempt on a candidate takes a new one.
func (s Splice) Reader() io.Reader {
	return &partsReader{parts: [3][]byte{s.head, s.value, s.tail}}
}

type partsReader struct {
	parts [3][]byte
	i     int
}

func (r *partsReader) Read(p []byte) (int, error) {
	n := 0
	for r.i < len(r.parts) && n < len(p) {
		c := copy(p[n:], r.parts[r.i])
		r.parts[r.i] = r.parts[r.i][c:]
		n += c
		if len(r.parts[r.i]) == 0 {
			r.i++
		}
	}
	if n == 0 && r.i >= len(r.parts) {
		return 0, io.EOF
	}
	return n, nil
}

// WriteTo lets io.Copy hand the parts to the writer directly.
func (r *partsReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for ; r.i < len(r.parts); r.i++ {
		n, err := w.Write(r.parts[r.i])
		total += int64(n)
		if err != nil {
			r.parts[r.i] = r.parts[r.i][n:]
			return total, err
		}
	}
	return total, nil
}

// skip drops the first n bytes still to be read.
func (r *partsReader) skip(n int) {
	for ; r.i < len(r.parts) && n > 0; r.i++ {
		if n < len(r.parts[r.i]) {
			r.parts[r.i] = r.parts[r.i][n:]
			return
		}
		n -= len(r.parts[r.i])
	}
}

// empty reports whether nothing is left to read.
func (r *partsReader) empty() bool {
	for _, p := range r.parts[r.i:] {
		if len(p) > 0 {
			return false
		}
	}
	return true
}
