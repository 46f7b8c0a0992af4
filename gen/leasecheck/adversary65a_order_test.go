package leasecheck_test

import (
	"testing"
)

// Finding (false negative), README order row: "two protected functions
// that take each other's leases (A→B and B→A), also through the package's
// functions they call (A→helper→B; not through func values or
// interfaces)". debit calls s.Audit (the wrapper of the package's
// protected function audit), and audit's body calls s.Credit: debit holds
// its lease while credit's is taken. credit calls s.Debit directly. No
// inversion is reported: leasecheck.go checkOrder stops at a wrapper call
// (an edge debit→audit) and never follows into the wrapped function's
// body, so debit→audit→credit is not seen as debit→credit.
func TestAdversary65aOrderThroughProtectedCallee(t *testing.T) {
	t.Parallel()
	results := orderResults()
	found := false
	for _, r := range results {
		if r.Pass.Pkg.Path() != "adversary65aordwrapper" {
			continue
		}
		for _, d := range r.Diagnostics {
			t.Logf("%s: %s", r.Pass.Fset.Position(d.Pos), d.Message)
			if d.Category == "order" {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("adversary65aordwrapper: no lock-order inversion reported for debit → Audit → audit → Credit while credit → Debit")
	}
}
