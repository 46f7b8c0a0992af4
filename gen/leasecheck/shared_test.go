package leasecheck_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/leasegen/leasegen/gen/leasecheck"
)

// testdataPackages are the testdata packages the tests check with runShared,
// all analyzed in one analysistest.Run. A run type-checks the packages'
// dependencies (context, sync, time and what they import) from source,
// several seconds under -race: one run per test took most of the package's
// time.
var testdataPackages = []string{
	"clean", "directives", "fencecheck", "escape", "order", "bypassuser", "testfiles", "decoratoronly",
	"leader", "nogenline", "genline", "genlinetab", "genlinetest", "genlinextest", "genlinetag",
	"adv19held", "adv19aliasctx", "adv19derived", "adv19heartbeat", "adv19closure", "adv19fanin",
	"adv19ordname", "adv19ordalias", "adv19generic", "adv19genuser", "adv19methodvalue",
	"adv21values", "adv21valuser", "adv21escheld", "adv21order", "adv21ignore", "adv21escdefault",
	"adv21escfirsterr", "adv21escvar", "adv21eschedged", "adv21escready", "adv21valiface",
	"adv21escfaninmisc", "adv21valfp", "adv21escfp",
	"adv31bescdefer", "adv31bfencelease", "adv31bescfanincontinue", "adv31bimporttestdecl",
	"adv31bfencederived", "adv33afterfunc",
	"adversary64cescarg", "adversary64cescclosure", "adversary64cescmethod", "adversary64cescargval", "adversary64cescrange", "adversary64cheld", "adversary64cfence", "adversary65aescasync", "adversary65aescinnerbreak", "adversary65aescsignal", "adversary65aheld",
}

// errorList records what analysistest reports.
type errorList struct {
	mu   sync.Mutex
	errs []string
}

func (l *errorList) Errorf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, fmt.Sprintf(format, args...))
}

var shared struct {
	once sync.Once
	errs []string
}

// runShared checks pkgs as analysistest.Run(t, analysistest.TestData(),
// leasecheck.Analyzer, pkgs...) does: it fails t with every error the
// shared run reported about one of pkgs (its files, or the package by
// name), and with every error that names no testdata package (a load
// failure).
func runShared(t *testing.T, pkgs ...string) {
	t.Helper()
	for _, p := range pkgs {
		if !slices.Contains(testdataPackages, p) {
			t.Fatalf("testdata package %s is not in testdataPackages (shared_test.go): add it there", p)
		}
	}
	shared.once.Do(func() {
		var l errorList
		analysistest.Run(&l, analysistest.TestData(), leasecheck.Analyzer, testdataPackages...)
		shared.errs = l.errs
	})
	for _, e := range shared.errs {
		if about := aboutPackages(e); len(about) == 0 || slices.ContainsFunc(about, func(p string) bool { return slices.Contains(pkgs, p) }) {
			t.Error(e)
		}
	}
}

// aboutPackages returns the testdata packages an analysistest error names:
// by a file (<pkg>/a.go, relative or under testdata/src), or as
// <analyzer>@<pkg>.
func aboutPackages(e string) []string {
	var out []string
	for _, p := range testdataPackages {
		file := strings.HasPrefix(e, p+"/") || strings.Contains(e, "/"+p+"/") || strings.Contains(e, " "+p+"/")
		act := strings.Contains(e, "@"+p+" ") || strings.Contains(e, "@"+p+":") || strings.HasSuffix(e, "@"+p)
		if file || act {
			out = append(out, p)
		}
	}
	return out
}
