package leasecheck_test

import (
	"strings"
	"sync"
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/leasegen/leasegen/gen/leasecheck"
)

// ignoreErrors lets a test look at the diagnostics itself (where a fix
// may put the other end is not pinned).
type ignoreErrors struct{}

func (ignoreErrors) Errorf(string, ...any) {}

// orderResults are the results of one run over the order tests' packages
// (each run type-checks the dependencies from source: see
// testdataPackages).
var orderResults = sync.OnceValue(func() []*analysistest.Result {
	return analysistest.Run(ignoreErrors{}, analysistest.TestData(), leasecheck.Analyzer, "adversary64cord", "adversary65aordwrapper")
})

// Adversary round 64c (was a false negative), README order row: "two
// protected functions that take each other's leases (A→B and B→A)". debit
// takes credit's lease through a helper (debit → s.settle → s.Credit) and
// credit takes debit's directly (s.Debit): a finding. checkOrder looked
// for wrapper calls in the protected function's own body only; it now
// follows the package functions the body calls.
func TestAdversary64cOrderThroughHelper(t *testing.T) {
	t.Parallel()
	results := orderResults()
	found := false
	for _, r := range results {
		if r.Pass.Pkg.Path() != "adversary64cord" {
			continue
		}
		for _, d := range r.Diagnostics {
			p := r.Pass.Fset.Position(d.Pos)
			if d.Category == "order" && strings.HasSuffix(p.Filename, "a.go") && p.Line == 26 {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("adversary64cord/a.go:26: no lock-order inversion reported for credit → Debit while debit → settle → Credit")
	}
}
