package protocols

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// ImageInputTokens is what one image in a request is reserved and, without usage,
// billed as, whatever its size: providers downscale an image before the model sees it
// (Anthropic to about 1.15 megapixels, some 1,600 tokens; OpenAI's default detail to
// fewer). A model that bills more per image (OpenAI's high or original detail on some
// models) can exceed it.
const ImageInputTokens = 1600

// EstimateInputTokens is the input a request body is reserved, and billed when the
// upstream reports no usage. Every JSON string counts as text, keys included, decoded
// (an escape counts as the character it encodes, a surrogate pair as one): ASCII at four
// bytes a token, each other code point as a token. A byte-level tokenizer's token covers
// at least one UTF-8 byte and a code point is at most four, so no text can meter more
// than four times this (plus the few tokens a template adds per message). The JSON
// around the strings (quotes, brackets, colons, numbers, literals; not the space between
// them) counts as ASCII text too: a provider renders tool schemas and structured values
// into the prompt, and a schema's numbers are no string.
//
// Media are recognised by where the shape puts them, never by how their bytes look: an
// image's data or URL counts ImageInputTokens instead of its text; audio and document
// data count as the text of their base64 (a quarter of its length). A data: URL in a
// text part is text.
//
// The body is one that ParseRequest accepted; any other is read without panicking, for
// some estimate. It reads the body a few times over, in constant memory.
func EstimateInputTokens(body []byte) int64 {
	t := countText(body)
	if w, ok := walkObject(body); ok {
		for {
			key, start, ok := w.nextKey()
			if !ok {
				break
			}
			end := 0
			switch keyText(key) {
			case "messages", "input": // chat and messages; responses
				end = t.parts(body, start, 0)
			default:
				end = skipJSONValue(body, start)
			}
			if end < 0 {
				break
			}
			w.resume(end)
		}
	}
	return t.tokens()
}

// textCount is text measured as EstimateInputTokens counts it.
type textCount struct {
	ascii      int64 // the strings' ASCII characters
	codePoints int64 // the strings' other characters
	syntax     int64 // the bytes outside the strings' content, space left out
	images     int64
	documents  int64    // the PDFs counted by their pages, in tokens
	pdfPages   int64    // their pages, at most MaxPDFPages
	pdf        *pdfWork // what reading them shares, once there is one
}

func (t textCount) tokens() int64 {
	return (max(t.ascii, 0)+t.syntax+3)/4 + max(t.codePoints, 0) + t.images*ImageInputTokens + t.documents
}

// parts reads the value at b[i] as a conversation's items, or an item's content parts:
// each object of an array, or the object itself. It returns where the value ends, -1
// when it is broken. Each byte is passed over once.
func (t *textCount) parts(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '{':
		return t.part(b, i, depth)
	case '[':
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1
		}
		for i < len(b) {
			end := -1
			if b[i] == '{' {
				end = t.part(b, i, depth)
			} else {
				end = skipJSONValue(b, i)
			}
			if end < 0 {
				return -1
			}
			if i = skipSpace(b, end); i >= len(b) {
				return -1
			}
			switch b[i] {
			case ',':
				i = skipSpace(b, i+1)
			case ']':
				return i + 1
			default:
				return -1
			}
		}
		return -1
	}
	return skipJSONValue(b, i)
}

// part reads the item or content part at b[i] (an object) and returns where it ends: an
// image counts ImageInputTokens in place of the text of its data or URL; the parts in its
// content or output are read in turn, to the depth of a tool result's blocks (chat's and
// messages' content parts, a tool result's blocks, responses' input items' content and
// tool outputs). Any other part stays counted as the text it is. Of a member repeated
// inside a part, the last is read: whichever an upstream reads, only an image's own data
// or URL ever leaves the text count.
func (t *textCount) part(b []byte, i, depth int) int {
	w := memberWalk{b: b, i: i + 1}
	var typ, source, imageURL, file, fileData []byte
	for {
		key, start, ok := w.nextKey()
		if !ok {
			break
		}
		end := 0
		switch keyText(key) {
		case "content", "output":
			if depth < 2 {
				end = t.parts(b, start, depth+1)
				break
			}
			end = skipJSONValue(b, start)
		case "type":
			end = skipJSONValue(b, start)
			typ = b[start:max(start, end)]
		case "source":
			end = skipJSONValue(b, start)
			source = b[start:max(start, end)]
		case "image_url":
			end = skipJSONValue(b, start)
			imageURL = b[start:max(start, end)]
		case "file":
			end = skipJSONValue(b, start)
			file = b[start:max(start, end)]
		case "file_data":
			end = skipJSONValue(b, start)
			fileData = b[start:max(start, end)]
		default:
			end = skipJSONValue(b, start)
		}
		if end < 0 {
			return -1
		}
		w.resume(end)
	}
	end := w.objectEnd()
	var payload []byte
	switch stringText(typ) {
	case "image": // messages: source.data (base64) or source.url
		if payload, _ = member(source, "data"); payload == nil {
			payload, _ = member(source, "url")
		}
	case "image_url": // chat: image_url.url, an https or data: URL
		payload = imageURL
		if url, ok := member(imageURL, "url"); ok {
			payload = url
		}
	case "input_image", "computer_screenshot": // responses: image_url, or a file_id
		payload = imageURL
	case "document": // messages: a base64 source is a PDF
		if kind, _ := member(source, "type"); stringText(kind) == "base64" {
			data, _ := member(source, "data")
			mediaType, _ := member(source, "media_type")
			t.document(data, false, isPDFMediaType(stringText(mediaType)))
		}
		return end
	case "file": // chat: file.file_data, a data: URL
		data, _ := member(file, "file_data")
		t.document(data, true, false)
		return end
	case "input_file": // responses: file_data, a data: URL
		t.document(fileData, true, false)
		return end
	default:
		return end
	}
	t.images++
	if len(payload) > 0 && payload[0] == '"' {
		p := countText(payload)
		t.ascii -= p.ascii
		t.codePoints -= p.codePoints
	}
	return end
}

// stringText is a JSON string value's text, "" for any other value.
func stringText(v []byte) string {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return ""
	}
	return keyText(v[1 : len(v)-1])
}

// countText measures the text of every string in b, and the JSON around them. Outside strings a JSON text has no
// quote, so each quote found there opens one.
func countText(b []byte) (t textCount) {
	for i := 0; i < len(b); {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			t.syntax += syntaxBytes(b[i:])
			break
		}
		t.syntax += syntaxBytes(b[i:i+q]) + 2 // and the string's quotes
		i = t.add(b, i+q+1)
	}
	return t
}

// syntaxBytes counts the bytes of JSON between strings that are not space.
func syntaxBytes(b []byte) (n int64) {
	for _, c := range b {
		if !isSpace(c) {
			n++
		}
	}
	return n
}

// add counts the string whose content starts at b[i], and returns where it ends.
func (t *textCount) add(b []byte, i int) int {
	for i < len(b) {
		// Plain ASCII (no quote, backslash or control) eight bytes at a time, and long
		// runs of it in blocks, as the scan reads them.
		for words := 0; i+8 <= len(b); {
			if m := specialBytes(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				n := bits.TrailingZeros64(m) >> 3
				t.ascii += int64(n)
				i += n
				break
			}
			t.ascii += 8
			i += 8
			if words++; words == 8 {
				n := plainPrefix(b[i:])
				t.ascii += int64(n)
				i += n
			}
		}
		if i >= len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			i = t.escape(b, i)
		case c < 0x80:
			t.ascii++
			i++
		default:
			// A code point, read whole by its leading byte (the body is valid UTF-8; on any
			// other, a stray continuation byte counts nothing).
			switch {
			case c >= 0xF0:
				i += 4
			case c >= 0xE0:
				i += 3
			case c >= 0xC0:
				i += 2
			default:
				i++
				continue
			}
			t.codePoints++
		}
	}
	return len(b)
}

// escape counts the escape at b[i] as the character it encodes and returns its end.
func (t *textCount) escape(b []byte, i int) int {
	if i+1 >= len(b) {
		return len(b)
	}
	if b[i+1] != 'u' {
		t.ascii++
		return i + 2
	}
	r, ok := hex4(b, i+2)
	if !ok {
		t.ascii++
		return i + 2
	}
	if r < 0x80 {
		t.ascii++
		return i + 6
	}
	t.codePoints++
	// A high surrogate followed by a low one is one character.
	if r >= 0xD800 && r < 0xDC00 && i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
		if lo, ok := hex4(b, i+8); ok && lo >= 0xDC00 && lo < 0xE000 {
			return i + 12
		}
	}
	return i + 6
}

// hex4 reads the four hex digits at b[i].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
