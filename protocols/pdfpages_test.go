package protocols

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/internal/pdftest"
)

// countPages counts file as a request carries it: base64 in a JSON string, written as
// encoding/json writes it ("\/" for none of its slashes) and declared a PDF or not.
func countPages(file []byte, declared bool) (int64, bool) {
	return pdfPages([]byte(base64.StdEncoding.EncodeToString(file)), declared, &pdfWork{inflateLeft: pdfInflateFloor})
}

// Generated files of known page counts: each is counted at its pages exactly, written
// plainly or packed into a compressed object stream; an incremental update that takes
// pages out counts the pages still written (the larger count).
func TestPDFPagesOfGeneratedFiles(t *testing.T) {
	cases := []struct {
		name  string
		pages int
		o     pdftest.Options
		want  int64
	}{
		{"one page", 1, pdftest.Options{}, 1},
		{"two pages", 2, pdftest.Options{}, 2},
		{"100 pages", 100, pdftest.Options{}, 100},
		{"1,000 pages", 1000, pdftest.Options{}, 1000},
		{"one page in an object stream", 1, pdftest.Options{ObjectStreams: true}, 1},
		{"100 pages in an object stream", 100, pdftest.Options{ObjectStreams: true}, 100},
		{"3,000 pages in an object stream", 3000, pdftest.Options{ObjectStreams: true}, 3000},
		{"an update removed 4 of 10", 10, pdftest.Options{RemovedByUpdate: 4}, 10},
		{"an update removed 4 of 10 in an object stream", 10, pdftest.Options{ObjectStreams: true, RemovedByUpdate: 4}, 10},
		{"a page of text", 3, pdftest.Options{Text: "Hello (world) 100% <<done>>"}, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pages, isPDF := countPages(pdftest.PDF(c.pages, c.o), false)
			assert.True(t, isPDF)
			assert.Equal(t, c.want, pages)
		})
	}
}

// However a client writes the base64 in its JSON (escaped slashes, MIME line breaks,
// \u escapes, the URL-safe alphabet, no padding), the same pages are read.
func TestPDFPagesWhateverTheBase64sWriting(t *testing.T) {
	file := pdftest.PDF(100, pdftest.Options{ObjectStreams: true})
	std := base64.StdEncoding.EncodeToString(file)
	var mime strings.Builder
	for i := 0; i < len(std); i += 76 {
		mime.WriteString(std[i:min(len(std), i+76)] + `\r\n`)
	}
	writings := map[string]string{
		"escaped slashes": strings.ReplaceAll(std, "/", `\/`),
		"MIME lines":      mime.String(),
		"u escapes":       strings.ReplaceAll(std, "A", `\u0041`),
		"URL-safe":        base64.RawURLEncoding.EncodeToString(file),
	}
	for name, s := range writings {
		t.Run(name, func(t *testing.T) {
			pages, isPDF := pdfPages([]byte(s), false, &pdfWork{inflateLeft: pdfInflateFloor})
			assert.True(t, isPDF)
			assert.Equal(t, int64(100), pages)
		})
	}
}

// objStm is an object stream holding body, deflated, with the dictionary entries given.
func objStm(entries string, body string) string {
	var z bytes.Buffer
	w := zlib.NewWriter(&z)
	w.Write([]byte(body))
	w.Close()
	return fmt.Sprintf("9 0 obj\n<< /Type /ObjStm /N 1 /First 0 %s >>\nstream\n%s\nendstream\nendobj\n", entries, z.String())
}

// Files written to hide their pages, or to make the count cost memory, time or a wrong
// number: each is counted at least at its pages, saturating at MaxPDFPages, or, when it
// cannot be read, at a page for every 10 bytes of the file.
func TestPDFPagesOfHostileFiles(t *testing.T) {
	page := "<</Type/Page>>"
	pages := func(n int) string { return strings.Repeat(page, n) }
	const head = "%PDF-1.7\n"
	cases := []struct {
		name     string
		file     string
		declared bool
		want     int64 // -1: counted by size, a page per 10 bytes
		notPDF   bool
	}{
		{"a page tree's count of 10^12", head + "<</Type/Pages/Count 1000000000000>>" + pages(3), false, MaxPDFPages, false},
		{"a count too long to keep", head + "<</Type/Pages/Count 000000000000000000000000000007>>", false, MaxPDFPages, false},
		{"a count larger than the pages written", head + "<</Count 40/Type/Pages>>" + pages(3), false, 40, false},
		{"an outline's count is no page count", head + "<</Type/Outlines/Count 4000>>" + pages(3), false, 3, false},
		{"100,000 page objects", head + pages(100_000), false, MaxPDFPages, false},
		{"names written with #xx", head + "<</Ty#70e/P#61ge>><</Type /Pag#65>>", false, 2, false},
		{"a comment between key and value", head + "<</Type %c\n/Page>>", false, 1, false},
		{"an unclosed string before the pages", head + "<</Title (open >>" + pages(5), false, 5, false},
		{"an unclosed dictionary before the pages", head + strings.Repeat("<<", 100_000) + pages(5), false, 5, false},
		{"pages after a stream of binary", head + "1 0 obj <</Length 6>> stream\n(<<%(\n\nendstream endobj " + pages(4), false, 4, false},
		{"pages in an object stream with an indirect length", head + objStm("/Filter /FlateDecode /Length 12 0 R", pages(7)), false, 7, false},
		{"pages in an object stream named by Fl in an array", head + objStm("/Filter [/Fl]", pages(7)), false, 7, false},
		{"pages in an uncompressed object stream", head + "9 0 obj <</Type/ObjStm>> stream\n" + pages(6) + "\nendstream", false, 6, false},
		{"an object stream that does not inflate", head + "9 0 obj <</Type/ObjStm/Filter/FlateDecode>> stream\nnot deflate at all\nendstream", false, -1, false},
		{"an object stream of another filter", head + "9 0 obj <</Type/ObjStm/Filter/LZWDecode>> stream\n" + pages(3) + "\nendstream", false, -1, false},
		{"an object stream with a predictor", head + objStm("/Filter /FlateDecode /DecodeParms <</Predictor 12>>", pages(3)), false, -1, false},
		{"a cut object stream", head + objStm("/Filter /FlateDecode", pages(50))[:60], false, -1, false},
		{"no page anywhere", head + strings.Repeat("x", 5000), false, -1, false},
		{"declared a PDF, without its header", pages(2) + strings.Repeat(" ", 100), true, -1, false},
		{"the header after where a reader looks", strings.Repeat(" ", 1100) + head + pages(3), false, 0, true},
		{"no header, not declared", "hello " + pages(3), false, 0, true},
		{"the header late in the window", strings.Repeat(" ", 1000) + head + pages(3), false, 3, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, isPDF := countPages([]byte(c.file), c.declared)
			if c.notPDF {
				assert.False(t, isPDF, "no PDF: counted as the text of its base64")
				return
			}
			assert.True(t, isPDF)
			want := c.want
			if want < 0 {
				want = min(int64(len(c.file)+9)/10, MaxPDFPages)
			}
			assert.Equal(t, want, got)
		})
	}
}

// An object stream that inflates without end (a deflate bomb) is read only as far as
// the bound, and the file is then counted as unreadable; another request is not short
// of room for it.
func TestPDFPagesInflateIsBounded(t *testing.T) {
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zero := make([]byte, 1<<20)
	for range 2 { // 2 MiB of zeros, some 2 KB deflated
		zw.Write(zero)
	}
	zw.Close()
	file := "%PDF-1.7\n9 0 obj <</Type/ObjStm/Filter/FlateDecode>> stream\n" + z.String() + "\nendstream endobj <</Type/Page>>"
	w := &pdfWork{} // no floor: the room is the file's own, some 20 KB
	s := []byte(base64.StdEncoding.EncodeToString([]byte(file)))
	pages, isPDF := pdfPages(s, false, w)
	assert.True(t, isPDF)
	assert.Equal(t, min(int64(len(file)+9)/10, MaxPDFPages), pages, "counted by its size")
	assert.LessOrEqual(t, w.inflateLeft, int64(0), "the room is used up, no more")
	assert.GreaterOrEqual(t, w.inflateLeft, int64(-len(w.out)))
	again, _ := pdfPages([]byte(base64.StdEncoding.EncodeToString(pdftest.PDF(5, pdftest.Options{ObjectStreams: true}))), false, w)
	assert.Equal(t, int64(5), again, "each file brings room of its own")
}

// Counting holds no copy of the file: a 1 MB file costs the memory a 16 KB one does.
func TestPDFPagesMemoryDoesNotGrowWithTheFile(t *testing.T) {
	// The least of several runs: TotalAlloc counts the whole process, and whatever else
	// allocates meanwhile (the runtime, another test) only ever adds to one run's figure.
	used := func(file []byte) uint64 {
		s := []byte(base64.StdEncoding.EncodeToString(file))
		least := uint64(math.MaxUint64)
		for range 7 {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			pdfPages(s, false, &pdfWork{inflateLeft: pdfInflateFloor})
			runtime.ReadMemStats(&after)
			least = min(least, after.TotalAlloc-before.TotalAlloc)
		}
		return least
	}
	small := []byte("%PDF-1.7\n" + strings.Repeat("<</Type/Page>> 1 0 obj stream\nendstream ", 16<<10/40))
	large := []byte("%PDF-1.7\n" + strings.Repeat("<</Type/Page>> 1 0 obj stream\nendstream ", 1<<20/40))
	require.Greater(t, len(large), 1<<20-64)
	assert.Less(t, used(large), uint64(64<<10), "no copy of 1 MB")
	assert.LessOrEqual(t, used(large), used(small)+4<<10)
}

// FuzzPDFPages: on any file, the page count never panics, stays within 1 and
// MaxPDFPages for a PDF, inflates no more than its room, and does not depend on how the
// base64 is written in the JSON (escaped slashes, MIME line breaks) nor on where the
// decoded file is cut into windows.
func FuzzPDFPages(f *testing.F) {
	// Small seeds: the minimizer's work grows with the square of an input's length.
	f.Add([]byte("%PDF-1.7\n1 0 obj <</Type/Pages/Kids[2 0 R]/Count 1>> endobj 2 0 obj <</Type/Page/Parent 1 0 R>> endobj"), false)
	f.Add([]byte("%PDF-1.7\n"+objStm("/Filter /FlateDecode /Length 40", "<</Type/Pages/Count 2>> <</Type/Page>>")), false)
	f.Add([]byte("%PDF-1.4 <</Type/Pages/Count 99999999999999999999>> <</Ty#70e/Page>>"), true)
	f.Add([]byte("%PDF-1.5 9 0 obj <</Type/ObjStm/Filter[/FlateDecode]/Length 3 0 R>> stream\r\nx\x9c\x03\x00\x00\x00\x00\x01 endstream"), false)
	f.Fuzz(func(t *testing.T, file []byte, declared bool) {
		std := base64.StdEncoding.EncodeToString(file)
		// A smaller floor than the gateway's keeps each run quick on a deflate bomb.
		const room = 256 << 10
		w := &pdfWork{inflateLeft: room}
		pages, isPDF := pdfPages([]byte(std), declared, w)
		if isPDF && (pages < 1 || pages > MaxPDFPages) {
			t.Fatalf("%d pages", pages)
		}
		if !isPDF && (declared || pages != 0) {
			t.Fatalf("a declared PDF is one; a file that is none has no pages: %v %d", isPDF, pages)
		}
		if w.inflateLeft < -int64(len(w.out)) {
			t.Fatalf("inflated past the room: %d", w.inflateLeft)
		}
		var written strings.Builder
		for i, c := range std {
			if i%61 == 60 {
				written.WriteString(`\r\n`)
			}
			if c == '/' {
				written.WriteString(`\/`)
				continue
			}
			written.WriteRune(c)
		}
		// In a window of a few bytes, every token and stream is cut somewhere.
		window := 8 + len(file)%29
		again, isAgain := pdfPagesIn([]byte(written.String()), declared, &pdfWork{inflateLeft: room}, window)
		if again != pages || isAgain != isPDF {
			t.Fatalf("written otherwise, read %d bytes at a time: %d pages, %v; plainly: %d, %v", window, again, isAgain, pages, isPDF)
		}
	})
}

// A body of many small documents allocates once for all of them, not once each.
func TestManyDocumentsAllocateOnce(t *testing.T) {
	doc := `{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"` +
		base64.StdEncoding.EncodeToString([]byte("%PDF-1.7\n"+objStm("/Filter /FlateDecode", "<</Type/Page>>"))) + `"}}`
	body := func(n int) []byte {
		return []byte(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[` + strings.Repeat(doc+",", n-1) + doc + `]}]}`)
	}
	var tokens int64
	few, many := body(2), body(1000)
	// A collection now and then costs the runtime a few allocations of its own inside
	// a measured call, so the averages are taken over many calls and allowed one apart;
	// an allocation per file would put them a thousand apart.
	allocsFew := testing.AllocsPerRun(50, func() { tokens = EstimateInputTokens(few) })
	allocsMany := testing.AllocsPerRun(50, func() { tokens = EstimateInputTokens(many) })
	assert.InDelta(t, allocsFew, allocsMany, 1, "the same allocations for 2 files as for 1,000")
	assert.LessOrEqual(t, allocsMany, float64(8))
	assert.Greater(t, tokens, int64(1000*PDFPageInputTokens-1), "each of the 1,000 one-page files counts its page")
}
