package leasecheck_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/leasegen/leasegen/gen/leasecheck"
)

// The testdata packages' lease_gen.go files were written by leasegen (run in
// GOPATH mode over testdata); the runtime packages there are stubs.
func TestAnalyzer(t *testing.T) {
	runShared(t,
		"clean", "directives", "fencecheck", "escape", "order", "bypassuser", "testfiles", "decoratoronly", "leader", "nogenline", "genline", "genlinetab", "genlinetest", "genlinextest", "genlinetag")
}

func TestSuggestedFixes(t *testing.T) {
	analysistest.RunWithSuggestedFixes(t, analysistest.TestData(), leasecheck.Analyzer, "bypass", "stale", "staleleader")
}
