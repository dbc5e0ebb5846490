package integration

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/internal/pdftest"
)

// TestAPDFIsReservedByItsPages: a key whose budget fits a request carrying a one-page PDF
// but not one carrying a 100-page PDF of a few KB (billed by its pages, some 460,000
// tokens, though its base64 is some 5,000 tokens of text). On each endpoint that takes an
// inline document (Messages' document block, chat's file part, Responses' input_file),
// the 100-page request is refused with the budget 429 before any upstream is called, and
// the one-page request is answered.
func TestAPDFIsReservedByItsPages(t *testing.T) {
	up := newUpstream(t)
	url := "http://" + up.hostport()
	const pdfKey = "sk-pdf-budget-key-0123456789ab"
	// Input at 1 a million tokens: the budget of 0.05 fits some 50,000 tokens.
	models := "\t\tmodel pdf-chat {\n\t\t\tprotocols family_a family_b\n\t\t\tprice input 1 output 1\n" +
		candidate("a", "family_a", url+"/v1", upstreamPrefix+"-pdf") + candidate("b", "family_b", url, upstreamPrefix+"-pdf") + "\t\t}\n"
	g := startGatewayWith(t, up, models, fmt.Sprintf("\t\tkey pdf-budgeted %s {\n\t\t\tbudget 0.05/day\n\t\t}\n", pdfKey))

	one := pdftest.Base64(1, pdftest.Options{Text: "one page"})
	hundred := pdftest.Base64(100, pdftest.Options{Text: "one of a hundred pages"})
	require.Less(t, len(hundred), 24<<10, "a small file: its base64 is no more than some 6,000 tokens of text")

	endpoints := []struct {
		name, path string
		family     string
		body       func(data string) string
		headers    []string
	}{
		{"messages", "/v1/messages", "b", func(data string) string {
			return `{"model":"pdf-chat","max_tokens":100,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"` +
				data + `"}},{"type":"text","text":"Summarise it."}]}]}`
		}, []string{"x-api-key", pdfKey, "anthropic-version", "2023-06-01"}},
		{"chat completions", "/v1/chat/completions", "a", func(data string) string {
			return `{"model":"pdf-chat","max_completion_tokens":100,"messages":[{"role":"user","content":[{"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,` +
				data + `"}},{"type":"text","text":"Summarise it."}]}]}`
		}, []string{"Authorization", "Bearer " + pdfKey}},
		{"responses", "/v1/responses", "a", func(data string) string {
			return `{"model":"pdf-chat","max_output_tokens":100,"input":[{"role":"user","content":[{"type":"input_file","filename":"a.pdf","file_data":"data:application/pdf;base64,` +
				data + `"},{"type":"input_text","text":"Summarise it."}]}]}`
		}, []string{"Authorization", "Bearer " + pdfKey}},
	}
	for _, ep := range endpoints {
		t.Run(ep.name, func(t *testing.T) {
			before := up.count()
			r := g.call(t, "POST", ep.path, ep.body(hundred), ep.headers...)
			if ep.family == "b" {
				e := familyB(t, r, 429, "rate_limit_error")
				assert.Equal(t, "budget_exceeded", e.Get("code").String())
			} else {
				e := familyA(t, r, 429, "insufficient_quota")
				assert.Equal(t, "budget_exceeded", e.Get("code").String())
			}
			assert.Equal(t, before, up.count(), "the refused request reached no upstream")

			r = g.call(t, "POST", ep.path, ep.body(one), ep.headers...)
			require.Equal(t, 200, r.Status, "the one-page request fits: %.400s", r.Body)
			require.Equal(t, before+1, up.count())
			assert.True(t, strings.Contains(string(up.last(t).Body), one), "the upstream got the document")
		})
	}
}
