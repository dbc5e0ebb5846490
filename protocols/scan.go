package protocols

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
)

// MaxNesting is how deep objects and arrays may nest in a body the gateway reads. Real
// requests stay far below it; a deeper one can only be an attempt to exhaust a parser.
const MaxNesting = 1000

// scanFault says why a body is not one JSON text the gateway accepts.
type scanFault struct {
	kind   faultKind
	offset int
}

type faultKind uint8

const (
	faultSyntax faultKind = iota + 1
	faultNotObject
	faultTooDeep
	faultUTF8
	faultTooManyKeys
)

// maxMembers bounds the top-level keys of a request body. Real requests have a few
// dozen; the bound keeps the duplicate check's memory a small multiple of the body.
const maxMembers = 4096

func (f *scanFault) Error() string {
	switch f.kind {
	case faultNotObject:
		return "the body is not a JSON object"
	case faultTooDeep:
		return fmt.Sprintf("the body nests objects and arrays deeper than %d levels", MaxNesting)
	case faultUTF8:
		return fmt.Sprintf("the body is not valid UTF-8 (at byte %d)", f.offset)
	case faultTooManyKeys:
		return fmt.Sprintf("the body has more than %d top-level fields", maxMembers)
	}
	return fmt.Sprintf("the body is not valid JSON (at byte %d)", f.offset)
}

// scanObject checks that b is exactly one JSON object, strictly as RFC 8259 has it (valid
// UTF-8, nesting within MaxNesting), and calls visit, when set, with each top-level
// member in order: its unescaped key (which may point into b) and where its value lies,
// b[start:end]. It never recurses and holds one byte per open level, so any input is
// read in bounded stack and memory; it allocates nothing for a body nested less than 16
// levels with unescaped keys.
func scanObject(b []byte, visit func(key string, start, end int)) *scanFault {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return &scanFault{kind: faultNotObject, offset: i}
	}
	var (
		openAt  [16]byte
		open    = openAt[:0] // '{' or '[' for every level not yet closed
		valueAt = -1         // start of the top-level member's value being read
		members int
		key     string
	)
	for {
		// Here a value starts at i.
		i = skipSpace(b, i)
		if i >= len(b) {
			return &scanFault{kind: faultSyntax, offset: i}
		}
		if len(open) == 1 && valueAt < 0 {
			valueAt = i
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			if len(open) == MaxNesting {
				return &scanFault{kind: faultTooDeep, offset: i}
			}
			open = append(open, c)
			i = skipSpace(b, i+1)
			if i < len(b) && (b[i] == '}' && c == '{' || b[i] == ']' && c == '[') {
				open = open[:len(open)-1]
				i++
				break
			}
			if c == '{' {
				var f *scanFault
				if i, f = scanKey(b, i, len(open) == 1, &key); f != nil {
					return f
				}
			}
			continue
		case c == '"':
			end, _, f := scanString(b, i)
			if f != nil {
				return f
			}
			i = end
		case c == '-' || c >= '0' && c <= '9':
			end := scanNumber(b, i)
			if end < 0 {
				return &scanFault{kind: faultSyntax, offset: i}
			}
			i = end
		case c == 't':
			i = scanLiteral(b, i, "true")
		case c == 'f':
			i = scanLiteral(b, i, "false")
		case c == 'n':
			i = scanLiteral(b, i, "null")
		default:
			return &scanFault{kind: faultSyntax, offset: i}
		}
		if i < 0 {
			return &scanFault{kind: faultSyntax, offset: -i - 1}
		}
		// A value ended at i: close containers, or move to the next element.
		for {
			if len(open) == 1 && valueAt >= 0 {
				if members == maxMembers {
					return &scanFault{kind: faultTooManyKeys, offset: valueAt}
				}
				members++
				if visit != nil {
					visit(key, valueAt, i)
				}
				valueAt = -1
			}
			i = skipSpace(b, i)
			if len(open) == 0 {
				if i != len(b) {
					return &scanFault{kind: faultSyntax, offset: i}
				}
				return nil
			}
			if i >= len(b) {
				return &scanFault{kind: faultSyntax, offset: i}
			}
			top := open[len(open)-1]
			if b[i] == '}' && top == '{' || b[i] == ']' && top == '[' {
				open = open[:len(open)-1]
				i++
				continue
			}
			if b[i] != ',' {
				return &scanFault{kind: faultSyntax, offset: i}
			}
			i++
			if top == '{' {
				var f *scanFault
				if i, f = scanKey(b, skipSpace(b, i), len(open) == 1, &key); f != nil {
					return f
				}
			}
			break
		}
	}
}

// scanKey reads `"key" :` at i and returns the position after the colon. Only when top
// is set (a key of the top-level object) is the key unescaped into *key; others are
// only checked.
func scanKey(b []byte, i int, top bool, key *string) (int, *scanFault) {
	if i >= len(b) || b[i] != '"' {
		return 0, &scanFault{kind: faultSyntax, offset: i}
	}
	end, escaped, f := scanString(b, i)
	if f != nil {
		return 0, f
	}
	if top {
		if escaped {
			*key = gjson.ParseBytes(b[i:end]).Str
		} else {
			raw := b[i+1 : end-1]
			*key = unsafe.String(unsafe.SliceData(raw), len(raw))
		}
	}
	end = skipSpace(b, end)
	if end >= len(b) || b[end] != ':' {
		return 0, &scanFault{kind: faultSyntax, offset: end}
	}
	return end + 1, nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanString checks the string that starts at b[i] (a quote) and returns the position
// after its closing quote and whether it holds escapes.
func scanString(b []byte, i int) (end int, escaped bool, f *scanFault) {
	for i++; i < len(b); {
		// Eight bytes at a time while none of them ends the string, escapes, is a control
		// character or starts a multi-byte character: most of a long body's text.
		for i+8 <= len(b) && plainASCII(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			return i + 1, escaped, nil
		case c == '\\':
			escaped = true
			if i+1 >= len(b) {
				return 0, false, &scanFault{kind: faultSyntax, offset: i}
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return 0, false, &scanFault{kind: faultSyntax, offset: i}
				}
				i += 6
			default:
				return 0, false, &scanFault{kind: faultSyntax, offset: i}
			}
		case c < 0x20:
			return 0, false, &scanFault{kind: faultSyntax, offset: i}
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size <= 1 {
				return 0, false, &scanFault{kind: faultUTF8, offset: i}
			}
			i += size
		}
	}
	return 0, false, &scanFault{kind: faultSyntax, offset: i}
}

// plainASCII reports whether the eight bytes of w are all printable ASCII other than '"'
// and '\\' (the usual word-at-a-time tests: each flags a byte exactly when one exists).
func plainASCII(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	hasZero := func(v uint64) uint64 { return (v - ones) & ^v & highs }
	control := (w - 0x20*ones) & ^w & highs
	return (w&highs | control | hasZero(w^('"'*ones)) | hasZero(w^('\\'*ones))) == 0
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// scanNumber returns the end of the number at i, or -1 when it is not a JSON number.
func scanNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// scanLiteral returns the end of word at i, or -(i+1) when the bytes differ.
func scanLiteral(b []byte, i int, word string) int {
	if len(b)-i < len(word) || string(b[i:i+len(word)]) != word {
		return -(i + 1)
	}
	return i + len(word)
}

// keySet finds a key that appears twice among an object's keys. Keys that differ only
// in case count as the same key: Go's encoding/json matches field names without regard
// to case, so an upstream written in Go reads "MODEL" as model. The first keys are
// compared pairwise in place; a set of folded keys takes over past them.
type keySet struct {
	few    [16]string
	n      int
	folded map[string]struct{}
}

// add records key and reports whether an equal key was already there.
func (s *keySet) add(key string) (dup bool) {
	if s.folded == nil {
		for _, k := range s.few[:s.n] {
			if strings.EqualFold(k, key) {
				return true
			}
		}
		if s.n < len(s.few) {
			s.few[s.n] = key
			s.n++
			return false
		}
		s.folded = make(map[string]struct{}, 2*len(s.few))
		for _, k := range s.few {
			s.folded[foldKey(k)] = struct{}{}
		}
	}
	f := foldKey(key)
	if _, ok := s.folded[f]; ok {
		return true
	}
	s.folded[f] = struct{}{}
	return false
}

// foldKey maps every key that strings.EqualFold holds equal to one string: each rune
// becomes the smallest rune of its simple case-folding orbit.
func foldKey(key string) string {
	var b strings.Builder
	b.Grow(len(key))
	for _, r := range key {
		smallest := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			smallest = min(smallest, f)
		}
		b.WriteRune(smallest)
	}
	return b.String()
}

// ValidJSONObject reports whether b is one JSON object, read with the same bounds as a
// request body: what an upstream's JSON answer must be before it is passed on.
func ValidJSONObject(b []byte) bool { return scanObject(b, nil) == nil }

// TextBytes counts the bytes of the JSON strings in a body that scanObject accepted,
// leaving out long strings without spaces (base64 images and files), whose token cost
// their size does not tell. It is what an input estimate is made from when an upstream
// never reported usage.
func TextBytes(body []byte) int64 {
	var total int64
	for i := 0; i < len(body); i++ {
		if body[i] != '"' {
			continue
		}
		end, _, f := scanString(body, i)
		if f != nil {
			return total
		}
		text := body[i+1 : end-1]
		if len(text) < 1024 || bytes.ContainsAny(text, " \n") {
			total += int64(len(text))
		}
		i = end - 1
	}
	return total
}
