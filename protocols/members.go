package protocols

import (
	"bytes"

	"github.com/tidwall/gjson"
)

// The upstream's events are read with a small lenient walker instead of gjson: a stream
// event is looked at once, for a handful of members, and the walker finds them in one
// pass over its bytes without building a result for every value it passes (the chat
// chunk rewrite was a quarter of the gateway's CPU per stream with gjson). It never
// recurses, so any nesting is read in constant stack. Request bodies are not read with
// it: scanObject checks those strictly.

// memberWalk walks the members of one JSON object.
type memberWalk struct {
	b []byte
	i int
}

// walkObject starts a walk over the object b holds (after optional space); ok is false
// when b does not start with an object.
func walkObject(b []byte) (memberWalk, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return memberWalk{}, false
	}
	return memberWalk{b: b, i: i + 1}, true
}

// next returns the next member: its key as written (without quotes, escapes left in) and
// where its value lies, b[start:end]. It stops (ok false) at the object's end or at
// anything that is not a member.
func (w *memberWalk) next() (key []byte, start, end int, ok bool) {
	key, start, ok = w.nextKey()
	if !ok {
		return nil, 0, 0, false
	}
	end = skipJSONValue(w.b, start)
	if end < 0 {
		return nil, 0, 0, false
	}
	w.i = end
	return key, start, end, true
}

// nextKey returns the next member's key and where its value starts, leaving the value for
// the caller to read: it must then call resume with the value's end.
func (w *memberWalk) nextKey() (key []byte, start int, ok bool) {
	b := w.b
	i := skipSpace(b, w.i)
	if i < len(b) && b[i] == ',' {
		i = skipSpace(b, i+1)
	}
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	keyEnd := skipJSONString(b, i)
	if keyEnd < 0 {
		return nil, 0, false
	}
	key = b[i+1 : keyEnd-1]
	i = skipSpace(b, keyEnd)
	if i >= len(b) || b[i] != ':' {
		return nil, 0, false
	}
	return key, skipSpace(b, i+1), true
}

// resume goes on after a value that ends at end; a negative end ends the walk.
func (w *memberWalk) resume(end int) {
	if end < 0 {
		end = len(w.b) // nothing more is read as a member
	}
	w.i = end
}

// objectEnd is the end of the object being walked, once next has returned its last member;
// -1 when it does not close there.
func (w *memberWalk) objectEnd() int {
	i := skipSpace(w.b, w.i)
	if i < len(w.b) && w.b[i] == '}' {
		return i + 1
	}
	return -1
}

// keepFirst reads the object's members up to its end and, for each of names, keeps the
// value of the first member so named in the slot of the same index, unless that slot
// holds a value already (a value is never empty, so nil is "not seen yet"). It returns
// where the object ends, -1 when it does not close there.
func (w *memberWalk) keepFirst(names []string, slots ...*[]byte) int {
	for {
		key, s, e, ok := w.next()
		if !ok {
			return w.objectEnd()
		}
		k := keyText(key)
		for i, name := range names {
			if k == name {
				if *slots[i] == nil {
					*slots[i] = w.b[s:e]
				}
				break
			}
		}
	}
}

// find returns the value of the first member named name.
func (w memberWalk) find(name string) (value []byte, start int, ok bool) {
	for {
		key, s, e, more := w.next()
		if !more {
			return nil, 0, false
		}
		if keyText(key) == name {
			return w.b[s:e], s, true
		}
	}
}

// keyText is a key as a client's parser reads it: itself (no copy) unless it has escapes.
func keyText(key []byte) string {
	if bytes.IndexByte(key, '\\') < 0 {
		return view(key)
	}
	return gjson.Parse(`"` + string(key) + `"`).Str
}

// skipJSONString returns the end of the string starting at b[i] ('"'), or -1. Most
// strings in an event are short, so the first bytes are looked at one by one; a long
// one is searched for its closing quote.
func skipJSONString(b []byte, i int) int {
	j := i + 1
	for n := min(len(b), j+32); j < n; j++ {
		switch b[j] {
		case '"':
			return j + 1
		case '\\':
			j++
		}
	}
	if j >= len(b) {
		return -1
	}
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		j += k
		escapes := 0
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			escapes++
		}
		if escapes%2 == 0 {
			return j + 1
		}
		j++
	}
}

// skipJSONValue returns the end of the value starting at b[i], or -1.
func skipJSONValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipJSONString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e := skipJSONString(b, j)
				if e < 0 {
					return -1
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if j == i {
				return -1
			}
			return j
		}
		j++
	}
	return j
}

// firstElement returns the first element of the array b holds.
func firstElement(b []byte) ([]byte, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, false
	}
	i = skipSpace(b, i+1)
	if i >= len(b) || b[i] == ']' {
		return nil, false
	}
	end := skipJSONValue(b, i)
	if end < 0 {
		return nil, false
	}
	return b[i:end], true
}

// member returns the value of the first member named name of the object b holds.
func member(b []byte, name string) ([]byte, bool) {
	w, ok := walkObject(b)
	if !ok {
		return nil, false
	}
	v, _, ok := w.find(name)
	return v, ok
}

// stringLen is the length of a JSON string value as written, quotes left out; 0 for
// anything else (the same measure textLen takes of a gjson result).
func stringLen(v []byte) int64 {
	if len(v) < 2 || v[0] != '"' {
		return 0
	}
	return int64(len(v) - 2)
}

// unquoted is a JSON string value as text, in its own memory (the value may lie in a
// buffer that is reused).
func unquoted(v []byte) string { return gjson.ParseBytes(v).String() }

// stringResult is a string value found at start of data, as the splice takes it.
func stringResult(data []byte, start, end int) gjson.Result {
	if start >= end || data[start] != '"' {
		return gjson.Result{}
	}
	return gjson.Result{Type: gjson.String, Raw: view(data[start:end]), Index: start}
}
