package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	east "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/text"

	"github.com/leasegen/leasegen/internal/gentest"
)

// markdown is a Markdown file parsed as GitHub renders it (CommonMark with
// the GFM extensions: tables, strikethrough, autolinks, task lists).
type markdown struct {
	name   string
	src    []byte
	starts []int // byte offset of each line's start
	doc    ast.Node
}

func parseMarkdown(name string, src []byte) *markdown {
	m := &markdown{name: name, src: src, starts: []int{0}}
	for i, b := range src {
		if b == '\n' && i+1 < len(src) {
			m.starts = append(m.starts, i+1)
		}
	}
	md := goldmark.New(goldmark.WithExtensions(extension.GFM))
	m.doc = md.Parser().Parse(text.NewReader(src))
	return m
}

func readme(t *testing.T) *markdown {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(gentest.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return parseMarkdown("README.md", src)
}

// line returns the 1-based line holding byte offset off.
func (m *markdown) line(off int) int {
	return sort.Search(len(m.starts), func(i int) bool { return m.starts[i] > off })
}

// lines returns the source lines without their newlines.
func (m *markdown) lines() []string {
	return strings.Split(strings.TrimSuffix(string(m.src), "\n"), "\n")
}

var (
	fenceLine   = regexp.MustCompile("^ {0,3}(```|~~~)")
	headingLine = regexp.MustCompile(`^(#{1,6})\s+\S`)
	tableDelim  = regexp.MustCompile(`^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$`)
)

// intended finds the headings and tables as a reader of the plain text sees
// them: outside fences, where every line starting with ``` or ~~~ opens or
// closes one. It returns the 1-based lines of headings (with their level)
// and of table header rows.
func (m *markdown) intended() (headings map[int]int, tables []int) {
	headings = map[int]int{}
	in := false
	lines := m.lines()
	for i, l := range lines {
		if fenceLine.MatchString(l) {
			in = !in
			continue
		}
		if in {
			continue
		}
		if h := headingLine.FindStringSubmatch(l); h != nil {
			headings[i+1] = len(h[1])
		}
		if strings.HasPrefix(strings.TrimSpace(l), "|") && i+1 < len(lines) && tableDelim.MatchString(lines[i+1]) {
			tables = append(tables, i+1)
		}
	}
	return headings, tables
}

// renderProblems compares the intended headings and tables with what the
// renderer makes of them, one message per heading or table that does not
// render as one.
func (m *markdown) renderProblems() []string {
	wantHeadings, wantTables := m.intended()
	gotHeadings := map[int]int{}  // line -> level
	tableLines := map[int]bool{}  // lines holding text of a rendered table
	codeLines := map[int]string{} // line -> the kind of code block holding it
	ast.Walk(m.doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Heading:
			if n.Lines().Len() > 0 {
				gotHeadings[m.line(n.Lines().At(0).Start)] = n.Level
			}
		case *east.Table:
			ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
				if txt, ok := c.(*ast.Text); ok && entering {
					tableLines[m.line(txt.Segment.Start)] = true
				}
				return ast.WalkContinue, nil
			})
			return ast.WalkSkipChildren, nil
		case *ast.FencedCodeBlock, *ast.CodeBlock:
			kind := "a fenced code block"
			if _, ok := n.(*ast.CodeBlock); ok {
				kind = "an indented code block"
			}
			for i := 0; i < n.Lines().Len(); i++ {
				codeLines[m.line(n.Lines().At(i).Start)] = kind
			}
		}
		return ast.WalkContinue, nil
	})

	lines := m.lines()
	where := func(line int) string {
		if kind, ok := codeLines[line]; ok {
			return " (it is inside " + kind + ": is a fence above it left open? A closing fence is ``` alone on its line)"
		}
		return ""
	}
	var problems []string
	var headingNums []int
	for l := range wantHeadings {
		headingNums = append(headingNums, l)
	}
	sort.Ints(headingNums)
	for _, l := range headingNums {
		if got, ok := gotHeadings[l]; !ok || got != wantHeadings[l] {
			problems = append(problems, fmtProblem(m.name, l, "%q does not render as a level-%d heading%s", lines[l-1], wantHeadings[l], where(l)))
		}
	}
	for _, l := range wantTables {
		if !tableLines[l] {
			problems = append(problems, fmtProblem(m.name, l, "the table starting %q does not render as a table%s", lines[l-1], where(l)))
		}
	}
	return problems
}

func fmtProblem(name string, line int, format string, args ...any) string {
	return fmt.Sprintf("%s:%d: ", name, line) + fmt.Sprintf(format, args...)
}

// Every heading and every table of README.md renders as one. A code fence
// left open (for instance "``` text" on its closing line, which CommonMark
// reads as content) would turn the rest of the file into a code block.
func TestReadmeRenders(t *testing.T) {
	m := readme(t)
	headings, tables := m.intended()
	if len(headings) < 10 || len(tables) < 5 {
		t.Fatalf("README.md: found %d headings and %d tables in the text; expected at least 10 and 5", len(headings), len(tables))
	}
	for _, p := range m.renderProblems() {
		t.Error(p)
	}
}

// The check finds the mistake it is for: a fence closed by "``` text".
func TestRenderCheckFindsOpenFence(t *testing.T) {
	m := parseMarkdown("x.md", []byte("# T\n\n```go\nx := 1\n``` More text\n\n## Later\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"))
	got := strings.Join(m.renderProblems(), "\n")
	for _, want := range []string{
		`x.md:7: "## Later" does not render as a level-2 heading (it is inside a fenced code block`,
		`x.md:9: the table starting "| a | b |" does not render as a table (it is inside a fenced code block`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems:\n%s\nwant one starting %s", got, want)
		}
	}
	fixed := parseMarkdown("x.md", []byte("# T\n\n```go\nx := 1\n```\n\nMore text\n\n## Later\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"))
	if p := fixed.renderProblems(); len(p) != 0 {
		t.Errorf("problems in a correct file: %q", p)
	}
}

// anchor is the fragment GitHub gives a heading: lower case, punctuation
// other than '-' and '_' dropped, spaces as '-'.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Relative links and images in README.md point at files that exist, and
// links to #fragments at headings.
func TestReadmeLinks(t *testing.T) {
	m := readme(t)
	if got, want := anchor("Lock discipline at build time (`leasecheck`)"), "lock-discipline-at-build-time-leasecheck"; got != want {
		t.Fatalf("anchor = %q, want %q", got, want)
	}
	anchors := map[string]bool{}
	headings, _ := m.intended()
	lines := m.lines()
	for l := range headings {
		anchors[anchor(strings.TrimSpace(strings.TrimLeft(lines[l-1], "#")))] = true
	}
	var checked int
	ast.Walk(m.doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		var dest string
		switch n := n.(type) {
		case *ast.Link:
			dest = string(n.Destination)
		case *ast.Image:
			dest = string(n.Destination)
		default:
			return ast.WalkContinue, nil
		}
		if strings.HasPrefix(dest, "#") {
			checked++
			if !anchors[dest[1:]] {
				t.Errorf("README.md: link to %q: no heading has that anchor", dest)
			}
			return ast.WalkContinue, nil
		}
		path := dest
		if i := strings.IndexAny(path, "#?"); i >= 0 {
			path = path[:i]
		}
		if path == "" || strings.Contains(path, "://") || strings.HasPrefix(path, "mailto:") {
			return ast.WalkContinue, nil
		}
		checked++
		if _, err := os.Stat(filepath.Join(gentest.RepoRoot(), filepath.FromSlash(path))); err != nil {
			t.Errorf("README.md: link to %q: %v", dest, err)
		}
		return ast.WalkContinue, nil
	})
	if checked == 0 {
		t.Fatal("README.md: found no relative link to check (handoff.svg is one)")
	}
}
