package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasegen/leasegen/gen"
	"github.com/leasegen/leasegen/internal/gentest"
)

// adv19Module writes a module with files (path -> content) and the
// lease_gen.go files leasegen generates for it.
func adv19Module(t *testing.T, files map[string]string) string {
	t.Helper()
	gentest.Env(t)
	mod := t.TempDir()
	gentest.WriteModule(t, mod)
	for name, src := range files {
		p := filepath.Join(mod, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := gen.Generate(gen.Config{Dir: mod, Patterns: []string{"./..."}})
	if err != nil {
		t.Fatalf("leasegen: %v", err)
	}
	for _, f := range out {
		if f.Data != nil {
			if err := os.WriteFile(f.Path, f.Data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return mod
}

// Found by round 19, fixed: a token reader that only the package's tests call is flagged
// (fence) in the package, and answered with //lease:ignore fence; in the
// package's test variant TestRead (exported) is a root, the finding is
// gone and the same suppression is reported as suppressing nothing. The
// user cannot get a clean run: with the ignore the test variant
// complains, without it the package does. Want exit 0.
func TestAdversary19TestVariantIgnore(t *testing.T) {
	t.Parallel()
	mod := adv19Module(t, map[string]string{
		"p/p.go": `package p

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

var lc *lease.Client

//lease:lock a deadline=5s client=lc
func job(ctx context.Context) error { return nil }

func Use(ctx context.Context) error { return Job(ctx) }

func readToken(ctx context.Context) lease.Token {
	//lease:ignore fence only the tests call it, with a context they build
	t, _ := lease.TokenFrom(ctx)
	return t
}
`,
		"p/p_test.go": `package p

import (
	"context"
	"testing"
)

func TestRead(t *testing.T) { _ = readToken(context.Background()) }
`,
	})
	var stderr bytes.Buffer
	if code := run(mod, []string{"./..."}, &stderr); code != 0 {
		t.Errorf("leasecheck ./... = %d, want 0\n%s", code, stderr.Bytes())
	}
}

const adv19A = `package a

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

var lc *lease.Client

//lease:lock k:{id} deadline=5s client=lc name=ChargeLocked
func Charge(ctx context.Context, id string) error { return nil }
`

const adv19B = `package b

import (
	"context"

	"example.com/golden/a"
)

func Use(ctx context.Context) error { return a.Charge(ctx, "x") }
`

const adv19C = `package c

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

//lease:lock x deadline=5s
func (s *S) debit(ctx context.Context) error { return s.Credit(ctx) }

//lease:lock y deadline=5s
func (s *S) credit(ctx context.Context) error { return s.Debit(ctx) }
`

// Held: a cross-package bypass is found by the plain driver and by go vet
// -vettool (facts cross the vet unit boundary). Also checks that the
// position inside the lock-order message is printed as the others are
// (relative to the working directory), not as an absolute path.
func TestAdversary19VetToolCrossPackage(t *testing.T) {
	t.Parallel()
	mod := adv19Module(t, map[string]string{"a/a.go": adv19A, "b/b.go": adv19B, "c/c.go": adv19C})
	var stderr bytes.Buffer
	if code := run(mod, []string{"./..."}, &stderr); code != 3 {
		t.Errorf("leasecheck ./... = %d, want 3\n%s", code, stderr.Bytes())
	}
	out := stderr.String()
	if !strings.Contains(out, "b/b.go:9:48: lease: call to Charge bypasses its lease: call ChargeLocked instead") {
		t.Errorf("driver: no cross-package bypass:\n%s", out)
	}
	if !strings.Contains(out, "c/c.go:12:57: lease: lock-order inversion") {
		t.Errorf("driver: no inversion:\n%s", out)
	}

	bin := filepath.Join(t.TempDir(), "leasecheck")
	if b, err := exec.Command("go", "build", gentest.ToolBuild, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, b)
	}
	cmd := exec.Command("go", "vet", "-vettool="+bin, "./...")
	cmd.Dir = mod
	vet, err := cmd.CombinedOutput()
	if err == nil {
		t.Errorf("go vet -vettool succeeded; want the bypass reported:\n%s", vet)
	}
	if !strings.Contains(string(vet), "b/b.go:9:48: lease: call to Charge bypasses its lease: call ChargeLocked instead") {
		t.Errorf("go vet: no cross-package bypass:\n%s", vet)
	}
}

// found by round 19, fixed (message): the lock-order message embeds the other call's
// position as an absolute path, while every diagnostic position is
// printed relative to the working directory (README, go build style).
func TestAdversary19OrderMessagePath(t *testing.T) {
	t.Parallel()
	mod := adv19Module(t, map[string]string{"c/c.go": adv19C})
	var stderr bytes.Buffer
	run(mod, []string{"./..."}, &stderr)
	if strings.Contains(stderr.String(), mod) {
		t.Errorf("absolute path in a finding:\n%s", stderr.Bytes())
	}
}
