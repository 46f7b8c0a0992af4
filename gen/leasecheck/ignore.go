package leasecheck

import (
	"fmt"
	"go/ast"
	"slices"
	"strings"

	"golang.org/x/tools/go/analysis"

	"github.com/leasegen/leasegen/gen/directive"
)

// reporter reports diagnostics unless a //lease:ignore comment answers
// them: one naming the diagnostic's check, on the diagnostic's line or
// the line above, with a reason (the parser refuses one without). A
// suppression that answers nothing is reported too, so stale ones go.
type reporter struct {
	pass    *analysis.Pass
	ignores map[ignoreKey][]*ignore
	all     []*ignore
}

type ignoreKey struct {
	file  string
	line  int
	check string
}

type ignore struct {
	d    *directive.Directive
	used bool
}

func newReporter(pass *analysis.Pass, generated map[*ast.File]bool) *reporter {
	r := &reporter{pass: pass, ignores: map[ignoreKey][]*ignore{}}
	for _, f := range pass.Files {
		if generated[f] {
			continue
		}
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				d, _ := directive.Parse(c.Slash, c.Text) // errors: reported as directive problems
				if d == nil || d.Name != directive.Ignore {
					continue
				}
				ig := &ignore{d: d}
				p := pass.Fset.Position(c.Slash)
				for _, line := range []int{p.Line, p.Line + 1} {
					k := ignoreKey{p.Filename, line, d.Ignored}
					r.ignores[k] = append(r.ignores[k], ig)
				}
				r.all = append(r.all, ig)
			}
		}
	}
	return r
}

// report reports d unless a //lease:ignore for its category covers it.
func (r *reporter) report(d analysis.Diagnostic) {
	if slices.Contains(directive.IgnorableChecks, d.Category) {
		p := r.pass.Fset.Position(d.Pos)
		if igs := r.ignores[ignoreKey{p.Filename, p.Line, d.Category}]; len(igs) > 0 {
			for _, ig := range igs {
				ig.used = true
			}
			return
		}
	}
	r.pass.Report(d)
}

// unused reports suppressions that answered no diagnostic. In a package's
// test variant (its files with its _test.go files), one in a non-test file
// is left to the package itself: the tests' exported functions are roots
// of their own, so a finding it answers there may not arise here.
func (r *reporter) unused() {
	testVariant := false
	for _, f := range r.pass.Files {
		if strings.HasSuffix(r.pass.Fset.Position(f.FileStart).Filename, "_test.go") {
			testVariant = true
			break
		}
	}
	for _, ig := range r.all {
		if testVariant && !strings.HasSuffix(r.pass.Fset.Position(ig.d.Slash).Filename, "_test.go") {
			continue
		}
		if !ig.used {
			r.pass.Report(analysis.Diagnostic{Pos: ig.d.Slash, Category: "directive",
				Message: fmt.Sprintf("lease: //lease:ignore %s suppresses nothing here (it covers its own line and the next): remove it", ig.d.Ignored)})
		}
	}
}
