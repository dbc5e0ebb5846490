package protocols

import (
	"encoding/binary"
	"fmt"
	"math/bits"
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
// b[start:end]. It never recurses and holds one bit per open level, so any input is read
// in bounded stack and memory; it allocates nothing for a body with unescaped keys.
func scanObject(b []byte, visit func(key string, start, end int)) *scanFault {
	var s objectScanner
	_, f := s.scan(b, true, visit)
	return f
}

// objectScanner is scanObject's reader, able to stop where the bytes so far end and to
// go on when more have arrived: a request body is checked as it comes in, and checking
// the whole of it at once is the same walk with nothing left to wait for. Its state is
// where it is in the grammar, so a body split anywhere is read exactly as the whole.
type objectScanner struct {
	state scanState
	// i is the next byte to read. Within a string it is the next byte of its content;
	// elsewhere it is where the next token starts (a token cut short is read again).
	i       int
	strAt   int  // the opening quote of the string being read
	escaped bool // whether that string holds escapes so far
	levels  openLevels
	valueAt int // start of the top-level member's value being read, or -1
	members int
	key     string
	// safe is how far the body is known to be a valid beginning of the object, short of
	// its closing brace.
	safe int
}

// scanMark is an objectScanner's place in little room, for one at most 64 levels deep:
// what a stream keeps between events to resume the next one's check (see dataIsObject).
type scanMark struct {
	i, strAt, valueAt, members, safe, depth int
	isObject                                uint64
	state                                   scanState
	escaped                                 bool
}

// mark returns the scanner's place; ok is false when it is too deep for a mark.
func (s *objectScanner) mark() (m scanMark, ok bool) {
	if s.levels.depth > 64 {
		return m, false
	}
	return scanMark{i: s.i, strAt: s.strAt, valueAt: s.valueAt, members: s.members, safe: s.safe,
		depth: s.levels.depth, isObject: s.levels.isObject[0], state: s.state, escaped: s.escaped}, true
}

// resume puts the scanner back at m. The key is not kept: a check without visit needs none.
func (s *objectScanner) resume(m scanMark) {
	*s = objectScanner{i: m.i, strAt: m.strAt, valueAt: m.valueAt, members: m.members, safe: m.safe,
		state: m.state, escaped: m.escaped}
	s.levels.depth, s.levels.isObject[0] = m.depth, m.isObject
}

type scanState uint8

const (
	stateStart     scanState = iota // the object's opening brace is next
	stateValue                      // a value starts here
	stateOpened                     // just after '{' or '['
	stateString                     // in a string value
	stateKey                        // a key is next
	stateKeyString                  // in a key
	stateColon                      // a key's colon is next
	stateAfter                      // a value just ended
	stateNext                       // after a value: ',' or a closing bracket is next
	stateEnd                        // the object closed: only space may follow
)

// scan reads b from where the last call stopped, calling visit as scanObject does; b must hold the bytes given before
// unchanged, and perhaps more. With final unset it stops where b ends and returns (false,
// nil), to be called again with more; a body that goes wrong stops it at the token that
// does, and the fault is reported once final is set (a cut may only look like a fault).
// With final set b is the whole body: the result is done, or the fault that scanObject on
// b would report.
func (s *objectScanner) scan(b []byte, final bool, visit func(key string, start, end int)) (done bool, f *scanFault) {
	if s.state == stateStart {
		s.valueAt = -1
	}
	i := s.i
	// stop keeps the place to go on from; at the end of a final body, a place that still
	// needs bytes is the fault f.
	// f is a value, kind 0 for none: a scan that stops where the bytes so far end, the
	// common case of a body still arriving, allocates no fault it does not report.
	stop := func(at int, f scanFault) (bool, *scanFault) {
		s.i = at
		if s.state != stateEnd && s.levels.depth > 0 {
			s.safe = at
		}
		// Too deep or too many keys stays so whatever follows: said at once.
		if f.kind != 0 && (final || f.kind == faultTooDeep || f.kind == faultTooManyKeys) {
			reported := new(scanFault) // here, not where f is passed, or every stop allocates
			*reported = f
			return false, reported
		}
		return false, nil
	}
	// The cases run in the order a member is read, and fall through to the next where
	// one state always leads to the next: each token is one turn of the loop, not two.
	for {
		switch s.state {
		case stateStart:
			i = skipSpace(b, i)
			if i >= len(b) || b[i] != '{' {
				if i >= len(b) && !final {
					return stop(i, scanFault{})
				}
				return stop(i, scanFault{kind: faultNotObject, offset: i})
			}
			s.state = stateValue
		case stateColon:
			i = skipSpace(b, i)
			if i >= len(b) || b[i] != ':' {
				return stop(i, scanFault{kind: faultSyntax, offset: i})
			}
			i++
			s.state = stateValue
			fallthrough
		case stateValue:
			i = skipSpace(b, i)
			if i >= len(b) {
				return stop(i, scanFault{kind: faultSyntax, offset: i})
			}
			if s.levels.depth == 1 && s.valueAt < 0 {
				s.valueAt = i
			}
			switch c := b[i]; {
			case c == '{' || c == '[':
				if s.levels.depth == MaxNesting {
					return stop(i, scanFault{kind: faultTooDeep, offset: i})
				}
				s.levels.push(c == '{')
				i++
				s.state = stateOpened
			case c == '"':
				// Most strings close within the bytes in hand: read at once.
				end, escaped, closed := stringRun(b, i+1)
				if !closed {
					s.strAt, s.escaped, s.state = i, escaped, stateString
					return stop(end, stringFaultAt(b, end))
				}
				i, s.state = end, stateAfter
			default:
				end := scanPrimitive(b, i)
				if end < 0 || end == len(b) && !final {
					// A number or literal cut where b ends is read again with more.
					return stop(i, scanFault{kind: faultSyntax, offset: i})
				}
				i, s.state = end, stateAfter
			}
		case stateOpened:
			i = skipSpace(b, i)
			if i >= len(b) {
				return stop(i, scanFault{kind: faultSyntax, offset: i})
			}
			switch {
			case s.levels.closedBy(b[i]):
				s.levels.depth--
				i++
				s.state = stateAfter
			case s.levels.inObject():
				s.state = stateKey
			default:
				s.state = stateValue
			}
		case stateKey:
			i = skipSpace(b, i)
			if i >= len(b) || b[i] != '"' {
				return stop(i, scanFault{kind: faultSyntax, offset: i})
			}
			s.strAt, s.escaped, s.state = i, false, stateKeyString
			i++
			fallthrough
		case stateString, stateKeyString:
			end, escaped, closed := stringRun(b, i)
			s.escaped = s.escaped || escaped
			if !closed {
				return stop(end, stringFaultAt(b, end))
			}
			i = end
			if s.state == stateString {
				s.state = stateAfter
				break
			}
			if s.levels.depth == 1 {
				if s.escaped {
					s.key = gjson.Parse(view(b[s.strAt:end])).Str
				} else {
					raw := b[s.strAt+1 : end-1]
					s.key = unsafe.String(unsafe.SliceData(raw), len(raw))
				}
			}
			s.state = stateColon
		case stateAfter:
			if s.levels.depth == 1 && s.valueAt >= 0 {
				if s.members == maxMembers {
					return stop(i, scanFault{kind: faultTooManyKeys, offset: s.valueAt})
				}
				s.members++
				if visit != nil {
					visit(s.key, s.valueAt, i)
				}
				s.valueAt = -1
			}
			if s.levels.depth == 0 {
				s.state = stateEnd
				break
			}
			s.state = stateNext
			fallthrough
		case stateNext:
			i = skipSpace(b, i)
			if i >= len(b) {
				return stop(i, scanFault{kind: faultSyntax, offset: i})
			}
			switch {
			case s.levels.closedBy(b[i]):
				if s.levels.depth == 1 {
					s.safe = i // the closing brace waits for the whole body's verdict
				}
				s.levels.depth--
				i++
				s.state = stateAfter
			case b[i] != ',':
				return stop(i, scanFault{kind: faultSyntax, offset: i})
			case s.levels.inObject():
				i++
				s.state = stateKey
			default:
				i++
				s.state = stateValue
			}
		case stateEnd:
			i = skipSpace(b, i)
			if i != len(b) {
				return stop(i, scanFault{kind: faultSyntax, offset: i})
			}
			if !final {
				return stop(i, scanFault{})
			}
			s.i = i
			return true, nil
		}
	}
}

// openLevels is the stack of the objects and arrays not yet closed, a bit each: a fixed
// 128 bytes for MaxNesting levels, never grown.
type openLevels struct {
	depth    int
	isObject [(MaxNesting + 63) / 64]uint64
}

func (l *openLevels) push(object bool) {
	word, bit := l.depth/64, uint(l.depth%64)
	l.isObject[word] &^= 1 << bit
	if object {
		l.isObject[word] |= 1 << bit
	}
	l.depth++
}

// inObject reports whether the innermost open level is an object.
func (l *openLevels) inObject() bool {
	d := l.depth - 1
	return l.isObject[d/64]&(1<<uint(d%64)) != 0
}

// closedBy reports whether c closes the innermost open level.
func (l *openLevels) closedBy(c byte) bool {
	return c == '}' && l.inObject() || c == ']' && !l.inObject()
}

// scanPrimitive returns the end of the number or literal at i, or -1 when there is none.
func scanPrimitive(b []byte, i int) int {
	switch c := b[i]; {
	case c == '-' || c >= '0' && c <= '9':
		return scanNumber(b, i)
	case c == 't':
		return scanLiteral(b, i, "true")
	case c == 'f':
		return scanLiteral(b, i, "false")
	case c == 'n':
		return scanLiteral(b, i, "null")
	}
	return -1
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
	end, escaped, closed := stringRun(b, i+1)
	if !closed {
		return 0, false, stringFault(b, end)
	}
	return end, escaped, nil
}

// stringRun reads a string's content from i. closed, it returns the position after the
// closing quote; otherwise the start of the first character or escape it could not
// accept: one that is wrong, or cut where b ends.
func stringRun(b []byte, i int) (end int, escaped, closed bool) {
	for i < len(b) {
		// Eight bytes at a time while none of them ends the string, escapes, is a control
		// character or starts a multi-byte character: most of a long body's text. A word
		// that holds one goes straight to the first such byte. Once a run has lasted eight
		// words it is likely a long plain text: plainPrefix skips it in blocks of 32
		// bytes, and the word loop finds the special byte that stopped it. Text dense
		// with escapes rarely pays for the call.
		for words := 0; i+8 <= len(b); {
			if m := specialBytes(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
			if words++; words == 8 {
				i += plainPrefix(b[i:])
			}
		}
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			return i + 1, escaped, true
		case c == '\\':
			if i+1 >= len(b) {
				return i, escaped, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return i, escaped, false
				}
				i += 6
			default:
				return i, escaped, false
			}
			escaped = true
		case c < 0x20:
			return i, escaped, false
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size <= 1 {
				return i, escaped, false
			}
			i += size
		}
	}
	return i, escaped, false
}

// stringFault is the fault of a string whose content stringRun stopped at i.
func stringFault(b []byte, i int) *scanFault {
	f := stringFaultAt(b, i)
	return &f
}

func stringFaultAt(b []byte, i int) scanFault {
	if i < len(b) && b[i] >= utf8.RuneSelf {
		return scanFault{kind: faultUTF8, offset: i}
	}
	return scanFault{kind: faultSyntax, offset: i}
}

// specialBytes flags, in the high bit of each byte, the bytes of w (read little-endian)
// that are not printable ASCII or are '"' or '\\'. It is zero exactly when the eight
// bytes are all plain. A flag can be false only above a true one (a borrow carries
// upwards), so the lowest flag is always the first special byte.
func specialBytes(w uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	hasZero := func(v uint64) uint64 { return (v - ones) & ^v & highs }
	control := (w - 0x20*ones) & ^w & highs
	return w&highs | control | hasZero(w^('"'*ones)) | hasZero(w^('\\'*ones))
}

// plainPrefixWords returns how many leading bytes of b are plain string bytes (see
// specialBytes), in whole blocks of 32 up to the first that holds a special byte. Like
// every plainPrefix, it may stop short of the first special byte, by less than 32 bytes,
// and short of b's end by less than 32; the caller reads on from there a word at a time.
func plainPrefixWords(b []byte) int {
	i := 0
	for ; i+32 <= len(b); i += 32 {
		w := b[i : i+32]
		if specialBytes(binary.LittleEndian.Uint64(w))|specialBytes(binary.LittleEndian.Uint64(w[8:]))|
			specialBytes(binary.LittleEndian.Uint64(w[16:]))|specialBytes(binary.LittleEndian.Uint64(w[24:])) != 0 {
			break
		}
	}
	return i
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

// scanLiteral returns the end of word at i, or -1 when the bytes differ.
func scanLiteral(b []byte, i int, word string) int {
	if len(b)-i < len(word) || string(b[i:i+len(word)]) != word {
		return -1
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
