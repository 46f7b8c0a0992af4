package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A write that fails in one package changes no package: leasegen ./...
// writes every new file beside its target first and renames them into
// place only when all were written, so a full disk or a missing permission
// found at the second package leaves the first one's stale output as it
// was (not regenerated while the other is not), and no temporary file.
func TestFailedWriteChangesNoPackage(t *testing.T) {
	dir := setup(t, good)
	mod := filepath.Dir(dir)
	t.Chdir(mod)
	other := filepath.Join(mod, "q")
	os.MkdirAll(other, 0o755)
	write(t, filepath.Join(other, "q.go"), strings.Replace(good, "package p", "package q", 1))
	if code, _, stderr := leasegen("./..."); code != 0 {
		t.Fatalf("leasegen ./... = %d: %s", code, stderr)
	}
	// Both outputs go stale.
	for _, d := range []string{dir, other} {
		src, _ := os.ReadFile(filepath.Join(d, filepath.Base(d)+".go"))
		write(t, filepath.Join(d, filepath.Base(d)+".go"), strings.Replace(string(src), "deadline=5s", "deadline=6s", 1))
	}
	before := map[string][]byte{}
	for _, d := range []string{dir, other} {
		before[d], _ = os.ReadFile(filepath.Join(d, "lease_gen.go"))
	}
	real := createTemp
	t.Cleanup(func() { createTemp = real })
	for _, failIn := range []string{dir, other} { // the first package written, then the last
		createTemp = func(d, pattern string) (*os.File, error) {
			if d == failIn {
				return nil, errors.New("disk full (test)")
			}
			return real(d, pattern)
		}
		code, _, stderr := leasegen("./...")
		if code != 1 || !strings.Contains(stderr, "disk full (test)") || !strings.Contains(stderr, "no generated file was changed (2 were to be)") {
			t.Fatalf("failing in %s: leasegen ./... = %d, stderr %q; want 1, the error, and that nothing changed", filepath.Base(failIn), code, stderr)
		}
		for _, d := range []string{dir, other} {
			after, _ := os.ReadFile(filepath.Join(d, "lease_gen.go"))
			if !bytes.Equal(after, before[d]) {
				t.Errorf("failing in %s: %s/lease_gen.go changed although another package's write failed", filepath.Base(failIn), filepath.Base(d))
			}
			if left, _ := filepath.Glob(filepath.Join(d, ".lease_gen.go.tmp*")); len(left) > 0 {
				t.Errorf("temporary files left behind: %v", left)
			}
		}
	}
	createTemp = real
	if code, _, stderr := leasegen("-v", "./..."); code != 0 || strings.Count(stderr, "wrote ") != 2 {
		t.Fatalf("leasegen -v ./... once writes work = %d: %s; want both written", code, stderr)
	}
	if code, stdout, _ := leasegen("-check", "./..."); code != 0 || stdout != "" {
		t.Fatalf("-check after regenerating = %d %q", code, stdout)
	}
}
