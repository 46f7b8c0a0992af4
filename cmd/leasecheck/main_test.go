package main

import (
	"bytes"
	"errors"
	"fmt"
	"go/scanner"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasegen/leasegen/gen"
	"github.com/leasegen/leasegen/internal/gentest"
)

const mistake = `package %s

import "context"

//lease:lock k:{idd} deadline=5s
func f(ctx context.Context, id string) error { return nil }
`

// The tests, each loading and analyzing a module of its own (the slowest
// also builds the tool and runs go vet), run in parallel (gentest.Main).
func TestMain(m *testing.M) { os.Exit(gentest.Main(m)) }

// Two packages with the same mistake in files of the same name: leasecheck
// and leasegen print the same positions, relative to the working directory
// as go build does, so each line says which package's m.go it means.
func TestPositionsAsGoBuildAndLeasegen(t *testing.T) {
	t.Parallel()
	gentest.Env(t)
	mod := t.TempDir()
	gentest.WriteModule(t, mod)
	for _, p := range []string{"a", "b"} {
		os.MkdirAll(filepath.Join(mod, p), 0o755)
		if err := os.WriteFile(filepath.Join(mod, p, "m.go"), fmt.Appendf(nil, mistake, p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ dir, pattern string }{{mod, "./..."}, {filepath.Join(mod, "a"), "."}} {
		var stderr bytes.Buffer
		if code := run(c.dir, []string{c.pattern}, &stderr); code != 3 {
			t.Fatalf("leasecheck %s in %s = %d, want 3 (findings)\n%s", c.pattern, c.dir, code, stderr.Bytes())
		}
		_, err := gen.Generate(gen.Config{Dir: c.dir, Patterns: []string{c.pattern}})
		var list scanner.ErrorList
		if !errors.As(err, &list) {
			t.Fatalf("leasegen: %v", err)
		}
		var want strings.Builder
		for _, e := range list {
			fmt.Fprintln(&want, e)
		}
		if stderr.String() != want.String() {
			t.Errorf("in %s:\nleasecheck printed\n%sleasegen printed\n%s", c.dir, stderr.Bytes(), want.String())
		}
		if c.pattern == "./..." && !strings.Contains(stderr.String(), "a/m.go:5:16: lease: key part {idd}: no parameter idd (did you mean id?)\nb/m.go:5:16:") {
			t.Errorf("from the module root: %s; want a/m.go and b/m.go", stderr.Bytes())
		}
		if c.pattern == "." && !strings.HasPrefix(stderr.String(), "m.go:5:16: ") {
			t.Errorf("in package a: %s; want m.go:5:16", stderr.Bytes())
		}
	}
}
