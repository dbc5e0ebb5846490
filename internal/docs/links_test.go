package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// root is the repository, seen from this package's directory.
const root = "../.."

// inlineLink matches [text](target) and ![alt](target), with an optional "title".
var inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// codeSpan matches inline code, whose brackets are text, not links.
var codeSpan = regexp.MustCompile("`+[^`]*`+")

// page is one markdown file: its prose lines (fenced code left out), each with its line
// number, and the anchors its headings make.
type page struct {
	prose   map[int]string
	anchors map[string]bool
}

func readPage(path string) (page, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return page{}, err
	}
	p := page{prose: map[int]string{}, anchors: map[string]bool{}}
	seen := map[string]int{}
	fenced := false
	for i, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		p.prose[i+1] = line
		if strings.HasPrefix(line, "#") {
			a := anchor(strings.TrimLeft(line, "#"))
			// GitHub numbers repeated headings: the second "x" is "x-1".
			if n := seen[a]; n > 0 {
				p.anchors[fmt.Sprintf("%s-%d", a, n)] = true
			} else {
				p.anchors[a] = true
			}
			seen[a]++
		}
	}
	return p, nil
}

// anchor is the id GitHub gives a heading: lower case, spaces to '-', and every other
// character but letters, digits, '-' and '_' dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.TrimSpace(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// pages lists the README and every page under docs/, relative to root.
func pages(t *testing.T) []string {
	t.Helper()
	found, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	list := []string{"README.md"}
	for _, f := range found {
		rel, err := filepath.Rel(root, f)
		if err != nil {
			t.Fatal(err)
		}
		list = append(list, rel)
	}
	return list
}

// brokenLinks returns, for the page at rel (relative to root), each relative link whose
// file or heading does not exist.
func brokenLinks(rel string) ([]string, error) {
	p, err := readPage(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	var broken []string
	for n, line := range p.prose {
		for _, m := range inlineLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			linked := p
			if file != "" {
				path := filepath.Join(root, filepath.Dir(rel), file)
				if _, err := os.Stat(path); err != nil {
					broken = append(broken, fmt.Sprintf("%s (line %d): %s: no such file", rel, n, target))
					continue
				}
				if frag == "" || !strings.HasSuffix(file, ".md") {
					continue
				}
				if linked, err = readPage(path); err != nil {
					return nil, err
				}
			}
			if frag != "" && !linked.anchors[frag] {
				broken = append(broken, fmt.Sprintf("%s (line %d): %s: no heading with that anchor", rel, n, target))
			}
		}
	}
	return broken, nil
}

// TestDocsLinksResolve fails on a link between the README and the docs pages that leads
// to a missing file or a missing heading.
func TestDocsLinksResolve(t *testing.T) {
	for _, rel := range pages(t) {
		broken, err := brokenLinks(rel)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range broken {
			t.Error(b)
		}
	}
}

// TestEveryDocsPageIsLinked fails when a page under docs/ is missing from the index
// (docs/README.md) or from the README's list of where to read on.
func TestEveryDocsPageIsLinked(t *testing.T) {
	for _, index := range []struct{ file, prefix string }{
		{"README.md", "docs/"},
		{"docs/README.md", ""},
	} {
		raw, err := os.ReadFile(filepath.Join(root, index.file))
		if err != nil {
			t.Fatal(err)
		}
		for _, rel := range pages(t)[1:] {
			name := filepath.Base(rel)
			if index.file == "docs/README.md" && name == "README.md" {
				continue
			}
			if !strings.Contains(string(raw), "]("+index.prefix+name+")") {
				t.Errorf("%s links no %s", index.file, rel)
			}
		}
	}
}

// The checker itself: GitHub's anchors for headings like the ones these pages use.
func TestAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		" Projects, budgets and rate limits":                 "projects-budgets-and-rate-limits",
		" Retries, the request deadline and the first event": "retries-the-request-deadline-and-the-first-event",
		" Metrics, latency, dashboards and logs":             "metrics-latency-dashboards-and-logs",
		" `max_body_memory` and snake_case":                  "max_body_memory-and-snake_case",
		" Issue 14's goal: 1.10×":                            "issue-14s-goal-110",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}
