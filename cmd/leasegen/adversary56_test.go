package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasegen/leasegen/internal/gentest"
)

// The leased source moves out of q, but q keeps its test file: leasegen
// ./... must not exit 0 leaving q/lease_gen.go, which declares wrappers of
// functions that no longer exist (q would not compile). Held in an
// adversary round (56); kept as a regression.
func TestAdversary56_OrphanOutputBesideTests(t *testing.T) {
	dir := setup(t, good)
	mod := filepath.Dir(dir)
	q := filepath.Join(mod, "q")
	os.MkdirAll(q, 0o755)
	write(t, filepath.Join(q, "q.go"), strings.Replace(good, "package p", "package q", 1))
	write(t, filepath.Join(q, "q_test.go"), "package q\n\nimport \"testing\"\n\nfunc TestNothing(t *testing.T) {}\n")
	t.Chdir(mod)
	if code, _, stderr := leasegen("./..."); code != 0 {
		t.Fatalf("leasegen ./... = %d: %s", code, stderr)
	}
	os.Remove(filepath.Join(q, "q.go")) // moved to another package

	code, stdout, stderr := leasegen("./...")
	_, statErr := os.Stat(filepath.Join(q, "lease_gen.go"))
	cmd := exec.Command("go", "vet", "./q")
	cmd.Dir = mod
	cmd.Env = gentest.GoEnv()
	vetOut, vetErr := cmd.CombinedOutput()
	t.Logf("code %d stdout %q stderr %q stat %v vet %v %s", code, stdout, stderr, statErr, vetErr, vetOut)
	if statErr == nil && code == 0 && vetErr != nil {
		t.Errorf("leasegen ./... = 0 (stdout %q, stderr %q) and kept q/lease_gen.go, whose sources are gone; go vet ./q now fails:\n%s", stdout, stderr, vetOut)
	}
}
