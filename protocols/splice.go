package protocols

import (
	"bytes"
	"io"
	"unicode/utf8"
	"unsafe"
)

// Splice is bytes with one or two values replaced, kept as the slices of the original
// between them and the new values: the bytes before the first value, the first new value,
// the bytes up to the second, the second new value, the bytes after it. It is the one way
// the gateway changes a body (the model in a request, in a JSON answer, in a stream
// event; the output cap a request is sent with), so a large body is never copied to
// change a value or two.
type Splice struct {
	parts [5][]byte
}

// SpliceAt is b with b[start:end] replaced by value. It copies nothing.
func SpliceAt(b []byte, start, end int, value []byte) Splice {
	return Splice{parts: [5][]byte{b[:start], value, b[end:]}}
}

// edit is one replacement: b[start:end] becomes value.
type edit struct {
	start, end int
	value      []byte
}

// spliceTwo is b with two edits that do not overlap made. It copies nothing.
func spliceTwo(b []byte, x, y edit) Splice {
	if y.start < x.start {
		x, y = y, x
	}
	return Splice{parts: [5][]byte{b[:x.start], x.value, b[x.end:y.start], y.value, b[y.end:]}}
}

// addMember is the edit that adds the member `"name":value` (value already JSON) to the
// object b holds, by replacing its closing brace; ok is false when b does not end with
// one. Whatever precedes the brace (space, the last member) stays as it is, so a body
// whose beginning was already sent is still its beginning.
func addMember(b []byte, name string, value []byte) (e edit, ok bool) {
	end := len(b)
	for end > 0 && isSpace(b[end-1]) {
		end--
	}
	if end == 0 || b[end-1] != '}' {
		return edit{}, false
	}
	brace := end - 1
	before := brace
	for before > 0 && isSpace(b[before-1]) {
		before--
	}
	var m []byte
	if before == 0 || b[before-1] != '{' { // not an empty object: a member precedes
		m = append(m, ',')
	}
	m = AppendJSONString(m, name)
	m = append(append(append(m, ':'), value...), '}')
	return edit{brace, brace + 1, m}, true
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// Len is the length in bytes.
func (s Splice) Len() int {
	n := 0
	for _, p := range s.parts {
		n += len(p)
	}
	return n
}

// AppendTo appends the spliced bytes to dst.
func (s Splice) AppendTo(dst []byte) []byte {
	for _, p := range s.parts {
		dst = append(dst, p...)
	}
	return dst
}

// Bytes joins the parts into one new slice (for tests and small bodies).
func (s Splice) Bytes() []byte { return s.AppendTo(make([]byte, 0, s.Len())) }

// WriteTo writes the parts in turn.
func (s Splice) WriteTo(w io.Writer) (int64, error) {
	return (&SpliceReader{parts: s.parts}).WriteTo(w)
}

// Reader reads the bytes from their start; each attempt on a candidate takes a new one.
func (s Splice) Reader() io.Reader {
	return &SpliceReader{parts: s.parts}
}

// ReaderAfter reads the bytes from the n-th on: the rest of a body whose first n bytes
// were sent already.
func (s Splice) ReaderAfter(n int) *SpliceReader {
	r := &SpliceReader{parts: s.parts}
	r.skip(n)
	return r
}

// SpliceReader reads a Splice's bytes in turn.
type SpliceReader struct {
	parts [5][]byte
	i     int
}

func (r *SpliceReader) Read(p []byte) (int, error) {
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
func (r *SpliceReader) WriteTo(w io.Writer) (int64, error) {
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
func (r *SpliceReader) skip(n int) {
	for ; r.i < len(r.parts) && n > 0; r.i++ {
		if n < len(r.parts[r.i]) {
			r.parts[r.i] = r.parts[r.i][n:]
			return
		}
		n -= len(r.parts[r.i])
	}
}

// Empty reports whether nothing is left to read.
func (r *SpliceReader) Empty() bool {
	for _, p := range r.parts[r.i:] {
		if len(p) > 0 {
			return false
		}
	}
	return true
}

// Begins reports whether the first n bytes of sent (three slices read in turn) are the
// first n bytes of s: whether a body forwarded while it arrived began as the whole
// body's upstream form does.
func (s Splice) Begins(sent [3][]byte, n int) bool {
	if n > s.Len() {
		return false
	}
	w := s.parts
	// The usual case: the client's own bytes around the same model, sent no further than
	// the whole body's next change (the output cap it may add in place of the brace).
	if sameBytes(sent[0], w[0]) && bytes.Equal(sent[1], w[1]) && sameStart(sent[2], w[2]) &&
		n <= len(w[0])+len(w[1])+len(w[2]) {
		return true
	}
	a := &SpliceReader{parts: [5][]byte{sent[0], sent[1], sent[2]}}
	b := &SpliceReader{parts: w}
	var x, y [4 << 10]byte
	for left := n; left > 0; {
		c := min(left, len(x))
		if _, err := io.ReadFull(a, x[:c]); err != nil {
			return false
		}
		if _, err := io.ReadFull(b, y[:c]); err != nil {
			return false
		}
		if !bytes.Equal(x[:c], y[:c]) {
			return false
		}
		left -= c
	}
	return true
}

// sameStart reports whether a and b begin at the same byte of memory.
func sameStart(a, b []byte) bool {
	return len(a) > 0 && len(b) > 0 && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// sameBytes reports whether a and b are the same bytes of memory.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}

// AppendJSONString appends s as a JSON string literal: the new value a splice puts
// where a model name was.
func AppendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, `\ufffd`...)
			} else {
				dst = append(dst, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
	}
	return append(dst, '"')
}
