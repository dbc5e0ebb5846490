package channel

import (
	"bytes"
	"io"
	"net/http"
)

// A Claude message id from Bedrock or Vertex carries the channel's tag (msg_bdrk_…,
// msg_vrtx_…), which would tell a client which channel served it. The message id is
// never sent back by a client, so it can lose its tag; tool-use ids (toolu_bdrk_…) are
// echoed in later turns and must stay as they are.

// untagWindow bounds how far into an answer the message id is looked for: it leads a
// Message object and the first event of a stream.
const untagWindow = 1 << 10

// UntagMessageID returns body with the first message id of an answer (a Message object,
// or an event stream whose message_start comes first) stripped of the channel's tag:
// "msg_" + tag + "_" becomes "msg_". Only the first `"id":` key within the first KiB is
// looked at, and bytes are held back only until it is decided, so a stream's first event
// is not delayed past its id.
func UntagMessageID(body io.ReadCloser, tag string) io.ReadCloser {
	return &untagger{src: body, tagged: []byte(`"msg_` + tag + `_`)}
}

// UntagAnswer puts UntagMessageID over a successful answer's body; its length is then
// no longer known in advance.
func UntagAnswer(resp *http.Response, tag string) {
	resp.Body = UntagMessageID(resp.Body, tag)
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
}

type untagger struct {
	src     io.ReadCloser
	tagged  []byte
	held    []byte // read but not yet given out, while the id is undecided
	out     []byte // decided bytes not yet given out
	decided bool
	err     error
}

func (u *untagger) Read(p []byte) (int, error) {
	for !u.decided && u.err == nil {
		if u.held == nil {
			u.held = make([]byte, 0, untagWindow)
		}
		n, err := u.src.Read(u.held[len(u.held):cap(u.held)])
		u.held = u.held[:len(u.held)+n]
		u.err = err
		u.decide(err != nil)
	}
	if !u.decided {
		u.decided, u.out, u.held = true, u.held, nil
	}
	if len(u.out) > 0 {
		n := copy(p, u.out)
		u.out = u.out[n:]
		return n, nil
	}
	if u.err != nil {
		return 0, u.err
	}
	return u.src.Read(p)
}

// decide looks for the id in what is held: once it is found (and fixed when tagged),
// once the window is passed, or once the body has ended, what is held goes out.
func (u *untagger) decide(ended bool) {
	h := u.held
	if i := bytes.Index(h, []byte(`"id":`)); i >= 0 {
		j := i + len(`"id":`)
		for j < len(h) && (h[j] == ' ' || h[j] == '\t' || h[j] == '\n' || h[j] == '\r') {
			j++
		}
		rest := h[j:]
		if len(rest) >= len(u.tagged) || ended {
			if bytes.HasPrefix(rest, u.tagged) {
				tagAt := j + len(`"msg_`)
				h = append(h[:tagAt:tagAt], h[j+len(u.tagged):]...)
			}
			u.decided, u.out, u.held = true, h, nil
			return
		}
	}
	if len(h) == cap(h) || ended {
		u.decided, u.out, u.held = true, h, nil
	}
}

func (u *untagger) Close() error { return u.src.Close() }
