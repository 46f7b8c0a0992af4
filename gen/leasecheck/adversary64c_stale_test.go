package leasecheck_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/leasegen/leasegen/gen/leasecheck"
)

// Adversary round 64c (was a false positive), README stale row:
// "`lease_gen.go` missing or out of date". A lease_gen.go that is current
// but checked out with CRLF line endings (git core.autocrlf=true, the
// default on Windows, GitHub's Windows runners included) is not stale. It
// was reported on every run: checkStale compared bytes, and the suggested
// fix rewrote the whole file to LF, which git turns back into CRLF at the
// next checkout; it now compares with CRLF read as LF. The Go toolchain and
// gofmt accept CRLF sources. The package adversary64ccrlf is stored with LF
// endings; the test copies it with lease_gen.go in CRLF, beside the
// runtime stubs, into a GOPATH of its own.
func TestAdversary64cStaleCRLFCheckout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	copyTree(t, filepath.Join(analysistest.TestData(), "src", "github.com"), filepath.Join(dir, "src", "github.com"))
	pkg := filepath.Join(dir, "src", "adversary64ccrlf")
	copyTree(t, filepath.Join(analysistest.TestData(), "src", "adversary64ccrlf"), pkg)
	gen := filepath.Join(pkg, "lease_gen.go")
	b, err := os.ReadFile(gen)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("\r\n")) {
		t.Fatal("testdata lease_gen.go already has CRLF endings")
	}
	if err := os.WriteFile(gen, bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	analysistest.Run(t, dir, leasecheck.Analyzer, "adversary64ccrlf")
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
}
