package azure

import (
	"bufio"
	"bytes"
	"errors"
	"io"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/switchyard-gw/switchyard/protocols"
)

// Azure adds its content filter's verdicts to chat answers: prompt_filter_results at the
// top, content_filter_results (and, with asynchronous filtering, content_filter_offsets
// and content_filter_raw) in each choice. In a stream it also sends chunks that hold
// nothing but verdicts: a first one with `choices: []` and empty id and model, and with
// asynchronous filtering ones with no delta. OpenAI sends none of these; clients that
// index choices[0] break on the empty first chunk, and the fields tell the channel.

// choiceFilterFields are the verdict members of a choice.
var choiceFilterFields = []string{"content_filter_results", "content_filter_offsets", "content_filter_raw"}

// topFilterFields are the verdict members of a chunk or an answer.
var topFilterFields = []string{"prompt_filter_results", "prompt_annotations"}

// mayHoldVerdicts is a quick test that spares parsing what holds no verdict.
func mayHoldVerdicts(b []byte) bool {
	return bytes.Contains(b, []byte("_filter_")) || bytes.Contains(b, []byte("prompt_annotations"))
}

// verdictOnly reports a chunk that carries no content of OpenAI's kind: the prompt
// verdict chunk, and the asynchronous filter's chunks with empty id and model and no
// delta.
func verdictOnly(chunk []byte) bool {
	r := gjson.ParseBytes(chunk)
	choices := r.Get("choices")
	if choices.IsArray() && len(choices.Array()) == 0 && !r.Get("usage").IsObject() &&
		(r.Get("prompt_filter_results").Exists() || r.Get("prompt_annotations").Exists()) {
		return true
	}
	if r.Get("id").String() != "" || r.Get("model").String() != "" {
		return false
	}
	for _, ch := range choices.Array() {
		if ch.Get("delta").Exists() {
			return false
		}
	}
	return choices.Exists()
}

// stripVerdicts removes the verdict members from a chat chunk or answer.
func stripVerdicts(obj []byte) []byte {
	for _, f := range topFilterFields {
		obj, _ = sjson.DeleteBytes(obj, f)
	}
	n := len(gjson.GetBytes(obj, "choices").Array())
	for i := range n {
		for _, f := range choiceFilterFields {
			obj, _ = sjson.DeleteBytes(obj, "choices."+itoa(i)+"."+f)
		}
	}
	return obj
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[n:])
		}
	}
}

// maxJSONAnswer bounds the answer lazyJSON holds to strip; a larger one goes as it came.
const maxJSONAnswer = 32 << 20

// lazyJSON strips the verdicts of a non-streamed chat answer. It reads the answer at its
// first Read, so the wait for it stays under the relay's own clock.
type lazyJSON struct {
	src  io.ReadCloser
	out  io.Reader
	done bool
}

func (l *lazyJSON) Read(p []byte) (int, error) {
	if !l.done {
		l.done = true
		b, err := io.ReadAll(io.LimitReader(l.src, maxJSONAnswer+1))
		switch {
		case err != nil:
			l.out = io.MultiReader(bytes.NewReader(b), errReader{err})
		case len(b) > maxJSONAnswer:
			l.out = io.MultiReader(bytes.NewReader(b), l.src)
		default:
			if mayHoldVerdicts(b) && protocols.ValidJSONObject(b) {
				b = stripVerdicts(b)
			}
			l.out = bytes.NewReader(b)
		}
	}
	return l.out.Read(p)
}

func (l *lazyJSON) Close() error { return l.src.Close() }

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// filterStream drops the verdict-only chunks of a chat stream and strips the verdicts
// of the others, one event at a time: a complete event is passed on as soon as its
// blank line arrives. An event larger than protocols.MaxEventSize turns it into a plain
// copy of the rest (the relay refuses such a stream anyway).
type filterStream struct {
	src     io.ReadCloser
	r       *bufio.Reader
	pending []byte // the lines of the event being read
	out     []byte // what is ready for the reader
	err     error  // the source's error, once pending has been flushed
	copying bool   // past an oversized event: bytes go as they come
}

func newFilterStream(src io.ReadCloser) *filterStream {
	return &filterStream{src: src, r: bufio.NewReaderSize(src, 16<<10)}
}

func (f *filterStream) Close() error { return f.src.Close() }

func (f *filterStream) Read(p []byte) (int, error) {
	for len(f.out) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		if f.copying {
			return f.r.Read(p)
		}
		f.step()
	}
	n := copy(p, f.out)
	f.out = f.out[n:]
	if len(f.out) == 0 {
		f.out = nil
	}
	return n, nil
}

// step reads one line (or what the buffer holds of it) and moves a complete event out.
func (f *filterStream) step() {
	line, err := f.r.ReadSlice('\n')
	f.pending = append(f.pending, line...)
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		if len(f.pending) > protocols.MaxEventSize {
			f.out, f.pending, f.copying = f.pending, nil, true
		}
		return
	case err != nil:
		if len(f.pending) > 0 {
			f.out = f.event(f.pending)
			f.pending = nil
		}
		f.err = err
		return
	}
	if len(line) == 1 || (len(line) == 2 && line[0] == '\r') { // the blank line ending an event
		f.out = f.event(f.pending)
		f.pending = f.pending[:0:0]
	}
}

// event is what goes on for one raw event: nothing for a verdict-only chunk, the chunk
// without its verdicts, or the event as it came.
func (f *filterStream) event(raw []byte) []byte {
	if !mayHoldVerdicts(raw) {
		return raw
	}
	lines := bytes.SplitAfter(raw, []byte("\n"))
	at := -1
	for i, l := range lines {
		if bytes.HasPrefix(l, []byte("data:")) {
			if at >= 0 {
				return raw // a data field over several lines: not Azure's chunk
			}
			at = i
		}
	}
	if at < 0 {
		return raw
	}
	l := lines[at]
	body := bytes.TrimRight(bytes.TrimPrefix(bytes.TrimPrefix(l, []byte("data:")), []byte(" ")), "\r\n")
	if !protocols.ValidJSONObject(body) {
		return raw
	}
	if verdictOnly(body) {
		return nil
	}
	var out bytes.Buffer
	for i, l := range lines {
		if i != at {
			out.Write(l)
			continue
		}
		out.WriteString("data: ")
		out.Write(stripVerdicts(body))
		out.Write(l[len(bytes.TrimRight(l, "\r\n")):]) // the line's own ending
	}
	return out.Bytes()
}
