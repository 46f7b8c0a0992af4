package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/internal/gentest"
)

const good = `package p

import "context"

//lease:lock k:{id} deadline=5s
func work(ctx context.Context, id string) error { return nil }
`

// setup writes a module with one package p and chdirs into it.
func setup(t *testing.T, src string) string {
	t.Helper()
	gentest.Env(t)
	mod := t.TempDir()
	gentest.WriteModule(t, mod)
	dir := filepath.Join(mod, "p")
	os.MkdirAll(dir, 0o755)
	write(t, filepath.Join(dir, "p.go"), src)
	t.Chdir(dir)
	return dir
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func leasegen(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{{"-nope"}, {"-o", "dir/x.go"}, {"-o", "x_test.go"}, {"-o", "x.txt"}} {
		if code, _, _ := leasegen(args...); code != 2 {
			t.Errorf("leasegen %v = %d, want 2", args, code)
		}
	}
}

func TestGenerateCheckAndSkipUnchanged(t *testing.T) {
	dir := setup(t, good)
	out := filepath.Join(dir, "lease_gen.go")

	if code, stdout, _ := leasegen("-check"); code != 1 || strings.TrimSpace(stdout) != "lease_gen.go" {
		t.Fatalf("-check before generating = %d %q; want 1 naming lease_gen.go", code, stdout)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("-check wrote a file")
	}
	if code, _, stderr := leasegen(); code != 0 {
		t.Fatalf("leasegen = %d: %s", code, stderr)
	}
	first, _ := os.Stat(out)
	if code, stdout, _ := leasegen("-check"); code != 0 || stdout != "" {
		t.Fatalf("-check when current = %d %q; want 0 and nothing", code, stdout)
	}
	time.Sleep(10 * time.Millisecond)
	leasegen()
	second, _ := os.Stat(out)
	if !second.ModTime().Equal(first.ModTime()) {
		t.Fatal("an unchanged file was rewritten")
	}
	if b, err := exec.Command("go", "build", ".").CombinedOutput(); err != nil {
		t.Fatalf("generated package does not build: %v\n%s", err, b)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".lease_gen.go.tmp*"))
	if len(left) > 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
}

// Errors write nothing: an existing generated file stays byte for byte.
func TestErrorsLeaveFilesUntouched(t *testing.T) {
	dir := setup(t, good)
	if code, _, stderr := leasegen(); code != 0 {
		t.Fatalf("leasegen = %d: %s", code, stderr)
	}
	out := filepath.Join(dir, "lease_gen.go")
	before, _ := os.ReadFile(out)
	write(t, filepath.Join(dir, "p.go"), strings.Replace(good, "deadline=5s", "deadline=5s tll=1s", 1))
	code, _, stderr := leasegen()
	if code != 1 || !strings.Contains(stderr, `p.go:5:33: lease: unknown option "tll" (did you mean ttl?)`) {
		t.Fatalf("leasegen = %d, stderr %q; want 1 and a positioned error", code, stderr)
	}
	after, _ := os.ReadFile(out)
	if !bytes.Equal(before, after) {
		t.Fatal("the generated file changed although generation failed")
	}
}

// genericSrc has a generic target: its tie is an instantiation.
const genericSrc = `package p

import "context"

//lease:lock k:{id} deadline=5s
func work[T any](ctx context.Context, id string, v T) error { return nil }
`

// A signature change makes the stale output fail to compile, saying why,
// for plain and generic targets alike. The change keeps the wrapper's own
// body valid (an added result would not), so only the tie can catch it.
func TestStaleOutputFailsToCompile(t *testing.T) {
	for _, c := range []struct{ name, src, from, to string }{
		{"func", good, "id string", "id string, opts ...string"},
		{"generic", genericSrc, "v T)", "v T, opts ...string)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := setup(t, c.src)
			if code, _, stderr := leasegen(); code != 0 {
				t.Fatalf("leasegen = %d: %s", code, stderr)
			}
			write(t, filepath.Join(dir, "p.go"), strings.Replace(c.src, c.from, c.to, 1))
			b, err := exec.Command("go", "build", ".").CombinedOutput()
			if err == nil {
				t.Fatal("stale generated code still compiles")
			}
			if !strings.Contains(string(b), "lease_gen.go") {
				t.Fatalf("build error does not point at the generated file:\n%s", b)
			}
			// Regeneration works although the stale file is broken (-tags leasegen).
			if code, _, stderr := leasegen(); code != 0 {
				t.Fatalf("regenerating over stale output = %d: %s", code, stderr)
			}
			if b, err := exec.Command("go", "build", ".").CombinedOutput(); err != nil {
				t.Fatalf("after regeneration: %v\n%s", err, b)
			}
		})
	}
}

func TestRemovesOutputWhenNoDirectivesLeft(t *testing.T) {
	dir := setup(t, good)
	leasegen()
	write(t, filepath.Join(dir, "p.go"), strings.Replace(good, "//lease:lock k:{id} deadline=5s\n", "", 1))
	if code, _, stderr := leasegen(); code != 0 {
		t.Fatalf("leasegen = %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "lease_gen.go")); !os.IsNotExist(err) {
		t.Fatal("lease_gen.go kept after its last directive was removed")
	}
}

func TestRefusesToOverwriteForeignFile(t *testing.T) {
	dir := setup(t, good)
	write(t, filepath.Join(dir, "lease_gen.go"), "package p\n\n// hand-written\n")
	code, _, stderr := leasegen()
	if code != 1 || !strings.Contains(stderr, "not generated by leasegen") {
		t.Fatalf("leasegen = %d %q; want a refusal", code, stderr)
	}
}

// go.mod's tool directive makes "go tool leasegen" work, as the README says.
func TestGoToolLeasegen(t *testing.T) {
	dir := setup(t, good+"\n//go:generate go tool leasegen\n")
	mod := filepath.Dir(dir)
	tool := exec.Command("go", "mod", "edit", "-tool=github.com/leasegen/leasegen/cmd/leasegen")
	tool.Dir = mod
	if b, err := tool.CombinedOutput(); err != nil {
		t.Fatalf("go mod edit -tool: %v\n%s", err, b)
	}
	tidy := exec.Command("go", "mod", "tidy")
	tidy.Dir = mod
	if b, err := tidy.CombinedOutput(); err != nil {
		t.Fatalf("go mod tidy: %v\n%s", err, b)
	}
	if b, err := exec.Command("go", "generate", ".").CombinedOutput(); err != nil {
		t.Fatalf("go generate with go tool leasegen: %v\n%s", err, b)
	}
	if _, err := os.Stat(filepath.Join(dir, "lease_gen.go")); err != nil {
		t.Fatal("go tool leasegen wrote no file")
	}
}

// A warning is printed with its position, the file is still written, and
// the exit status stays 0.
func TestWarningsExitZero(t *testing.T) {
	dir := setup(t, strings.Replace(good, "deadline=5s", "ttl=3s deadline=5s wait=4s", 1))
	code, _, stderr := leasegen()
	if code != 0 {
		t.Fatalf("leasegen = %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "p.go:5:40: warning: lease: wait 4s can never be used in full: waiting stops after 3.25s") {
		t.Fatalf("stderr %q; want the positioned wait warning", stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "lease_gen.go")); err != nil {
		t.Fatal("no file written despite only a warning")
	}
}

// A directive the tools cannot read is an error, and leasegen keeps the
// generated file it can no longer justify instead of deleting it (the build
// would then fail with "undefined" far from the cause).
func TestNearMissKeepsGeneratedFile(t *testing.T) {
	dir := setup(t, good)
	if code, _, stderr := leasegen(); code != 0 {
		t.Fatalf("leasegen = %d: %s", code, stderr)
	}
	out := filepath.Join(dir, "lease_gen.go")
	before, _ := os.ReadFile(out)
	write(t, filepath.Join(dir, "p.go"), strings.Replace(good, "//lease:lock", "//Lease:Lock", 1))
	code, _, stderr := leasegen()
	if code != 1 || !strings.Contains(stderr, `p.go:5:1: lease: malformed directive "//Lease:Lock": directives are lower case (write //lease:lock)`) {
		t.Fatalf("leasegen = %d, stderr %q; want 1 and the near-miss error", code, stderr)
	}
	after, err := os.ReadFile(out)
	if err != nil || !bytes.Equal(before, after) {
		t.Fatalf("the generated file was removed or changed (%v)", err)
	}
}

// go generate starts leasegen in the package's directory: positions are
// then relative to the module root, so that they say which package's m.go
// is meant (go generate ./... from the root prints them as go build would).
func TestPositionsUnderGoGenerate(t *testing.T) {
	dir := setup(t, strings.Replace(good, "{id}", "{idd}", 1))
	code, _, stderr := leasegen()
	if code != 1 || !strings.HasPrefix(stderr, "p.go:5:16: lease: key part {idd}") {
		t.Fatalf("leasegen in the package directory = %d %q; want p.go:5:16", code, stderr)
	}
	t.Setenv("GOPACKAGE", "p")
	t.Setenv("GOFILE", "p.go")
	code, _, stderr = leasegen()
	if code != 1 || !strings.HasPrefix(stderr, filepath.Join("p", "p.go")+":5:16: lease: key part {idd}") {
		t.Fatalf("leasegen under go generate in %s = %d %q; want p/p.go:5:16", dir, code, stderr)
	}
}

// A package that does not compile is refused with every one of its
// errors, each on its own line with its position, as go build prints
// them (before, stderr held the first and "(and 1 more errors)").
func TestBrokenPackageListsEveryError(t *testing.T) {
	setup(t, strings.Replace(good, "return nil }", "return nil }\n\nfunc a() int { return undefinedA }\n\nfunc b() int { return undefinedB }\n", 1))
	code, _, stderr := leasegen()
	if code != 1 || !strings.Contains(stderr, "p.go:8:23: undefined: undefinedA\n") || !strings.Contains(stderr, "p.go:10:23: undefined: undefinedB\n") || strings.Contains(stderr, "more error") {
		t.Fatalf("leasegen = %d, stderr %q; want 1 and both positioned errors", code, stderr)
	}
}

// A pattern that names no package is a load error, not code that does not
// compile (it said "the packages do not compile; fix these first").
func TestMissingPackageIsALoadError(t *testing.T) {
	setup(t, good)
	code, _, stderr := leasegen("./nonexist")
	if code != 1 || !strings.Contains(stderr, "leasegen: cannot load the packages:") || !strings.Contains(stderr, "nonexist") || strings.Contains(stderr, "do not compile") {
		t.Fatalf("leasegen ./nonexist = %d, stderr %q; want 1, a load error naming nonexist", code, stderr)
	}
}

// -o names a file the build must compile: go build ignores names starting
// with _ or ., and builds a name ending in _GOOS, _GOARCH or
// _GOOS_GOARCH for that platform only, so the wrappers would be undefined
// (everywhere, or elsewhere). Before, leasegen wrote such files and exited 0.
func TestOutputNamesTheBuildIgnoresExit2(t *testing.T) {
	dir := setup(t, good)
	for _, name := range []string{"_lease.go", ".lease.go", "lease_gen_linux.go", "lease_gen_windows.go", "lease_gen_amd64.go", "lease_gen_darwin_arm64.go", "lease_gen_js.go"} {
		code, _, stderr := leasegen("-o", name)
		if code != 2 || !strings.Contains(stderr, name) {
			t.Errorf("leasegen -o %s = %d %q; want 2 and a message naming it", name, code, stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			t.Errorf("leasegen -o %s wrote the file", name)
		}
	}
	if code, _, stderr := leasegen("-o", "lease_linuxish.go"); code != 0 {
		t.Fatalf("leasegen -o lease_linuxish.go = %d: %s", code, stderr)
	}
}

// Adversary round 22: a package that calls another package's wrappers
// (a function's, a method's, a decorator's constructor) is generated like
// any other. Dependencies are read with -tags leasegen too, without their
// generated files, so those calls did not resolve and leasegen refused the
// package ("undefined: a.Charge") whether a's lease_gen.go was current or
// not: in its own directory, and with ./... from the module root.
func TestCallsIntoAnotherPackagesWrappers(t *testing.T) {
	dir := setup(t, `package p

import "context"

//lease:lock a:{id} deadline=5s
func charge(ctx context.Context, id string) error { return nil }

type Server struct{}

//lease:lock s:{id} deadline=5s
func (s *Server) refund(ctx context.Context, id string) error { return nil }

type Store interface {
	//lease:lock st:{id} deadline=5s
	Put(ctx context.Context, id string) error
}
`)
	mod := filepath.Dir(dir)
	caller := filepath.Join(mod, "q")
	os.MkdirAll(caller, 0o755)
	write(t, filepath.Join(caller, "q.go"), `package q

import (
	"context"

	"example.com/golden/p"
	"github.com/leasegen/leasegen/runtime/lease"
)

//lease:lock q:{id} deadline=5s
func handle(ctx context.Context, c *lease.Client, s *p.Server, st p.Store, id string) error {
	if err := p.Charge(ctx, c, id); err != nil {
		return err
	}
	if err := s.Refund(ctx, c, id); err != nil {
		return err
	}
	return p.NewLeasedStore(st, c).Put(ctx, id)
}
`)
	// q before p has been generated, then after, then both from the root.
	for _, step := range []struct{ dir string }{{caller}, {dir}, {caller}, {mod}} {
		t.Chdir(step.dir)
		args := []string{}
		if step.dir == mod {
			args = []string{"./..."}
		}
		if code, _, stderr := leasegen(args...); code != 0 {
			t.Fatalf("leasegen %v in %s = %d: %s", args, step.dir, code, stderr)
		}
	}
	t.Chdir(mod)
	if code, stdout, stderr := leasegen("-check", "./..."); code != 0 {
		t.Fatalf("leasegen -check ./... = %d %q: %s", code, stdout, stderr)
	}
	if b, err := exec.Command("go", "vet", "./...").CombinedOutput(); err != nil {
		t.Fatalf("go vet ./...: %v\n%s", err, b)
	}
}

// Adversary round 22: after a switch of -o, the file leasegen wrote under
// the old name still declares every wrapper, and the package no longer
// builds ("Work redeclared in this block"). leasegen names it instead of
// writing a second copy.
func TestOtherGeneratedFileIsAnError(t *testing.T) {
	dir := setup(t, good)
	if code, _, stderr := leasegen(); code != 0 {
		t.Fatalf("leasegen = %d: %s", code, stderr)
	}
	code, _, stderr := leasegen("-o", "leases.go")
	if code != 1 || !strings.Contains(stderr, "lease_gen.go was generated by leasegen and declares the same wrappers as leases.go") {
		t.Fatalf("leasegen -o leases.go = %d %q; want 1 naming lease_gen.go", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "leases.go")); err == nil {
		t.Fatal("leases.go written next to lease_gen.go")
	}
}

// Adversary round 24 on 23ca6f2: the imported package calls its own
// wrapper (as example/ does). Read with -tags leasegen, without its
// generated file, it does not compile, so its export data is missing and
// the caller could not be generated.
func TestAdversary24_ImportCallingItsOwnWrappers(t *testing.T) {
	dir := setup(t, `package p

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

//lease:lock a:{id} deadline=5s
func charge(ctx context.Context, id string) error { return nil }

// Pay charges under the lease.
func Pay(ctx context.Context, c *lease.Client, id string) error { return Charge(ctx, c, id) }
`)
	mod := filepath.Dir(dir)
	caller := filepath.Join(mod, "q")
	os.MkdirAll(caller, 0o755)
	write(t, filepath.Join(caller, "q.go"), `package q

import (
	"context"

	"example.com/golden/p"
	"github.com/leasegen/leasegen/runtime/lease"
)

//lease:lock q:{id} deadline=5s
func handle(ctx context.Context, c *lease.Client, id string) error {
	return p.Pay(ctx, c, id)
}
`)
	for _, step := range []string{dir, caller} {
		t.Chdir(step)
		if code, _, stderr := leasegen(); code != 0 {
			t.Fatalf("leasegen in %s = %d: %s", step, code, stderr)
		}
	}
	t.Chdir(mod)
	if code, _, stderr := leasegen("./..."); code != 0 {
		t.Fatalf("leasegen ./... = %d: %s", code, stderr)
	}
	if b, err := exec.Command("go", "vet", "./...").CombinedOutput(); err != nil {
		t.Fatalf("go vet ./...: %v\n%s", err, b)
	}
}

// The same through a chain: r calls its own wrapper, p (no directives)
// calls r's, q imports p. A dependency that is broken for another reason
// is still refused at its import with go list's message.
func TestAdversary24_ImportChainCallingWrappers(t *testing.T) {
	dir := setup(t, `package p

import (
	"context"

	"example.com/golden/r"
	"github.com/leasegen/leasegen/runtime/lease"
)

// Pay pays.
func Pay(ctx context.Context, c *lease.Client, id string) error { return r.Charge(ctx, c, id) }
`)
	mod := filepath.Dir(dir)
	for name, src := range map[string]string{
		"r": `package r

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

//lease:lock a:{id} deadline=5s
func charge(ctx context.Context, id string) error { return nil }

// Again charges.
func Again(ctx context.Context, c *lease.Client, id string) error { return Charge(ctx, c, id) }
`,
		"q": `package q

import (
	"context"

	"example.com/golden/p"
	"github.com/leasegen/leasegen/runtime/lease"
)

//lease:lock q:{id} deadline=5s
func handle(ctx context.Context, c *lease.Client, id string) error {
	return p.Pay(ctx, c, id)
}
`,
		"broken": `package broken

// X is broken.
func X() int { return undefinedThing }
`,
		"usebroken": `package usebroken

import (
	"context"

	"example.com/golden/broken"
)

//lease:lock q:{id} deadline=5s
func handle(ctx context.Context, id string) error {
	_ = broken.X()
	return nil
}
`} {
		os.MkdirAll(filepath.Join(mod, name), 0o755)
		write(t, filepath.Join(mod, name, name+".go"), src)
	}
	t.Chdir(filepath.Join(mod, "q"))
	if code, _, stderr := leasegen(); code != 0 {
		t.Fatalf("leasegen in q = %d: %s", code, stderr)
	}
	t.Chdir(filepath.Join(mod, "usebroken"))
	if code, _, stderr := leasegen(); code != 1 || !strings.Contains(stderr, "undefined: undefinedThing") {
		t.Fatalf("leasegen in usebroken = %d: %s; want 1 and broken's error", code, stderr)
	}
	t.Chdir(mod)
	os.RemoveAll(filepath.Join(mod, "broken"))
	os.RemoveAll(filepath.Join(mod, "usebroken"))
	if code, _, stderr := leasegen("./..."); code != 0 {
		t.Fatalf("leasegen ./... = %d: %s", code, stderr)
	}
	if b, err := exec.Command("go", "vet", "./...").CombinedOutput(); err != nil {
		t.Fatalf("go vet ./...: %v\n%s", err, b)
	}
}

// Adversary round 25 on 91348b3: a copy of an old output that the build
// never compiles (//go:build ignore) declares nothing, so it is no second
// output; one the build compiles still is.
func TestAdversary25_IgnoredOldOutputIsNoSecondOutput(t *testing.T) {
	dir := setup(t, good)
	if code, _, stderr := leasegen(); code != 0 {
		t.Fatalf("leasegen = %d: %s", code, stderr)
	}
	old, _ := os.ReadFile(filepath.Join(dir, "lease_gen.go"))
	write(t, filepath.Join(dir, "old.go"), strings.Replace(string(old), "//go:build !leasegen", "//go:build ignore", 1))
	if code, _, stderr := leasegen(); code != 0 {
		t.Fatalf("leasegen with an ignored old output = %d: %s", code, stderr)
	}
	if b, err := exec.Command("go", "vet", ".").CombinedOutput(); err != nil {
		t.Fatalf("go vet: %v\n%s", err, b)
	}
	write(t, filepath.Join(dir, "old.go"), string(old))
	if code, _, stderr := leasegen(); code != 1 || !strings.Contains(stderr, "old.go was generated by leasegen") {
		t.Fatalf("leasegen with a built old output = %d %q; want 1 naming old.go", code, stderr)
	}
}

// Adversary round 25 on 23ca6f2: the names imports generate were forgiven
// as bare names. A call to Charge in q, which declares and generates no
// Charge, was accepted because p generates Charge, and so was r.Charge
// for an import r that generates none; go build then failed. A call is
// forgiven only when the package it names generates it: q's own
// directives for a bare name (or a dot import's), the import's for p.X.
func TestAdversary25_ForgivenPerPackage(t *testing.T) {
	setup(t, `package p

import "context"

//lease:lock a:{id} deadline=5s
func charge(ctx context.Context, id string) error { return nil }
`)
	mod := filepath.Dir(filepath.Join(mustGetwd(t)))
	os.MkdirAll(filepath.Join(mod, "r"), 0o755)
	write(t, filepath.Join(mod, "r", "r.go"), "package r\n\nfunc Other() {}\n")
	caller := filepath.Join(mod, "q")
	os.MkdirAll(caller, 0o755)
	const head = `package q

import (
	"context"

	"example.com/golden/p"
	"example.com/golden/r"
	"github.com/leasegen/leasegen/runtime/lease"
)

var _ = r.Other

//lease:lock q:{id} deadline=5s
func refund(ctx context.Context, c *lease.Client, id string) error {
	_ = p.Charge(ctx, c, id)
	_ = Refund
`
	for _, bad := range []string{"return Charge(ctx, c, id)", "return r.Charge(ctx, c, id)"} {
		write(t, filepath.Join(caller, "q.go"), head+"\t"+bad+"\n}\n")
		t.Chdir(caller)
		code, _, stderr := leasegen()
		if code != 1 || !strings.Contains(stderr, "q.go:17:") || !strings.Contains(stderr, "undefined:") {
			t.Errorf("%s: leasegen = %d %q; want 1 and the undefined name at q.go:17", bad, code, stderr)
		}
		t.Chdir(mod)
		if code, _, stderr := leasegen("./..."); code != 1 || !strings.Contains(stderr, "q/q.go:17:") {
			t.Errorf("%s: leasegen ./... = %d %q; want 1 and the undefined name at q/q.go:17", bad, code, stderr)
		}
	}
	write(t, filepath.Join(caller, "q.go"), head+"\treturn nil\n}\n")
	t.Chdir(mod)
	if code, _, stderr := leasegen("./..."); code != 0 {
		t.Fatalf("leasegen ./... = %d: %s", code, stderr)
	}
	if b, err := exec.Command("go", "vet", "./...").CombinedOutput(); err != nil {
		t.Fatalf("go vet ./...: %v\n%s", err, b)
	}
}

func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}
