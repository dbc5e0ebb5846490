package protocols

import (
	"compress/flate"
	"encoding/base64"
	"io"
	"math"
	"strings"
)

// What an inline PDF is reserved. Providers bill a PDF by its pages, not its bytes: each
// page is rendered as an image and its text extracted (Anthropic states 1,500 to 3,000
// text tokens a page plus the page's image; OpenAI likewise sends each page's text and
// image), so a small file of many pages costs far more than the text of its base64.
const (
	// PDFPageTextTokens is the text of one page: the top of Anthropic's stated range.
	PDFPageTextTokens = 3000
	// PDFPageInputTokens is one page as reserved: its image, at the image rule, and its
	// text.
	PDFPageInputTokens = ImageInputTokens + PDFPageTextTokens
	// MaxPDFPages caps the pages one request's PDFs are reserved for, together (the
	// providers take at most a few hundred): a count read from a hostile file saturates
	// here instead of growing the reservation, or its arithmetic, without end.
	MaxPDFPages = 10_000
	// unreadablePDFBytesPerPage is how a PDF whose pages cannot be read is counted: a page
	// for every 10 bytes of the file, fewer than a page takes even packed with thousands
	// of others into a compressed object stream (some 15).
	unreadablePDFBytesPerPage = 10
	// pdfInflateFloor and pdfInflatePerByte bound the object streams a request's PDFs are
	// inflated to, together: 4 MiB, and 6 bytes more for each byte of their base64 (some
	// 8 for each byte of the files). A file's object streams hold its objects' dictionaries
	// (never page content), which deflate compresses a few times over; a file that would
	// inflate past the bound is counted as unreadable.
	pdfInflateFloor   = 4 << 20
	pdfInflatePerByte = 6
)

// pdfWork is what reading a request's PDFs shares: the room left to inflate object
// streams into, one inflater, reset for each stream, and the buffers, so that a body of
// many small documents allocates once.
type pdfWork struct {
	inflateLeft int64
	inflater    io.ReadCloser
	window      base64Window // the file being read
	data        streamData
	out         [4096]byte
}

// streamData is an object stream's data as the inflater reads it: the file, up to the
// stream's length when it is known. As a byte reader it is read no further than the
// deflate data goes.
type streamData struct {
	src  *base64Window
	left int64
}

func (d *streamData) ReadByte() (byte, error) {
	if d.left <= 0 || !d.src.fill() {
		return 0, io.EOF
	}
	d.left--
	c := d.src.buf[d.src.r]
	d.src.r++
	return c, nil
}

func (d *streamData) Read(p []byte) (int, error) {
	if d.left <= 0 || !d.src.fill() {
		return 0, io.EOF
	}
	n := copy(p[:min(int64(len(p)), d.left)], d.src.buf[d.src.r:d.src.w])
	d.src.r += n
	d.left -= int64(n)
	return n, nil
}

// pdfPages reads a document whose base64 is s (a JSON string's content, as written) and
// returns the pages it is reserved for, and whether it is a PDF: one that starts with
// the PDF header, or that the request declares a PDF. A PDF's pages are the larger of its
// page objects (dictionaries of /Type /Page, in compressed object streams too) and the
// largest /Count of its page tree nodes: a page an incremental update replaced or removed
// still counts. A PDF whose pages cannot be read (no page found, an object stream that
// does not inflate, a filter other than Flate, the inflate bound reached) counts a page
// for every 10 bytes of the file, if that is more. The count saturates at MaxPDFPages.
//
// It decodes the base64 a window at a time and keeps no copy of the file; its work is
// linear in s, plus at most the inflate room left in w.
func pdfPages(s []byte, declaredPDF bool, w *pdfWork) (pages int64, isPDF bool) {
	return pdfPagesIn(s, declaredPDF, w, 0)
}

// pdfPagesIn is pdfPages with a window of size bytes (0: the whole buffer), which the
// tests make small to cut files in many places.
func pdfPagesIn(s []byte, declaredPDF bool, w *pdfWork, size int) (pages int64, isPDF bool) {
	w.inflateLeft += pdfInflatePerByte * int64(len(s))
	src := &w.window
	*src = base64Window{s: s, size: size}
	var lx pdfLexer
	header := pdfHeader{}
	readable := true
	for src.fill() {
		if !header.found && !header.passed {
			header.scan(src.buf[src.r:src.w], src.decoded-int64(src.w-src.r))
			if header.passed && !declaredPDF {
				return 0, false // no header where a reader looks for it
			}
		}
		src.r += lx.feed(src.buf[src.r:src.w])
		if lx.objectStream {
			lx.objectStream = false
			if !w.inflate(src, &lx) {
				readable = false
			}
		}
	}
	if !header.found && !declaredPDF {
		return 0, false
	}
	lx.finish()
	pages = max(lx.pages, lx.treeCount)
	if !header.found || !readable || lx.unreadable || pages == 0 {
		pages = max(pages, (src.decoded+unreadablePDFBytesPerPage-1)/unreadablePDFBytesPerPage)
	}
	return min(max(pages, 1), MaxPDFPages), true
}

// pdfHeaderWindow is how far into a file a reader looks for its %PDF- header.
const pdfHeaderWindow = 1024

// pdfHeader finds "%PDF-" in the first pdfHeaderWindow bytes of a file read in pieces.
type pdfHeader struct {
	matched int
	found   bool
	passed  bool // read past where the header may start, without finding it
}

// scan reads p, which starts at offset at of the file.
func (h *pdfHeader) scan(p []byte, at int64) {
	const header = "%PDF-"
	for i, c := range p {
		if at+int64(i)-int64(h.matched) >= pdfHeaderWindow {
			h.passed = true
			return
		}
		switch {
		case c == header[h.matched]:
			if h.matched++; h.matched == len(header) {
				h.found = true
				return
			}
		case c == '%':
			h.matched = 1
		default:
			h.matched = 0
		}
	}
}

// inflate reads the object stream whose data starts at src's next byte into a lexer of
// its own, whose counts it adds to lx's. The stream's bytes are consumed as far as the
// inflater read them: a stream that ends early, or does not inflate, leaves the rest to
// lx. It reports whether the whole stream was read.
func (w *pdfWork) inflate(src *base64Window, lx *pdfLexer) bool {
	// The data follows the keyword's end of line (CR LF or LF).
	if p := src.peek(1); len(p) == 1 && p[0] == '\n' && lx.afterCR {
		src.r++
	}
	if w.inflateLeft <= 0 {
		return false
	}
	// A stream's direct /Length is where a reader takes its data to end: the inflater
	// reads no further, and what follows is lexed as the file it is.
	w.data = streamData{src: src, left: math.MaxInt64}
	if lx.streamLength >= 0 {
		w.data.left = lx.streamLength
	}
	// FlateDecode is a zlib stream; some writers leave out its two-byte header.
	if p := src.peek(2); len(p) == 2 && w.data.left >= 2 && p[0]&0x0f == 8 && p[0]>>4 <= 7 && (uint16(p[0])<<8|uint16(p[1]))%31 == 0 && p[1]&0x20 == 0 {
		src.r += 2
		w.data.left -= 2
	}
	if w.inflater == nil {
		w.inflater = flate.NewReader(&w.data)
	} else if err := w.inflater.(flate.Resetter).Reset(&w.data, nil); err != nil {
		return false
	}
	var inner pdfLexer
	inner.inStream = true
	defer func() {
		inner.finish()
		lx.pages += inner.pages
		lx.treeCount = max(lx.treeCount, inner.treeCount)
		lx.unreadable = lx.unreadable || inner.unreadable
	}()
	for {
		n, err := w.inflater.Read(w.out[:min(int64(len(w.out)), w.inflateLeft)])
		w.inflateLeft -= int64(n)
		inner.feed(w.out[:n])
		switch {
		case err == io.EOF:
			return true
		case err != nil:
			return false
		case w.inflateLeft <= 0:
			return false
		}
	}
}

// base64Window decodes the base64 in a JSON string's content a window at a time. JSON
// escapes are read as the characters they stand for ("\/" is a slash), line breaks and
// other bytes outside the alphabet are passed over (as MIME's decoders do), padding ends
// a group, and the URL-safe alphabet is read too: whatever a provider might decode, the
// page count reads at least as much of it.
type base64Window struct {
	s       []byte
	i       int // next byte of s
	acc     uint32
	bits    uint
	buf     [4096]byte
	size    int   // of buf, what is filled: all of it when 0
	r, w    int   // buf[r:w] is decoded and not yet read
	decoded int64 // bytes decoded so far
}

// fill decodes more when everything decoded has been read; false at the end.
func (d *base64Window) fill() bool {
	if d.r < d.w {
		return true
	}
	d.r, d.w = 0, 0
	d.decode()
	return d.w > 0
}

// peek returns the next n bytes (fewer at the end) without reading them.
func (d *base64Window) peek(n int) []byte {
	if d.w-d.r < n {
		d.w = copy(d.buf[:], d.buf[d.r:d.w])
		d.r = 0
		d.decode()
	}
	return d.buf[d.r:min(d.w, d.r+n)]
}

// decode fills buf[w:] from s, leaving room for the three bytes of a last group.
func (d *base64Window) decode() {
	s, i, w := d.s, d.i, d.w
	slowUntil := 0 // s[:slowUntil] is read a character at a time
	size := len(d.buf)
	if d.size > 0 {
		size = d.size
	}
	for i < len(s) && w <= size-3 {
		if d.bits == 0 && i >= slowUntil {
			// A long run of the standard alphabet, as most clients write it, decodes
			// at once; a short one, and the byte ending it, one character at a time.
			end, j := min(len(s), i+(size-w)/3*4), i
			for j < end && standardBase64[s[j]] {
				j++
			}
			if k := (j - i) &^ 3; k >= 64 {
				n, _ := base64.StdEncoding.Decode(d.buf[w:], s[i:i+k])
				w, i = w+n, i+k
				continue
			}
			slowUntil = j + 1
		}
		c := s[i]
		i++
		if c == '\\' && i < len(s) {
			c, i = jsonEscaped(s, i)
		}
		v := base64Value[c]
		if v >= 64 {
			if c == '=' {
				d.acc, d.bits = 0, 0
			}
			continue
		}
		d.acc = d.acc<<6 | uint32(v)
		if d.bits += 6; d.bits >= 8 {
			d.bits -= 8
			d.buf[w] = byte(d.acc >> d.bits)
			w++
		}
	}
	d.decoded += int64(w - d.w)
	d.i, d.w = i, w
}

// jsonEscaped reads the escape whose backslash precedes s[i] and returns the byte it
// stands for (0 for any that is not ASCII, which is no base64) and where it ends.
func jsonEscaped(s []byte, i int) (byte, int) {
	switch s[i] {
	case 'u':
	case 'n':
		return '\n', i + 1
	case 'r':
		return '\r', i + 1
	case 't':
		return '\t', i + 1
	case 'b':
		return '\b', i + 1
	case 'f':
		return '\f', i + 1
	default:
		return s[i], i + 1 // a slash, a quote, a backslash
	}
	r, ok := hex4(s, i+1)
	if !ok {
		return 0, i + 1
	}
	if r >= 0x80 {
		return 0, i + 5
	}
	return byte(r), i + 5
}

// base64Value maps a byte to its 6-bit value in the standard or URL-safe alphabet, 64
// for any other.
var base64Value = func() (t [256]byte) {
	for i := range t {
		t[i] = 64
	}
	const std = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	for i := range len(std) {
		t[std[i]] = byte(i)
	}
	t['-'], t['_'] = 62, 63
	return t
}()

// standardBase64 holds the standard alphabet's characters.
var standardBase64 = func() (t [256]bool) {
	for c, v := range base64Value {
		t[c] = v < 64 && c != '-' && c != '_'
	}
	return t
}()

// pdfLexer reads a PDF's bytes, in pieces, for its page objects and page tree counts.
// It is a scan, not a parse: it follows no cross-reference table, skips no string,
// comment or stream, and so counts every page dictionary written anywhere in the file,
// superseded ones too, which only ever adds. It tracks dictionaries to know a page tree
// node's /Count and an object stream's /Filter, as far as pdfMaxDepth deep.
type pdfLexer struct {
	tok     [pdfMaxToken]byte // the name or word being read, decoded
	tokLen  int
	tokLong bool // longer than tok: no name or word looked for
	kind    byte // 0 between tokens, '/' in a name, 'w' in a word (number, keyword), 'k' in a word passed over
	hex     int  // in a name's #xx escape: digits read so far, -1 when none
	hexVal  byte
	lt, gt  bool // the byte before was a lone '<' or '>'
	comment bool // in a comment between a key and its value
	afterCR bool // the last token ended at a CR

	want        byte // what the key just read asks of the next token
	arrayNames  int  // names read in a /Filter array
	lengthWords int  // words read after a /Length: "12 0 R" makes it indirect

	depth  int
	frames [pdfMaxDepth]pdfDict
	spare  pdfDict // stands for a dictionary too deep to track, or none
	last   pdfDict // the last top-level dictionary of the object, closed

	inStream     bool  // the lexer reads an object stream's content
	objectStream bool  // a Flate object stream's data starts after the token just read
	streamLength int64 // its direct /Length, -1 when none
	unreadable   bool  // an object stream whose filter cannot be read

	pages     int64 // /Type /Page dictionaries
	treeCount int64 // the largest /Count of a /Type /Pages dictionary
}

const (
	pdfMaxToken  = 16
	pdfMaxDepth  = 16
	maxPDFNumber = 1 << 40 // past any count or length a body can hold
)

// What a key asks of the next token.
const (
	wantNothing byte = iota
	wantType
	wantCount
	wantFilter
	wantFilterArray
	wantLength
)

// pdfDict is what the lexer knows of one dictionary.
type pdfDict struct {
	typ      byte // 'p' Page, 'P' Pages, 'o' ObjStm
	count    int64
	hasCount bool
	filter   byte // 0 none, 'f' Flate alone, 'x' any other
	parms    bool // /DecodeParms: a predictor the lexer does not undo
	length   int64
	hasLen   bool // length is a direct /Length
}

// pdfClass sorts bytes: 's' white space, 'd' a delimiter, 0 a regular character.
var pdfClass = func() (t [256]byte) {
	for _, c := range []byte("\x00\t\n\f\r ") {
		t[c] = 's'
	}
	for _, c := range []byte("()<>[]{}/%") {
		t[c] = 'd'
	}
	return t
}()

// feed reads p and returns how much of it was read: all of it, or up to the end of line
// after a Flate object stream's "stream" keyword, with objectStream set.
func (l *pdfLexer) feed(p []byte) int {
	for i := 0; i < len(p); i++ {
		if l.kind == 'k' {
			// Most of a file is words no key waits for and that can be no keyword (numbers,
			// operators, binary data): passed over in a run.
			for i < len(p) && pdfClass[p[i]] == 0 {
				i++
			}
			if i == len(p) {
				break
			}
		}
		c := p[i]
		if l.comment {
			if c == '\n' || c == '\r' {
				l.comment = false
			}
			continue
		}
		cls := pdfClass[c]
		if cls == 0 {
			l.lt, l.gt = false, false
			if l.kind == 'w' || l.kind == '/' && l.hex < 0 && c != '#' {
				l.add(c)
				continue
			}
			l.regular(c)
			continue
		}
		if l.kind != 0 {
			l.endToken()
			if l.objectStream {
				l.afterCR = c == '\r'
				return i + 1
			}
		}
		if cls == 's' {
			l.lt, l.gt = false, false
			continue
		}
		switch c {
		case '/':
			l.lt, l.gt = false, false
			l.kind, l.tokLen, l.tokLong, l.hex = '/', 0, false, -1
		case '<':
			l.gt = false
			if l.lt = !l.lt; !l.lt {
				l.push()
			}
		case '>':
			l.lt = false
			if l.gt = !l.gt; !l.gt {
				l.pop()
			}
		case '[':
			l.lt, l.gt = false, false
			if l.want == wantFilter {
				l.want, l.arrayNames = wantFilterArray, 0
			} else {
				l.want = wantNothing
			}
		case ']':
			l.lt, l.gt = false, false
			if l.want == wantFilterArray {
				l.want = wantNothing
				if f := l.dict(); l.arrayNames != 1 && f.filter != 'x' {
					f.filter = 'x' // a chain of filters, or none in brackets
					if l.arrayNames == 0 {
						f.filter = 0
					}
				}
			}
		case '%':
			l.lt, l.gt = false, false
			// Between a key and its value a comment is passed over; anywhere else '%'
			// may be inside a string, and what follows it is read on.
			l.comment = l.want != wantNothing && l.want != wantFilterArray
		default: // ( ) { }
			l.lt, l.gt = false, false
		}
	}
	return len(p)
}

// finish ends the token the input ended in.
func (l *pdfLexer) finish() {
	if l.kind != 0 {
		l.endToken()
	}
}

// regular adds c to the token being read, or starts a word with it.
func (l *pdfLexer) regular(c byte) {
	if l.kind == 0 {
		if l.want == wantNothing && l.lengthWords == 0 && c != 'o' && c != 'e' && c != 's' {
			l.kind = 'k' // no keyword starts so, and no key waits for a number
			return
		}
		l.kind, l.tokLen, l.tokLong = 'w', 0, false
	}
	if l.kind == '/' {
		// A name's #xx is the byte xx: "/Ty#70e" is /Type.
		switch {
		case l.hex >= 0:
			v, ok := hexDigit(c)
			if !ok { // not an escape after all: the characters as they are
				l.hex = -1
				l.add('#')
				break
			}
			l.hexVal = l.hexVal<<4 | v
			if l.hex++; l.hex == 2 {
				l.hex = -1
				l.add(l.hexVal)
			}
			return
		case c == '#':
			l.hex, l.hexVal = 0, 0
			return
		}
	}
	l.add(c)
}

func (l *pdfLexer) add(c byte) {
	if l.tokLen == len(l.tok) {
		l.tokLong = true
		return
	}
	l.tok[l.tokLen] = c
	l.tokLen++
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// dict is the innermost open dictionary's record (a spare one when none is tracked).
func (l *pdfLexer) dict() *pdfDict {
	if l.depth < 1 || l.depth > pdfMaxDepth {
		l.spare = pdfDict{}
		return &l.spare
	}
	return &l.frames[l.depth-1]
}

func (l *pdfLexer) push() {
	l.want, l.lengthWords = wantNothing, 0
	if l.depth++; l.depth <= pdfMaxDepth {
		l.frames[l.depth-1] = pdfDict{}
	}
}

func (l *pdfLexer) pop() {
	l.want, l.lengthWords = wantNothing, 0
	if l.depth < 1 {
		return
	}
	if l.depth <= pdfMaxDepth {
		f := l.frames[l.depth-1]
		if f.typ == 'P' && f.hasCount {
			l.treeCount = max(l.treeCount, f.count)
		}
		if l.depth == 1 {
			l.last = f
		}
	}
	l.depth--
}

// endToken acts on the name or word just read.
func (l *pdfLexer) endToken() {
	kind := l.kind
	l.kind = 0
	if kind == 'k' {
		return
	}
	if kind == '/' && l.hex >= 0 { // a name that ends in "#" or "#x"
		l.add('#')
	}
	tok := l.tok[:l.tokLen]
	if l.tokLong {
		tok = nil
	}
	want := l.want
	if want != wantFilterArray {
		l.want = wantNothing
	}
	if kind == 'w' {
		l.word(tok, want)
		return
	}
	l.lengthWords = 0
	switch want {
	case wantType:
		switch string(tok) {
		case "Page":
			l.pages++
			l.dict().typ = 'p'
		case "Pages":
			l.dict().typ = 'P'
		case "ObjStm":
			l.dict().typ = 'o'
		}
		return
	case wantFilter:
		l.dict().filter = flateOr(tok)
		return
	case wantFilterArray:
		l.arrayNames++
		if f := l.dict(); f.filter != 'x' {
			f.filter = flateOr(tok)
		}
		return
	}
	switch string(tok) {
	case "Type":
		l.want = wantType
	case "Count":
		l.want = wantCount
	case "Filter":
		l.want = wantFilter
	case "Length":
		l.want = wantLength
	case "DecodeParms", "DP":
		l.dict().parms = true
	}
}

// flateOr is a filter's record: 'f' for Flate (by its full or short name), 'x' for any
// other.
func flateOr(name []byte) byte {
	if string(name) == "FlateDecode" || string(name) == "Fl" {
		return 'f'
	}
	return 'x'
}

// word acts on a number or keyword.
func (l *pdfLexer) word(tok []byte, want byte) {
	lengthWords := l.lengthWords
	l.lengthWords = 0
	switch want {
	case wantCount:
		if n, ok := pdfCount(tok, l.tokLong); ok {
			f := l.dict()
			f.count, f.hasCount = n, true
		}
		return
	case wantLength:
		if n, ok := pdfCount(tok, l.tokLong); ok {
			f := l.dict()
			f.length, f.hasLen, l.lengthWords = n, true, 1
		}
		return
	case wantFilterArray:
		l.want = wantNothing
		l.dict().filter = 'x'
	}
	switch {
	case lengthWords == 1:
		if _, ok := pdfCount(tok, false); ok {
			l.lengthWords = 2
			return
		}
	case lengthWords == 2 && string(tok) == "R":
		l.dict().hasLen = false // "/Length 12 0 R": the length is object 12's
		return
	}
	switch string(tok) {
	case "obj", "endobj":
		// Objects do not nest: whatever a broken one left open ends here.
		l.depth, l.last = 0, pdfDict{}
	case "stream":
		if l.inStream {
			return // an object stream holds no streams
		}
		if f := l.last; f.typ == 'o' {
			switch {
			case f.filter == 'f' && !f.parms:
				l.objectStream, l.streamLength = true, -1
				if f.hasLen {
					l.streamLength = f.length
				}
			case f.filter != 0:
				l.unreadable = true
			}
		}
		l.last = pdfDict{}
	}
}

// pdfCount reads a page tree's /Count or a stream's /Length: a non-negative integer,
// saturating above maxPDFNumber. A number too long to keep is that large.
func pdfCount(tok []byte, long bool) (int64, bool) {
	if long {
		return maxPDFNumber, true
	}
	if len(tok) > 0 && tok[0] == '+' {
		tok = tok[1:]
	}
	if len(tok) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range tok {
		if c == '.' {
			break
		}
		if c < '0' || c > '9' {
			return 0, false
		}
		n = min(n*10+int64(c-'0'), maxPDFNumber)
	}
	return n, true
}

// document counts the document whose data is v, a JSON string of base64 (of a data: URL
// of base64, where dataURL), by its pages when it is a PDF and they cost more than the
// text of its base64 does; any other document stays counted as that text.
func (t *textCount) document(v []byte, dataURL, declaredPDF bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return
	}
	s := v[1 : len(v)-1]
	if dataURL {
		var ok bool
		if s, declaredPDF, ok = dataURLBase64(s); !ok {
			return
		}
	}
	if t.pdfPages >= MaxPDFPages {
		return
	}
	if t.pdf == nil {
		t.pdf = &pdfWork{inflateLeft: pdfInflateFloor}
	}
	pages, isPDF := pdfPages(s, declaredPDF, t.pdf)
	if !isPDF {
		return
	}
	pages = min(pages, MaxPDFPages-t.pdfPages)
	t.pdfPages += pages
	text := countText(v)
	if byPages := pages * PDFPageInputTokens; byPages > (text.ascii+3)/4+text.codePoints {
		t.ascii -= text.ascii
		t.codePoints -= text.codePoints
		t.documents += byPages
	}
}

// dataURLBase64 reads s, a JSON string's content, as a data: URL and returns its
// base64 data and whether its media type is PDF's; ok is false for a data: URL that is
// not base64. Content that is no data: URL is read as base64 of its own.
func dataURLBase64(s []byte) (data []byte, pdf, ok bool) {
	const scheme = "data:"
	var prefix [128]byte
	n := 0
	for i := 0; i < len(s) && n < len(prefix); {
		c := s[i]
		if i++; c == '\\' && i < len(s) {
			c, i = jsonEscaped(s, i)
		}
		if c == ',' && n >= len(scheme) {
			params := string(prefix[len(scheme):n])
			mediaType, _, _ := strings.Cut(params, ";")
			if !strings.HasSuffix(params, ";base64") {
				return nil, false, false
			}
			return s[i:], isPDFMediaType(mediaType), true
		}
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		prefix[n] = c
		if n++; n == len(scheme) && string(prefix[:n]) != scheme {
			return s, false, true
		}
	}
	if n < len(scheme) {
		return s, false, true
	}
	return nil, false, false // a data: URL without its data
}

// isPDFMediaType reports whether a media type (its parameters left out) is PDF's.
func isPDFMediaType(m string) bool {
	m, _, _ = strings.Cut(m, ";")
	return strings.EqualFold(strings.TrimSpace(m), "application/pdf")
}
