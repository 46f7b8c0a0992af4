package gen_test

// Round 46's four findings left open, fixed here: package-level
// declarations named like predeclared identifiers the wrapper uses,
// leasecheck calling the output stale when a type text names a wrapper,
// clashes with declarations in another platform's files, and
// //lease:defaults conflicts reported at the defaults. Each test is the
// one round 46 wrote (gen/adversary46_test.go's first commit, 6d7db25 and
// after), now held to a fixed generator.

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

// Finding 2. The wrapper body uses predeclared identifiers unqualified:
// nil (nil checks), int64/uint64/string/bool (key conversions,
// templates/key values built in gen/key.go keyValue), len (a MarshalText
// part's emptiness check), true (Fence: true). newNamer
// (gen/naming.go:325) reserves types.Universe.Names() against the
// wrapper's parameters only; a package-level declaration of the same name
// (legal Go: package scope shadows the universe) is not looked at, so the
// wrapper refers to the package's declaration. leasegen exits 0; the
// package then fails to compile ("cannot convert n (variable of type int)
// to type int64", "invalid operation: p == nil (mismatched types *string
// and int)"). Imports get this treatment (importName numbers fmt1,
// strconv1, ... around a package-level fmt), predeclared names do not.
//
// Breaks DESIGN §3 (the key template is checked at generate time; anything
// unsupported "is a generate-time error"): exit 0 with code that does not
// build. Now a generate-time error at the declaration.
func TestAdversary46_PackageShadowsPredeclared(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"shint64/p.go": `package shint64

import "context"

// int64 is the package's own type (it shadows the predeclared one).
type int64 struct{ hi, lo uint32 }

//lease:lock k:{n} deadline=5s
func f(ctx context.Context, n int) error { return nil }
`,
		"shnil/p.go": `package shnil

import "context"

// nil is a package-level variable (legal, if unwise).
var nil = 0

//lease:lock k:{p} deadline=5s
func f(ctx context.Context, p *string) error { return ctx.Err() }
`,
	})
	adv46Write(t, mod, map[string]string{
		"shtrue/p.go": `package shtrue

import "context"

//lease:lock k:{id} deadline=5s fence
func f(ctx context.Context, id string) error { return nil }
`,
		"shtrue/flags_windows.go": `package shtrue

// true is false on Windows (legal, if unwise).
const true = false
`,
	})
	// Each is an error at the declaration (the file of another platform
	// included): leasegen cannot write a wrapper that names the
	// predeclared identifier from inside the package block.
	for pkg, want := range map[string]string{
		"shint64": "p.go:6:6: lease: package-level int64 shadows the predeclared int64, which the generated wrappers use; rename it",
		"shnil":   "p.go:6:5: lease: package-level nil shadows the predeclared nil",
		"shtrue":  "flags_windows.go:4:7: lease: package-level true shadows the predeclared true",
	} {
		t.Run(pkg, func(t *testing.T) {
			errs := adv46Generate(t, filepath.Join(mod, pkg))
			if len(errs) != 1 || !strings.HasPrefix(errs[0], want) {
				t.Errorf("want one error %q, got:\n%s", want, strings.Join(errs, "\n"))
			}
		})
	}
}

// Finding 4. leasecheck calls the output stale, forever: leasegen (and
// leasegen -check) find the file up to date, and regenerating writes the
// same bytes, but go vet -vettool=leasecheck keeps reporting
// "lease_gen.go is stale ... run go generate".
//
// Root cause: newNamer (gen/naming.go:330) reserves every identifier of a
// parameter's or result's type text that g.pkg.Types.Scope().Lookup
// finds, without skipping the objects declared in leasegen's own output
// (declare, naming.go:84-87, does skip them via g.generated). leasegen
// loads with -tags leasegen, so the wrapper F is not in scope and the
// parameter F keeps its name; the analyzer gets the package from go vet
// with lease_gen.go compiled in, so the "F" of the type text
// struct{ F int } resolves to the generated func F, F is reserved, the
// parameter is renamed F1 and the rendering differs from the file.
//
// Breaks DESIGN §3 "deterministic" / README "go tool leasecheck ./... runs
// the lock-discipline checks": the generator's output must be a fixed point
// for its own checker (round 31b treated such a regenerate loop as a bug).
func TestAdversary46_CheckerStaleLoop(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"staleloop/p.go": `package staleloop

import "context"

//lease:lock k:{id} deadline=5s
func f(ctx context.Context, id string, F int, opts struct{ F int }) error { return nil }
`,
	})
	dir := filepath.Join(mod, "staleloop")
	if errs := adv46Generate(t, dir); errs != nil {
		t.Fatalf("leasegen: %s", strings.Join(errs, "\n"))
	}
	// leasegen itself: nothing to regenerate.
	if files, err := gen.Generate(gen.Config{Dir: dir}); err != nil {
		t.Fatal(err)
	} else {
		for _, f := range files {
			old, _ := os.ReadFile(f.Path)
			if !bytes.Equal(old, f.Data) {
				t.Fatalf("leasegen would rewrite %s (not the finding)", f.Path)
			}
		}
	}
	if out, err := adv50Leasecheck(t, mod, "staleloop"); err != nil || len(out) > 0 {
		t.Fatalf("leasecheck on the freshly generated package (leasegen -check: up to date): %v\n%s", err, out)
	}
}

// Finding 7. The generated file carries no build constraint (README:
// "the output carries no build constraint of its own"), so it is compiled
// on every platform; but leasegen checks its names only against the files
// of the current GOOS/GOARCH. A package-level declaration in a file for
// another platform (charge_windows.go declaring Charge, or a package-level
// time that the output's import "time" collides with) is never seen:
// leasegen exits 0 on linux and the package no longer builds for windows
// ("Charge redeclared in this block"; "time already declared through
// import of package time"). declare (gen/naming.go:76-124) and importName
// (gen/typecode.go:22-43) look at g.pkg.Types.Scope() and the internal
// test files only (parsed by leasegen itself, so it could parse
// p.IgnoredFiles the same way).
//
// Breaks README "A wrapper's name must be free where it is declared: a
// clash with a declaration, an import name or a dot-imported name of the
// package's files ... is an error asking for name=" and DESIGN §3
// (errors at generate time, not a build broken elsewhere). The README's
// build-constraint limit speaks of directives in constrained files, not of
// other declarations there.
func TestAdversary46_ClashInOtherPlatformsFile(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"otheros/p.go": `package otheros

import "context"

//lease:lock k:{id} deadline=5s
func charge(ctx context.Context, id string) error { return nil }
`,
		"otheros/charge_windows.go": `package otheros

// Charge is the Windows service's entry point.
func Charge() {}
`,
		"otherosimp/p.go": `package otherosimp

import "context"

//lease:lock k:{id} deadline=5s
func charge(ctx context.Context, id string) error { return nil }
`,
		"otherosimp/clock_windows.go": `package otherosimp

// time is the Windows tick source.
var time = 1
`,
	})
	// A wrapper named like a declaration there is an error, at the
	// directive, naming the file.
	errs := adv46Generate(t, filepath.Join(mod, "otheros"))
	if len(errs) != 1 || !strings.HasPrefix(errs[0], "p.go:5:1: ") || !strings.Contains(errs[0], "wrapper name Charge is already declared at charge_windows.go:4:6") {
		t.Errorf("otheros: want one error at the directive naming charge_windows.go:4:6, got:\n%s", strings.Join(errs, "\n"))
	}
	// An import name that a declaration there takes is numbered: the
	// package builds on both platforms, and leasecheck (which renders
	// the output from the type-checked package) agrees it is current.
	for _, pkg := range []string{"otherosimp"} {
		t.Run(pkg, func(t *testing.T) {
			dir := filepath.Join(mod, pkg)
			if errs := adv46Generate(t, dir); errs != nil {
				t.Fatalf("leasegen: %s", strings.Join(errs, "\n"))
			}
			cmd := exec.Command("go", "run", gentest.ToolBuild, "github.com/leasegen/leasegen/cmd/leasecheck", "./"+pkg)
			cmd.Dir = mod
			if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
				t.Errorf("leasecheck: %v\n%s", err, out)
			}
			for _, goos := range []string{"linux", "windows"} {
				if out, err := adv50Build(t, mod, pkg, "GOOS="+goos, "GOARCH=amd64"); err != nil {
					t.Errorf("leasegen exited 0 but GOOS=%s go build fails: %v\n%s", goos, err, out)
				}
			}
		})
	}
}

// Finding 8. A //lease:defaults value that conflicts with a directive's
// own option is reported once per directive, every time at the defaults'
// argument and with the same text, so the output holds identical lines and
// never says which directive conflicts:
//
//	p.go:3:18: lease: wait 10s must be less than deadline 5s
//	p.go:3:18: lease: wait 10s must be less than deadline 5s
//	p.go:3:27: lease: min-validity 20s must be less than ttl 10s
//	p.go:3:27: lease: min-validity 20s must be less than ttl 10s
//
// The user, told twice about line 3, has to search for the functions with
// deadline=5s or ttl=10s. Root cause: directive.Check
// (gen/directive/directive.go:468-474) runs on the merged directive
// (build.go:260 d.Merge(g.defaults)) and positions the error at the
// option's Pos, which for a default is the defaults comment; the message
// names neither the function nor the directive. (go/scanner's
// ErrorList.RemoveMultiples, the compiler's answer to repeats, is not used
// either.)
//
// Breaks DESIGN §3 "Generate-time errors look like the compiler's" / §8
// "directive problems at the offending argument": the conflicting argument
// of each directive (its deadline=5s, its ttl=10s) is never pointed at.
func TestAdversary46_DefaultsConflictNamesNoDirective(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"defconf/p.go": `// Package defconf.
//
//lease:defaults wait=10s min-validity=20s
package defconf

import "context"

//lease:lock a deadline=5s ttl=10s
func f(ctx context.Context) error { return nil }

//lease:lock b deadline=5s ttl=10s
func g(ctx context.Context) error { return nil }
`,
	})
	errs := adv46Generate(t, filepath.Join(mod, "defconf"))
	if errs == nil {
		t.Fatal("generated without errors")
	}
	seen := map[string]bool{}
	for _, e := range errs {
		if seen[e] {
			t.Errorf("diagnostic repeated: %s", e)
		}
		seen[e] = true
	}
	all := strings.Join(errs, "\n")
	for _, line := range []string{"p.go:8:", "p.go:11:"} {
		if !strings.Contains(all, line) && !strings.Contains(all, strings.TrimSuffix(line, ":")+" ") {
			t.Errorf("no diagnostic points at the directive at %s (it conflicts with the defaults)", strings.TrimSuffix(line, ":"))
		}
	}
	if t.Failed() {
		t.Logf("diagnostics:\n%s", all)
	}
}
