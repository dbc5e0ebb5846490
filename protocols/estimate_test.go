package protocols_test

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/internal/pdftest"
	"github.com/switchyard-gw/switchyard/protocols"
)

// estimate parses body as a request of family (it must pass) and estimates its input.
func estimate(t *testing.T, family protocols.Family, body string) int64 {
	t.Helper()
	_, err := protocols.ParseRequest(family, []byte(body))
	require.Nil(t, err, "the body is one a client may send")
	return protocols.EstimateInputTokens([]byte(body))
}

// chatUser is a chat body whose one user message has content (a JSON value).
func chatUser(content string) string {
	return `{"model":"m","messages":[{"role":"user","content":` + content + `}]}`
}

// ceil4 is n ASCII characters in tokens.
func ceil4(n int) int64 { return int64(n+3) / 4 }

// Text the old estimate left out (long runs without a space, read as base64) or counted
// at a byte a character: each body costs at least the tokens a tokenizer could make of it
// divided by four. A compact ASCII body counts each of its bytes at four a token; the
// cases below count some characters otherwise: raw is their bytes in the body, points
// the code points they count as, ascii the ASCII characters.
func TestEstimateCountsEveryText(t *testing.T) {
	cases := []struct {
		name               string
		content            string
		raw, points, ascii int
	}{
		{"300 KB without a space", `"` + strings.Repeat("x", 300_000) + `"`, 0, 0, 0},
		{"CJK", `"` + strings.Repeat("漢字", 50_000) + `"`, 300_000, 100_000, 0},
		{"emoji", `"` + strings.Repeat("😀", 50_000) + `"`, 200_000, 50_000, 0},
		{"escaped CJK", `"` + strings.Repeat(`\u6f22`, 50_000) + `"`, 300_000, 50_000, 0},
		{"escaped surrogate pairs", `"` + strings.Repeat(`\ud83d\ude00`, 50_000) + `"`, 600_000, 50_000, 0},
		{"escaped ASCII", `"` + strings.Repeat(`\u0041\n`, 40_000) + `"`, 320_000, 0, 80_000},
		{"a data: URL in a text part is text", `[{"type":"text","text":"data:image/png;base64,` + strings.Repeat("QUJD", 100_000) + `"}]`, 0, 0, 0},
		{"numbers are text too", `[{"type":"text","text":"see"}],"x":[` + strings.Repeat("1234567,", 40_000) + `0]`, 0, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := chatUser(c.content)
			want := ceil4(len(body)-c.raw+c.ascii) + int64(c.points)
			assert.Equal(t, want, estimate(t, protocols.FamilyA, body))
		})
	}
	assert.Greater(t, estimate(t, protocols.FamilyA, chatUser(cases[0].content)), int64(75_000), "300 KB of ASCII is 75,000 tokens or more")
}

// Any text, however its characters are chosen or written, meters at most four times its
// estimate: a byte-level tokenizer makes at most one token of each UTF-8 byte.
func TestEstimateBoundsAnyTextFourFold(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pools := [][]rune{{'a', ' ', '\n'}, {'漢', 'é'}, {'😀', '𝄞'}, {'a', '漢', '😀', '"', '\\', 0x01, 0x7f, '<'}}
	around := len(chatUser(`""`)) // the body around the text
	for range 300 {
		pool := pools[rng.IntN(len(pools))]
		var text strings.Builder
		for range rng.IntN(2000) {
			text.WriteRune(pool[rng.IntN(len(pool))])
		}
		content, err := json.Marshal(text.String()) // escapes some characters as \uXXXX
		require.NoError(t, err)
		est := estimate(t, protocols.FamilyA, chatUser(string(content)))
		assert.LessOrEqual(t, int64(len(text.String())+around), 4*est, "%q", text.String())
		assert.LessOrEqual(t, est, int64(utf8.RuneCountInString(text.String()))+ceil4(around), "never more than a token a character")
	}
}

// Media are found where each shape puts them and count by their own rule: an image as
// 1,600 tokens whatever its bytes, in place of its data or URL; audio and documents as
// the text of their base64. The bodies are compact ASCII: what is not an image's payload
// counts a token per four bytes.
func TestEstimateCountsMediaByWhereTheyAre(t *testing.T) {
	blob := strings.Repeat("QUJD", 250_000) // 1 MB of base64
	const img = protocols.ImageInputTokens
	cases := []struct {
		name   string
		family protocols.Family
		body   string
		// payloads are the images' data or URLs, which count as images, not text.
		payloads []string
	}{
		{"messages image block", protocols.FamilyB,
			`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + blob + `"}}]}]}`,
			[]string{blob}},
		{"messages image by URL", protocols.FamilyB,
			`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://x.test/a.png"}}]}]}`,
			[]string{"https://x.test/a.png"}},
		{"messages image in a tool result", protocols.FamilyB,
			`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + blob + `"}}]}]}]}`,
			[]string{blob}},
		{"messages document by URL is its URL as text", protocols.FamilyB,
			`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"url","url":"https://x.test/` + blob + `.pdf"}}]}]}`,
			nil},
		{"messages text document is text", protocols.FamilyB,
			`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"` + blob + `"}}]}]}`,
			nil},
		{"chat image_url data URL", protocols.FamilyA,
			chatUser(`[{"type":"text","text":"what is it"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + blob + `","detail":"high"}}]`),
			[]string{"data:image/png;base64," + blob}},
		{"chat two images by URL", protocols.FamilyA,
			chatUser(`[{"type":"image_url","image_url":{"url":"https://x.test/a.png"}},{"type":"image_url","image_url":{"url":"https://x.test/b.png"}}]`),
			[]string{"https://x.test/a.png", "https://x.test/b.png"}},
		{"chat audio is its base64 as text", protocols.FamilyA,
			chatUser(`[{"type":"input_audio","input_audio":{"data":"` + blob + `","format":"wav"}}]`),
			nil},
		{"chat file of text is its base64 as text", protocols.FamilyA,
			chatUser(`[{"type":"file","file":{"filename":"a.txt","file_data":"data:text/plain;base64,` + blob + `"}}]`),
			nil},
		{"responses input_image", protocols.FamilyA,
			`{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/jpeg;base64,` + blob + `"}]}]}`,
			[]string{"data:image/jpeg;base64," + blob}},
		{"responses input_file of text is its base64 as text", protocols.FamilyA,
			`{"model":"m","input":[{"role":"user","content":[{"type":"input_file","filename":"a.csv","file_data":"data:text/csv;base64,` + blob + `"}]}]}`,
			nil},
		{"responses image in a tool's output", protocols.FamilyA,
			`{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_image","image_url":"https://x.test/a.png"}]}]}`,
			[]string{"https://x.test/a.png"}},
		// An image-shaped object elsewhere is what it is to the model: text.
		{"an image block inside a tool's input is text", protocols.FamilyB,
			`{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"i","name":"n","input":{"type":"image","source":{"data":"` + blob + `"}}}]}]}`,
			nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			text := len(c.body)
			for _, p := range c.payloads {
				text -= len(p)
			}
			assert.Equal(t, ceil4(text)+int64(len(c.payloads))*img, estimate(t, c.family, c.body))
		})
	}
}

// A PDF is reserved by its pages, in each place a shape carries one: 4,600 tokens a page
// (its image and its text), or the text of its base64 when that is more. The same data
// anywhere else, or a document of another type, is the text it is.
func TestEstimateCountsPDFsByTheirPages(t *testing.T) {
	hundred := pdftest.Base64(100, pdftest.Options{ObjectStreams: true})
	one := pdftest.Base64(1, pdftest.Options{})
	messages := func(block string) string {
		return `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[` + block + `]}]}`
	}
	document := func(data string) string {
		return `{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"` + data + `"}}`
	}
	responses := func(part string) string {
		return `{"model":"m","input":[{"role":"user","content":[` + part + `]}]}`
	}
	inputFile := func(data string) string {
		return `{"type":"input_file","filename":"a.pdf","file_data":"data:application/pdf;base64,` + data + `"}`
	}
	chatFile := func(data string) string {
		return chatUser(`[{"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,` + data + `"}}]`)
	}
	const page = protocols.PDFPageInputTokens
	cases := []struct {
		name    string
		family  protocols.Family
		body    string
		payload string // the document's data as written, which counts as pages
		pages   int64
	}{
		{"messages document", protocols.FamilyB, messages(document(hundred)), hundred, 100},
		{"messages document of one page", protocols.FamilyB, messages(document(one)), one, 1},
		{"messages document in a tool result", protocols.FamilyB,
			messages(`{"type":"tool_result","tool_use_id":"t","content":[` + document(hundred) + `]}`), hundred, 100},
		{"chat file part", protocols.FamilyA, chatFile(hundred), "data:application/pdf;base64," + hundred, 100},
		{"chat file part of base64 alone", protocols.FamilyA,
			chatUser(`[{"type":"file","file":{"file_data":"` + hundred + `"}}]`), hundred, 100},
		{"chat file part with escaped slashes", protocols.FamilyA,
			chatFile(strings.ReplaceAll(hundred, "/", `\/`)), "data:application/pdf;base64," + strings.ReplaceAll(hundred, "/", `\/`), 100},
		{"responses input_file", protocols.FamilyA, responses(inputFile(hundred)), "data:application/pdf;base64," + hundred, 100},
		{"responses input_file in a tool's output", protocols.FamilyA,
			`{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":[` + inputFile(hundred) + `]}]}`,
			"data:application/pdf;base64," + hundred, 100},
		{"a PDF's data URL in a text part is text", protocols.FamilyA,
			chatUser(`[{"type":"text","text":"data:application/pdf;base64,` + hundred + `"}]`), "", 0},
		{"a PDF's base64 in a tool's input is text", protocols.FamilyB,
			messages(`{"type":"tool_use","id":"i","name":"n","input":` + document(hundred) + `}`), "", 0},
		{"a document of text in messages is text", protocols.FamilyB,
			messages(`{"type":"document","source":{"type":"text","media_type":"text/plain","data":"` + hundred + `"}}`), "", 0},
		{"a file by id is its id as text", protocols.FamilyA,
			responses(`{"type":"input_file","file_id":"file-abc"}`), "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := ceil4(len(c.body))
			if c.pages > 0 {
				want = ceil4(len(c.body)-len(c.payload)) + c.pages*page
			}
			assert.InDelta(t, want, estimate(t, c.family, c.body), 1)
		})
	}
	// A scanned document: few pages, many bytes. Its base64 as text is the larger.
	scanned := pdftest.Base64(2, pdftest.Options{Text: strings.Repeat("x", 200_000)})
	body := messages(document(scanned))
	assert.Equal(t, ceil4(len(body)), estimate(t, protocols.FamilyB, body))
	// The pages of every PDF in a request count together, up to MaxPDFPages.
	many := pdftest.Base64(3000, pdftest.Options{ObjectStreams: true})
	body = messages(document(many) + "," + document(many) + "," + document(many) + "," + document(many))
	assert.InDelta(t, ceil4(len(body)-4*len(many))+protocols.MaxPDFPages*page, estimate(t, protocols.FamilyB, body), 1)
}
