package caddymodule

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/switchyard-gw/switchyard/protocols"
)

// chatRequest builds a realistic chat completion body of about size bytes.
func chatRequest(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"bench-model","stream":false,"temperature":0.2,"messages":[{"role":"system","content":"You are terse."}`)
	chunk := `,{"role":"user","content":"` + strings.Repeat("lorem ipsum dolor sit amet ", 8) + `"}`
	for b.Len()+len(chunk) < size-2 {
		b.WriteString(chunk)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// BenchmarkHotPath measures what the gateway adds per request before the upstream call:
// key check, operation and model resolution with validation, and the request rewrite.
func BenchmarkHotPath(b *testing.B) {
	app := &App{
		Store: &StoreConfig{Driver: "off"},
		Keys:  []KeyConfig{{Name: "bench", Secret: "sk-bench-0123456789abcdef"}},
		Models: []ModelConfig{{
			ID: "bench-model",
			Candidates: []CandidateConfig{{
				Name: "c", Protocol: "family_a", URL: "http://127.0.0.1:9/v1", UpstreamModel: "upstream-bench-model",
			}},
		}},
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	if err := app.Provision(ctx); err != nil {
		b.Fatal(err)
	}
	authH, resolveH := &Auth{app: app}, &Model{app: app}
	var last protocols.Splice
	rewrite := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		rt := caddyhttp.GetVar(r.Context(), varRoute).(*route)
		if rt.parsed == nil {
			// A large body arrives in pieces, so its model is known before its end; the
			// proxy waits for the rest when it needs the whole body, as here.
			rt.parsed, _ = rt.body.Wait()
		}
		last, _ = rt.parsed.Upstream(rt.op, "upstream-bench-model", 0)
		return nil
	})
	chain := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		return resolveH.ServeHTTP(w, r, rewrite)
	})

	for _, size := range []struct {
		name string
		n    int
	}{{"2KB", 2 << 10}, {"1MB", 1 << 20}} {
		body := chatRequest(size.n)
		b.Run(size.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			w := httptest.NewRecorder()
			for b.Loop() {
				req := httptest.NewRequest("POST", "/v1/chat/completions", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer sk-bench-0123456789abcdef")
				c := context.WithValue(req.Context(), caddyhttp.VarsCtxKey, map[string]any{})
				c = context.WithValue(c, caddyhttp.ExtraLogFieldsCtxKey, new(caddyhttp.ExtraLogFields))
				if err := authH.ServeHTTP(w, req.WithContext(c), chain); err != nil {
					b.Fatal(err)
				}
			}
			if !bytes.HasPrefix(last.Bytes(), []byte(`{"model":"upstream-bench-model"`)) {
				b.Fatal("the body was not rewritten")
			}
		})
	}
}
