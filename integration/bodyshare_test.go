package integration

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// heldUpload is a request whose body was only partly sent: it holds its body memory until
// the gateway answers or the test ends.
type heldUpload struct {
	mu     sync.Mutex
	status int
	body   []byte
	done   bool
}

func (u *heldUpload) answer() (int, []byte, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.status, u.body, u.done
}

// holdUpload declares a chat body of declared bytes for key and sends the first sendNow
// bytes of it, then nothing more.
func holdUpload(t *testing.T, g *gateway, key string, declared, sendNow int) *heldUpload {
	t.Helper()
	host := strings.TrimPrefix(g.base, "http://")
	conn, err := net.DialTimeout("tcp", host, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	body := `{"model":"chat-a","messages":[{"role":"user","content":"` + strings.Repeat("x", sendNow)
	_, err = conn.Write([]byte(rawRequestHead(host, key, "/v1/chat/completions", declared) + body[:sendNow]))
	require.NoError(t, err)
	u := &heldUpload{}
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		var b []byte
		status := 0
		if err == nil {
			b, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			status = resp.StatusCode
		}
		u.mu.Lock()
		u.status, u.body, u.done = status, b, true
		u.mu.Unlock()
	}()
	return u
}

// One key that opens slow uploads fills its own share of the body memory (half the
// ceiling by default) and is then refused with 429 in its family's envelope; another key
// still gets memory for its body and is served.
func TestOneKeysSlowUploadsLeaveBodyMemoryForOthers(t *testing.T) {
	const greedyKey = "sk-greedy-uploader-0123456789ab"
	up := newUpstream(t)
	// A 4 MiB ceiling: each key may hold 2 MiB of it.
	g := startGatewayWith(t, up, standardModels(up),
		"\t\tmax_request_body 1MiB\n\t\tmax_body_memory 4MiB\n\t\tkey greedy "+greedyKey+"\n")
	held := func() float64 {
		m, _ := g.scrapeMetrics(t)
		return m["switchyard_body_memory_bytes"]
	}

	// Each upload declares 1 MiB and sends 200 KiB: its buffer grows to 256 KiB, and
	// holds 448 KiB with the two it outgrew. Four fit in the key's 2 MiB; the fifth
	// cannot grow.
	const perUpload = (64 + 128 + 256) << 10
	var uploads []*heldUpload
	var refused *heldUpload
	for i := 0; i < 12 && refused == nil; i++ {
		uploads = append(uploads, holdUpload(t, g, greedyKey, 1<<20, 200<<10))
		require.Eventually(t, func() bool {
			for _, u := range uploads {
				if _, _, done := u.answer(); done {
					refused = u
					return true
				}
			}
			return held() >= float64(len(uploads)*perUpload)
		}, waitShort, pollEvery, "upload %d neither took its memory nor was refused", len(uploads))
	}
	require.NotNil(t, refused, "a key without limits held the whole ceiling")
	status, body, _ := refused.answer()
	e := envelope(t, &result{Status: status, Body: body}, "a", http.StatusTooManyRequests)
	assert.Equal(t, "key_body_memory_exceeded", e.Get("code").Str)
	assert.Contains(t, e.Get("message").Str, "share")
	assert.Len(t, uploads, 5, "four uploads fit in the key's half of the ceiling, the fifth did not")
	assert.LessOrEqual(t, held(), float64(2<<20), "the key holds no more than its share")

	// Another key still finds room, for a large body too, while the greedy key's uploads
	// hold their memory.
	big := `{"model":"chat-a","messages":[{"role":"user","content":"` + strings.Repeat("y", 300<<10) + `"}]}`
	r := g.bounded(t, "POST", "/v1/chat/completions", big)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, "chat.completion", gjson.GetBytes(r.Body, "object").Str)
	for _, u := range uploads[:4] {
		_, _, done := u.answer()
		assert.False(t, done, "the uploads within the share are still being received")
	}
}

// A body that fails its scan gives its memory back to the ceiling, whether it was read
// whole or forwarded while it arrived: forty broken bodies, together far more than the
// 1 MiB ceiling, leave it empty, and a body as large as fits is admitted after them.
func TestBodiesThatFailTheirScanGiveTheirMemoryBack(t *testing.T) {
	up := newUpstream(t)
	g := startGatewayWith(t, up, standardModels(up), "\t\tmax_request_body 1MiB\n\t\tmax_body_memory 1MiB\n")
	held := func() float64 {
		m, _ := g.scrapeMetrics(t)
		return m["switchyard_body_memory_bytes"]
	}
	for i := range 40 {
		size := 60 << 10 // read whole
		if i%2 == 1 {
			size = 200 << 10 // forwarded while it arrives
		}
		// The object is never closed.
		broken := `{"model":"chat-a","messages":[{"role":"user","content":"` + strings.Repeat("x", size) + `"}]`
		r := g.bounded(t, "POST", "/v1/chat/completions", broken)
		envelope(t, r, "a", http.StatusBadRequest)
	}
	assert.Eventually(t, func() bool { return held() == 0 }, waitShort, pollEvery, "the broken bodies still hold %v bytes", held())
	up.mu.Lock()
	for _, seen := range up.requests {
		assert.False(t, gjson.ValidBytes(seen.Body), "a broken body reached the upstream as a whole object")
	}
	up.mu.Unlock()

	// 400 KiB needs 64 + 128 + 256 KiB and its own buffer: most of the ceiling.
	whole := `{"model":"chat-a","messages":[{"role":"user","content":"` + strings.Repeat("y", 400<<10) + `"}]}`
	r := g.bounded(t, "POST", "/v1/chat/completions", whole)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
}
