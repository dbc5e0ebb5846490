package simulator

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// Account identifiers that the account-headers behaviour sends in its response headers
// (anthropic-organization-id, openai-organization, openai-project) and repeats in its error
// messages. They are shaped like the real ones of Anthropic (UUIDs), not like `org-…`, so a
// gateway can only hide them by treating the upstream's own header values as secrets.
const (
	AccountOrganization = "6f1c2b9e-3d4a-4e8b-9c71-2a5d0f8e4b13"
	AccountProject      = "a94e7c20-5b1f-4d63-8e2a-7c0b9d4f1e58"
)

// Sizes of the oversized answers: one SSE event above 8 MiB, one JSON body above 64 MiB.
const (
	HugeEventSize = 9 << 20
	HugeJSONSize  = 65 << 20
)

// isSideEndpoint reports whether ep is one of the stateless side operations that some
// providers do not offer.
func (ep endpoint) isSideEndpoint() bool {
	return ep == epCountTokens || ep == epInputTokens || ep == epCompact
}

// setAccountHeaders replaces the placeholder account headers with UUID-shaped ones.
func (c *call) setAccountHeaders() {
	h := c.w.Header()
	h.Set("anthropic-organization-id", AccountOrganization)
	h.Set("openai-organization", AccountOrganization)
	h.Set("openai-project", AccountProject)
}

// whoAmI is what a careless upstream tells about the request it got: the model it was
// asked for, the host it was called on, the credential it was given and its account.
func (c *call) whoAmI() string {
	cred := c.r.Header.Get("x-api-key")
	if token, ok := strings.CutPrefix(c.r.Header.Get("Authorization"), "Bearer "); ok {
		cred = token
	}
	h := c.w.Header()
	return fmt.Sprintf("model %s on %s, credential %s, organization %s, project %s",
		c.model, c.r.Host, cred, h.Get("openai-organization"), h.Get("openai-project"))
}

// brokenAnswer applies the behaviours that answer with something a client must never see:
// an HTML page with status 200, a redirect with a body, a JSON body that does not parse, a
// JSON body too large to hold. It reports whether it answered.
func (c *call) brokenAnswer(streaming bool) bool {
	switch {
	case c.beh.html200:
		c.writeRaw(http.StatusOK, "text/html; charset=utf-8", c.htmlPage("Sign in to continue"))
	case c.beh.redirect:
		c.w.Header().Set("Location", "http://"+c.r.Host+"/login?org="+c.w.Header().Get("openai-organization"))
		c.writeRaw(http.StatusFound, "text/html; charset=utf-8", c.htmlPage("Moved"))
	case c.beh.badJSON:
		// Complete (its length is declared and sent) but not JSON.
		c.writeRaw(http.StatusOK, "application/json",
			`{"id":"`+newID("chatcmpl-")+`","model":"`+c.model+`","note":"`+c.whoAmI()+`",<html>`)
	case c.beh.hugeJSON && !streaming:
		c.writeHugeJSON()
	default:
		return false
	}
	return true
}

func (c *call) htmlPage(title string) string {
	return "<!DOCTYPE html>\n<html><head><title>" + title + "</title></head><body><h1>" + title +
		"</h1><p>" + c.whoAmI() + "</p></body></html>\n"
}

func (c *call) writeRaw(status int, contentType, body string) {
	h := c.w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	c.w.WriteHeader(status)
	_, _ = c.w.Write([]byte(body))
}

// writeHugeJSON sends a valid JSON object of more than HugeJSONSize bytes, without a declared
// length and without holding it in memory.
func (c *call) writeHugeJSON() {
	c.w.Header().Set("Content-Type", "application/json")
	c.w.WriteHeader(http.StatusOK)
	if _, err := c.w.Write([]byte(`{"id":"` + newID("chatcmpl-") + `","model":"` + c.model + `","padding":"`)); err != nil {
		return
	}
	piece := []byte(strings.Repeat("a", 64<<10))
	for sent := 0; sent < HugeJSONSize; sent += len(piece) {
		if _, err := c.w.Write(piece); err != nil {
			return
		}
	}
	_, _ = c.w.Write([]byte(`"}`))
}

// resetConnection aborts the connection with a TCP reset before any byte of the answer.
func (c *call) resetConnection() {
	conn, _, err := http.NewResponseController(c.w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0) // close sends RST instead of FIN
	}
	_ = conn.Close()
}
