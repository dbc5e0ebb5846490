package channel

import (
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func untagAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(UntagMessageID(io.NopCloser(r), "bdrk"))
	require.NoError(t, err)
	return string(b)
}

func TestAMessageIDLosesTheChannelsTagWhateverTheReads(t *testing.T) {
	const message = `{"id":"msg_bdrk_01SK3xyz","type":"message","content":[{"type":"tool_use","id":"toolu_bdrk_01abc","input":{"id":"msg_bdrk_kept"}}]}`
	const want = `{"id":"msg_01SK3xyz","type":"message","content":[{"type":"tool_use","id":"toolu_bdrk_01abc","input":{"id":"msg_bdrk_kept"}}]}`
	const stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\": \"msg_bdrk_01Q\",\"type\":\"message\"}}\n\nevent: ping\ndata: {\"type\":\"ping\"}\n\n"
	for name, r := range map[string]func(s string) io.Reader{
		"whole":        func(s string) io.Reader { return strings.NewReader(s) },
		"byte by byte": func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
		"half":         func(s string) io.Reader { return iotest.HalfReader(strings.NewReader(s)) },
	} {
		assert.Equal(t, want, untagAll(t, r(message)), name+": only the message's own id, not a tool's")
		assert.Equal(t, strings.Replace(stream, "msg_bdrk_01Q", "msg_01Q", 1), untagAll(t, r(stream)), name)
	}
}

func TestAnAnswerWithoutATaggedIDPassesUnchanged(t *testing.T) {
	for _, s := range []string{
		`{"id":"msg_01plain","type":"message"}`,
		`{"id":"msg_vrtx_01other"}`,
		`{"type":"message","content":"` + strings.Repeat("x", 3000) + `","id":"msg_bdrk_late"}`,
		`{"id":"msg_bd`,
		``,
	} {
		assert.Equal(t, s, untagAll(t, iotest.OneByteReader(strings.NewReader(s))))
	}
}

// A stream's first event goes out as soon as its id is decided: the untagger does not
// wait to fill its window.
func TestAStreamsFirstEventIsNotHeldBack(t *testing.T) {
	pr, pw := io.Pipe()
	r := UntagMessageID(pr, "vrtx")
	go func() {
		_, _ = pw.Write([]byte("event: message_start\ndata: {\"message\":{\"id\":\"msg_vrtx_1\"}}\n\n"))
	}()
	buf := make([]byte, 256)
	n, err := r.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "event: message_start\ndata: {\"message\":{\"id\":\"msg_1\"}}\n\n", string(buf[:n]))
	_ = pw.Close()
}
