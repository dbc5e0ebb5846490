// Package pdftest writes small valid PDFs of a given number of pages, for the tests of
// the page count that inline documents are reserved by.
package pdftest

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"fmt"
)

// Options shape the file written.
type Options struct {
	// ObjectStreams packs the page tree and pages into one Flate object stream (PDF 1.5),
	// indexed by a cross-reference stream, as most current writers do.
	ObjectStreams bool
	// RemovedByUpdate pages are taken out again by an incremental update appended to the
	// file: the pages stay written, the new page tree counts fewer.
	RemovedByUpdate int
	// Text is drawn on every page.
	Text string
}

// PDF writes a file of pages pages (at least one).
func PDF(pages int, o Options) []byte {
	pages = max(pages, 1)
	w := &writer{}
	w.buf.WriteString("%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
	// Objects: 1 catalog, 2 page tree, 3 font, 4 content, 5.. pages.
	content := fmt.Sprintf("BT /F1 12 Tf 72 720 Td (%s) Tj ET", o.Text)
	w.object(1, "<< /Type /Catalog /Pages 2 0 R >>")
	w.object(3, "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
	w.stream(4, "", []byte(content))
	tree := pageTree(pages, 5)
	if !o.ObjectStreams {
		w.object(2, tree)
		for i := range pages {
			w.object(5+i, page(2))
		}
		w.xrefTable(5+pages, 1)
	} else {
		// Object stream 5+pages holds the tree and the pages; the xref stream follows.
		packed := []int{2}
		bodies := []string{tree}
		for i := range pages {
			packed = append(packed, 5+i)
			bodies = append(bodies, page(2))
		}
		objStm := 5 + pages
		var index, data bytes.Buffer
		for i, n := range packed {
			fmt.Fprintf(&index, "%d %d ", n, data.Len())
			data.WriteString(bodies[i])
			data.WriteByte('\n')
		}
		first := index.Len()
		raw := append(index.Bytes(), data.Bytes()...)
		w.stream(objStm, fmt.Sprintf("/Type /ObjStm /N %d /First %d /Filter /FlateDecode", len(packed), first), deflate(raw))
		for i, n := range packed {
			w.compressed[n] = [2]int{objStm, i}
		}
		w.xrefStream(objStm + 1)
	}
	if o.RemovedByUpdate > 0 {
		kept := max(pages-o.RemovedByUpdate, 1)
		w.object(2, pageTree(kept, 5))
		w.updateXref(2)
	}
	return w.buf.Bytes()
}

// Base64 is PDF(pages, o) in base64, as a request carries it.
func Base64(pages int, o Options) string {
	return base64.StdEncoding.EncodeToString(PDF(pages, o))
}

func pageTree(pages, firstPage int) string {
	var kids bytes.Buffer
	for i := range pages {
		fmt.Fprintf(&kids, "%d 0 R ", firstPage+i)
	}
	return fmt.Sprintf("<< /Type /Pages /Kids [ %s] /Count %d >>", kids.String(), pages)
}

func page(parent int) string {
	return fmt.Sprintf("<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents 4 0 R >>", parent)
}

func deflate(b []byte) []byte {
	var out bytes.Buffer
	z := zlib.NewWriter(&out)
	z.Write(b)
	z.Close()
	return out.Bytes()
}

// writer keeps each object's offset for the cross-reference section.
type writer struct {
	buf        bytes.Buffer
	offsets    map[int]int
	compressed map[int][2]int // object: its object stream and index
	lastXref   int
	size       int
}

func (w *writer) object(n int, body string) {
	w.mark(n)
	fmt.Fprintf(&w.buf, "%d 0 obj\n%s\nendobj\n", n, body)
}

func (w *writer) stream(n int, dict string, data []byte) {
	w.mark(n)
	fmt.Fprintf(&w.buf, "%d 0 obj\n<< %s /Length %d >>\nstream\n", n, dict, len(data))
	w.buf.Write(data)
	w.buf.WriteString("\nendstream\nendobj\n")
}

func (w *writer) mark(n int) {
	if w.offsets == nil {
		w.offsets, w.compressed = map[int]int{}, map[int][2]int{}
	}
	w.offsets[n] = w.buf.Len()
	w.size = max(w.size, n+1)
}

// xrefTable writes a classic cross-reference table of objects 0 to size-1, and the
// trailer.
func (w *writer) xrefTable(size, root int) {
	w.lastXref = w.buf.Len()
	fmt.Fprintf(&w.buf, "xref\n0 %d\n0000000000 65535 f \n", size)
	for n := 1; n < size; n++ {
		fmt.Fprintf(&w.buf, "%010d 00000 n \n", w.offsets[n])
	}
	fmt.Fprintf(&w.buf, "trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n", size, root, w.lastXref)
}

// xrefStream writes object n as a cross-reference stream of every object so far.
func (w *writer) xrefStream(n int) {
	w.mark(n)
	var rows bytes.Buffer
	rows.Write([]byte{0, 0, 0, 0, 0, 0xff, 0xff})
	for i := 1; i <= n; i++ {
		if c, ok := w.compressed[i]; ok {
			rows.Write([]byte{2, 0, 0, byte(c[0] >> 8), byte(c[0]), byte(c[1] >> 8), byte(c[1])})
			continue
		}
		off := w.offsets[i]
		rows.Write([]byte{1, byte(off >> 24), byte(off >> 16), byte(off >> 8), byte(off), 0, 0})
	}
	w.lastXref = w.buf.Len()
	fmt.Fprintf(&w.buf, "%d 0 obj\n<< /Type /XRef /Size %d /W [1 4 2] /Root 1 0 R /Length %d >>\nstream\n", n, n+1, rows.Len())
	w.buf.Write(rows.Bytes())
	fmt.Fprintf(&w.buf, "\nendstream\nendobj\nstartxref\n%d\n%%%%EOF\n", w.lastXref)
}

// updateXref writes an update's cross-reference table for object n alone.
func (w *writer) updateXref(n int) {
	prev := w.lastXref
	w.lastXref = w.buf.Len()
	fmt.Fprintf(&w.buf, "xref\n0 1\n0000000000 65535 f \n%d 1\n%010d 00000 n \n", n, w.offsets[n])
	fmt.Fprintf(&w.buf, "trailer\n<< /Size %d /Root 1 0 R /Prev %d >>\nstartxref\n%d\n%%%%EOF\n", w.size, prev, w.lastXref)
}
