package integration

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A body that declares more than max_request_body is refused on its Content-Length, before
// a byte of it is read: a client that asked for `100 Continue` gets the 413 instead, and
// sends nothing it would have wasted; one that sends at once is not read either.
func TestADeclaredBodyOverTheLimitIsRefusedBeforeItIsRead(t *testing.T) {
	up := newUpstream(t)
	g := startGatewayWith(t, up, standardModels(up), "\t\tmax_request_body 1MiB\n")
	host := strings.TrimPrefix(g.base, "http://")
	declared := 100 << 20

	for _, tc := range []struct {
		name, path string
		expect     bool
		fam        string
	}{
		{"expect 100-continue, Family A", "/v1/chat/completions", true, "a"},
		{"expect 100-continue, Family B", "/v1/messages", true, "b"},
		// No Expect: the client sends the start of its body at once and then waits; a
		// gateway that read the body would wait for the rest.
		{"body sent at once", "/v1/chat/completions", false, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.DialTimeout("tcp", host, 5*time.Second)
			require.NoError(t, err)
			defer conn.Close()
			require.NoError(t, conn.SetDeadline(time.Now().Add(callTimeout)))
			head := "POST " + tc.path + " HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/json\r\n" +
				"Authorization: Bearer " + testKey + "\r\nanthropic-version: 2023-06-01\r\n" +
				"Content-Length: " + strconv.Itoa(declared) + "\r\n"
			if tc.expect {
				head += "Expect: 100-continue\r\n"
			}
			head += "\r\n"
			if !tc.expect {
				head += `{"model":"chat-a","messages":[{"role":"user","content":"` + strings.Repeat("x", 64<<10)
			}
			_, err = conn.Write([]byte(head))
			require.NoError(t, err)

			br := bufio.NewReader(conn)
			// The status line itself, before Go's parser could fold a 1xx away.
			status, err := br.ReadString('\n')
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(status, "HTTP/1.1 413"), "the first thing back is the 413, got %q", status)
			resp, err := http.ReadResponse(bufio.NewReader(io.MultiReader(strings.NewReader(status), br)), nil)
			require.NoError(t, err)
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			e := envelope(t, &result{Status: resp.StatusCode, Header: resp.Header, Body: b}, tc.fam, http.StatusRequestEntityTooLarge)
			assert.Contains(t, e.Get("message").Str, strconv.Itoa(1<<20), "the message names the limit")
			assert.Zero(t, up.count(), "nothing reached the upstream")
		})
	}
}
