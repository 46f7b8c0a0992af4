package gen_test

// Adversary round 50 (generator): attacks on ba1803b, bc9d83b and 024bfd1
// (defaults conflicts at the directive, the namer skipping leasegen's own
// output, files the build leaves out read for clashes, package-level
// shadows of predeclared identifiers). Each test uses round 46's harness
// (adv46Module, adv46Write, adv46Generate, adv46GenerateBuilds).

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasegen/leasegen/internal/gentest"
)

// adv50Leasecheck runs leasecheck (go run .../cmd/leasecheck) on ./pkg in
// mod with env added, and returns its output and error.
func adv50Leasecheck(t *testing.T, mod, pkg string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("go", "run", gentest.ToolBuild, "github.com/leasegen/leasegen/cmd/leasecheck", "./"+pkg)
	cmd.Dir = mod
	cmd.Env = gentest.GoEnv(env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// adv50Build runs go build on ./pkg in mod with env added.
func adv50Build(t *testing.T, mod, pkg string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", os.DevNull, "./"+pkg)
	cmd.Dir = mod
	cmd.Env = gentest.GoEnv(env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func adv50GenFile(mod, pkg string) string {
	b, _ := os.ReadFile(filepath.Join(mod, pkg, "lease_gen.go"))
	return string(b)
}

// Finding 1. parseOthers (gen/gen.go) parses every *.go file of the
// directory that build.Context.MatchFile rejects, and MatchFile rejects
// files whose names begin with "_" or "." (go build, go vet and go test
// ignore them on every platform, with every tag): an editor backup or a
// parked draft (_old.go, .#p.go) is never compiled with the wrappers. Its
// declarations are nonetheless taken as clashes: a wrapper Charge next to
// a _old.go that declares Charge is refused ("wrapper name Charge is
// already declared at _old.go:3:6 (a file of the package that this build
// leaves out ...)"), and a package-level `var true` there makes leasegen
// refuse the package (shadowedPredeclared). parseTests has the same hole
// for _x_test.go. Expected: no error; the package generates and builds.
//
// Breaks the promise "no false errors on valid code" (README "Generator":
// the files read for clashes are those "the build that takes them
// compiles"; no build takes these).
func TestAdversary50_IgnoredFileNamesFalseClash(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"undclash/p.go": `package undclash

import "context"

//lease:lock k:{id} deadline=5s fence
func charge(ctx context.Context, id string) error { return nil }
`,
		// A parked draft: go build never compiles it.
		"undclash/_old.go": `package undclash

func Charge() {}

const true = false
`,
		"undtest/p.go": `package undtest

import "context"

//lease:lock k:{id} deadline=5s
func charge(ctx context.Context, id string) error { return nil }
`,
		// Ignored by go test too (leading underscore).
		"undtest/_scratch_test.go": `package undtest

func Charge() {}
`,
	})
	for _, pkg := range []string{"undclash", "undtest"} {
		t.Run(pkg, func(t *testing.T) {
			if errs := adv46Generate(t, filepath.Join(mod, pkg)); errs != nil {
				t.Fatalf("false errors (the file is never compiled):\n%s", strings.Join(errs, "\n"))
			}
			if out, err := adv50Build(t, mod, pkg); err != nil {
				t.Fatalf("go build: %v\n%s", err, out)
			}
		})
	}
}

// Finding 2. shadowedPredeclared (gen/naming.go) scans the rendered output
// for any identifier named like a universe object that does not follow a
// period, and reports it when the package declares that name at package
// level. But the output repeats the target's parameter and result types,
// in which such identifiers are (a) the package's own declarations, with
// the same meaning in the wrapper as in the target (type any =
// interface{}, common in code that predates Go 1.18), or (b) struct field
// names or method names (struct{ len int }, interface{ min() int }), which
// shadow nothing. (A func type's parameter names are dropped by the
// rendering, so func(min, max int) int held.) The generated code would
// compile in both cases; leasegen refuses the package ("package-level any
// shadows the predeclared any, which the generated wrappers use; rename
// it"), and leasecheck, for the same reason, has no output to compare.
//
// Breaks "no false errors on valid code" (README "Generator": the error is
// for a predeclared identifier "the output uses"; these are uses of the
// package's own names, or no uses at all).
func TestAdversary50_PredeclaredFalsePositives(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		// (a) the package's alias any, used by the target's signature.
		"shany/p.go": `package shany

import "context"

// any is interface{}, for code that still builds with old toolchains.
type any = interface{}

//lease:lock k:{id} deadline=5s
func put(ctx context.Context, id string, v any) error { return nil }
`,
		// (a') a generic target constrained by the package's any.
		"shanygen/p.go": `package shanygen

import "context"

type any = interface{}

//lease:lock k:{id} deadline=5s
func put[T any](ctx context.Context, id string, v T) error { return nil }
`,
		// (b) the pre-Go 1.21 helpers min and max, and a parameter of an
		// interface type with methods min and max.
		"shminmax/p.go": `package shminmax

import "context"

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}

func max(a, b int) int {
	if a > b {
		return a
	}
	return b
}

var _ = min(1, max(2, 3))

//lease:lock k:{id} deadline=5s
func clamp(ctx context.Context, id string, r interface{ min() int; max() int }) error { return nil }
`,
		// (b') a struct field named len next to a package-level len.
		"shfield/p.go": `package shfield

import "context"

// len is the package's default length.
var len = 3

//lease:lock k:{id} deadline=5s
func put(ctx context.Context, id string, opt struct{ len int }) error { return nil }
`,
	})
	for _, pkg := range []string{"shany", "shanygen", "shminmax", "shfield"} {
		t.Run(pkg, func(t *testing.T) {
			dir := filepath.Join(mod, pkg)
			if errs := adv46Generate(t, dir); errs != nil {
				t.Fatalf("false errors (the output would build):\n%s", strings.Join(errs, "\n"))
			}
			if out, err := adv50Build(t, mod, pkg); err != nil {
				t.Fatalf("go build: %v\n%s\n--- lease_gen.go\n%s", err, out, adv50GenFile(mod, pkg))
			}
		})
	}
}

// Finding 3. bc9d83b made newNamer skip, among the package-level names of
// a type text, those declared by leasegen's own output, because leasecheck
// sees a different package scope than leasegen. The same difference
// remains for every other file that one of them type-checks and the other
// does not:
//
//   - internal test files (package p): go vet and leasecheck analyze the
//     package's test variant, whose scope holds their declarations;
//     leasegen's does not;
//   - files of another GOOS: GOOS=windows go vet -vettool=leasecheck
//     type-checks the windows files, leasegen on linux does not;
//   - a file constrained //go:build !leasegen (README: generation loads
//     with -tags leasegen): every go vet type-checks it, leasegen never.
//
// A parameter F next to a type text naming a field F (struct{ F int }) is
// kept as F by leasegen, whose scope has no F, and renamed F1 by the
// analyzer whose scope has F from p_test.go or f_windows.go: leasecheck
// reports "lease_gen.go is stale" on a freshly generated package, and
// regenerating writes the same bytes (round 46 finding 4's loop, which
// 024bfd1's unseenNames could have closed by counting those names for
// both: newNamer consults only g.pkg.Types.Scope()).
//
// Breaks the promise that leasecheck agrees the output is current (no
// "stale" loop), on the default go vet (test variant) and per platform.
func TestAdversary50_StaleLoopFromUnseenFiles(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	src := func(pkg string) string {
		return "package " + pkg + `

import "context"

//lease:lock k:{id} deadline=5s
func g(ctx context.Context, id string, F int, opts struct{ F int }) error { return nil }
`
	}
	adv46Write(t, mod, map[string]string{
		"staletest/p.go": src("staletest"),
		"staletest/p_test.go": `package staletest

// F is a test fixture.
var F = 1
`,
		"staletag/p.go": src("staletag"),
		"staletag/calls.go": `//go:build !leasegen

package staletag

// F calls the wrapper; generation leaves it out.
func F() {}
`,
		"staleos/p.go": src("staleos"),
		"staleos/f_windows.go": `package staleos

// F is the Windows entry point.
func F() {}
`,
	})
	t.Run("internal test file", func(t *testing.T) {
		if errs := adv46Generate(t, filepath.Join(mod, "staletest")); errs != nil {
			t.Fatalf("leasegen: %s", strings.Join(errs, "\n"))
		}
		if out, err := adv50Leasecheck(t, mod, "staletest"); err != nil || out != "" {
			t.Errorf("leasecheck on the freshly generated package: %v\n%s\n--- lease_gen.go\n%s", err, out, adv50GenFile(mod, "staletest"))
		}
	})
	t.Run("!leasegen file", func(t *testing.T) {
		if errs := adv46Generate(t, filepath.Join(mod, "staletag")); errs != nil {
			t.Fatalf("leasegen: %s", strings.Join(errs, "\n"))
		}
		if out, err := adv50Leasecheck(t, mod, "staletag"); err != nil || out != "" {
			t.Errorf("leasecheck on the freshly generated package: %v\n%s", err, out)
		}
	})
	t.Run("other GOOS", func(t *testing.T) {
		if errs := adv46Generate(t, filepath.Join(mod, "staleos")); errs != nil {
			t.Logf("leasegen reported errors (acceptable): %s", strings.Join(errs, "\n"))
			return
		}
		bin := adv50VetTool(t, mod)
		for _, goos := range []string{"linux", "windows"} {
			if out, err := adv50Vet(bin, mod, "./staleos", goos); err != nil {
				t.Errorf("GOOS=%s go vet -vettool=leasecheck on the freshly generated package: %v\n%s", goos, err, out)
			}
		}
	})
}

// Finding 4. parseOthers and buildFiles decide which files leasegen's build
// leaves out with go/build's Default context (buildContext, gen/load.go:
// GOOS and GOARCH from the process environment only), while the package
// itself is loaded by go list, which also honours the go env file
// (go env -w GOOS=windows, or GOENV naming one). When the two disagree,
// a file go list leaves out is one go/build says matches, so it is
// neither type-checked nor parsed: with GOOS=windows in the go env file,
// clock_linux.go's package-level time is never seen, leasegen imports
// "time" unnumbered and exits 0, and the linux build fails: "time already
// declared through import of package time".
//
// Held: GOFLAGS=-tags=prod (leasegen's own -tags=leasegen replaces the
// GOFLAGS tags for go list, so both sides agree); a cgo file on a machine
// without a C compiler (CC=/nonexistent/cc: the package is refused as one
// that uses cgo).
//
// Breaks "when leasegen exits 0 the package must build on every
// platform/tag combination" and README "the files of the package that the
// current build leaves out ... are read for clashes".
func TestAdversary50_BuildSettingsOutsideEnvHideFiles(t *testing.T) {
	mod := adv46Module(t)
	src := func(pkg string) string {
		return "package " + pkg + `

import "context"

//lease:lock k:{id} deadline=5s
func charge(ctx context.Context, id string) error { return nil }
`
	}
	adv46Write(t, mod, map[string]string{
		"tagflags/p.go": src("tagflags"),
		"tagflags/clock_dev.go": `//go:build !prod

package tagflags

// time is the development clock's tick.
var time = 1
`,
		"nocc/p.go": src("nocc"),
		"nocc/clock_cgo.go": `package nocc

// #include <time.h>
import "C"

// time is the C clock's tick.
var time = C.CLOCKS_PER_SEC
`,
		"goenvos/p.go": src("goenvos"),
		"goenvos/clock_linux.go": `package goenvos

// time is the Linux clock's tick.
var time = 1
`,
	})
	t.Run("GOFLAGS tags", func(t *testing.T) {
		t.Setenv("GOFLAGS", gentest.Flags+" -tags=prod")
		errs := adv46Generate(t, filepath.Join(mod, "tagflags"))
		t.Setenv("GOFLAGS", gentest.Flags)
		if errs != nil {
			t.Logf("leasegen reported errors (acceptable): %s", strings.Join(errs, "\n"))
			return
		}
		for _, env := range [][]string{{"GOFLAGS=" + gentest.Flags}, {"GOFLAGS=" + gentest.Flags + " -tags=prod"}} {
			if out, err := adv50Build(t, mod, "tagflags", env...); err != nil {
				t.Errorf("leasegen (GOFLAGS=-tags=prod) exited 0 but %v go build fails: %v\n%s\n--- lease_gen.go\n%s", env, err, out, adv50GenFile(mod, "tagflags"))
			}
		}
	})
	t.Run("no C compiler", func(t *testing.T) {
		// A machine without a C compiler (golang:alpine, distroless CI):
		// held, leasegen refuses the package as one that uses cgo. (With
		// no gcc on the machine, CC pointing nowhere is the same case.)
		// (-race needs a C compiler: left out while CC points nowhere.)
		t.Setenv("CC", "/nonexistent/cc")
		t.Setenv("GOFLAGS", gentest.CrossFlags)
		errs := adv46Generate(t, filepath.Join(mod, "nocc"))
		os.Unsetenv("CC")
		os.Setenv("GOFLAGS", gentest.Flags)
		if errs != nil {
			t.Logf("leasegen reported errors (acceptable): %s", strings.Join(errs, "\n"))
			return
		}
		for _, cgo := range []string{"0", "1"} {
			if out, err := adv50Build(t, mod, "nocc", "CGO_ENABLED="+cgo); err != nil {
				t.Errorf("leasegen (no C compiler) exited 0 but CGO_ENABLED=%s go build fails: %v\n%s", cgo, err, out)
			}
		}
	})
	t.Run("GOENV GOOS", func(t *testing.T) {
		// Written for a linux host (the CI machine): the go env file says
		// windows.
		goenv := filepath.Join(t.TempDir(), "go.env")
		if err := os.WriteFile(goenv, []byte("GOOS=windows\nGOARCH=amd64\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		// (-race needs cgo, which a build for windows leaves out.)
		t.Setenv("GOENV", goenv)
		t.Setenv("GOFLAGS", gentest.CrossFlags)
		errs := adv46Generate(t, filepath.Join(mod, "goenvos"))
		os.Unsetenv("GOENV")
		os.Setenv("GOFLAGS", gentest.Flags)
		if errs != nil {
			t.Logf("leasegen reported errors (acceptable): %s", strings.Join(errs, "\n"))
			return
		}
		for _, goos := range []string{"linux", "windows"} {
			if out, err := adv50Build(t, mod, "goenvos", "GOOS="+goos, "GOARCH=amd64"); err != nil {
				t.Errorf("leasegen (go env GOOS=windows) exited 0 but GOOS=%s go build fails: %v\n%s\n--- lease_gen.go\n%s", goos, err, out, adv50GenFile(mod, "goenvos"))
			}
		}
	})
}

// Finding 5. A file for leasegen's own build tag (//go:build leasegen:
// stubs or helpers that only generation needs) is type-checked by
// leasegen, which loads with -tags leasegen, and seen by neither go vet
// (no tag) nor CheckPackage's parseOthers, which matches files against
// the same leasegen-tagged context and so takes it as part of the build.
// Its package-level time makes leasegen number the import (time1);
// leasecheck renders "time" and reports the fresh file stale, for ever.
//
// Breaks claim 3 "CheckPackage computes the same names" and the promise
// that leasecheck agrees the output is current.
func TestAdversary50_LeasegenTagFileStaleLoop(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"tagstale/p.go": `package tagstale

import "context"

//lease:lock k:{id} deadline=5s
func charge(ctx context.Context, id string) error { return nil }
`,
		"tagstale/gen_only.go": `//go:build leasegen

package tagstale

// time is read by generation helpers only.
var time = 1
`,
	})
	if errs := adv46Generate(t, filepath.Join(mod, "tagstale")); errs != nil {
		t.Logf("leasegen reported errors (acceptable): %s", strings.Join(errs, "\n"))
		return
	}
	if out, err := adv50Build(t, mod, "tagstale"); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if out, err := adv50Leasecheck(t, mod, "tagstale"); err != nil || out != "" {
		t.Errorf("leasecheck on the freshly generated package: %v\n%s\n--- lease_gen.go\n%s", err, out, adv50GenFile(mod, "tagstale"))
	}
}

// Held check: import names numbered around declarations spread over an
// internal test file (time) and another platform's file (time1): the
// output must import time2, build on both platforms and with its tests,
// and leasecheck must agree.
func TestAdversary50_ImportNumberingAcrossUnseenFiles(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"impnum/p.go": `package impnum

import "context"

//lease:lock k:{id} deadline=5s
func charge(ctx context.Context, id string) error { return nil }
`,
		"impnum/p_test.go": `package impnum

var time = 1
`,
		"impnum/t_windows.go": `package impnum

var time1 = 2
`,
	})
	if errs := adv46Generate(t, filepath.Join(mod, "impnum")); errs != nil {
		t.Fatalf("leasegen: %s", strings.Join(errs, "\n"))
	}
	for _, goos := range []string{"linux", "windows"} {
		cmd := exec.Command("go", "test", "-c", "-o", os.DevNull, "./impnum")
		cmd.Dir = mod
		cmd.Env = gentest.GoEnv("GOOS="+goos, "GOARCH=amd64")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("GOOS=%s go test -c: %v\n%s\n--- lease_gen.go\n%s", goos, err, out, adv50GenFile(mod, "impnum"))
		}
	}
	if out, err := adv50Leasecheck(t, mod, "impnum"); err != nil || out != "" {
		t.Errorf("leasecheck: %v\n%s", err, out)
	}
}

// Held check (claim 1 for leaders): a //lease:defaults min-validity that
// conflicts with a leader's own ttl is reported at the leader's ttl,
// naming the default; the same default with no ttl anywhere (ttl's
// built-in 30s), inherited by a leader and a lock alike, is reported once,
// at the defaults.
func TestAdversary50_DefaultsConflictLeader(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"defleader/p.go": `// Package defleader.
//
//lease:defaults min-validity=40s deadline=5s
package defleader

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type Jobs struct{ lc *lease.Client }

//lease:leader jobs:a ttl=10s
func (j *Jobs) a(ctx context.Context) error { return nil }

//lease:leader jobs:b
func (j *Jobs) b(ctx context.Context) error { return nil }

//lease:lock k:c
func c(ctx context.Context) error { return nil }
`,
	})
	errs := adv46Generate(t, filepath.Join(mod, "defleader"))
	want := []string{
		"p.go:3:18: lease: min-validity 40s (from //lease:defaults) must be less than ttl 30s",
		"p.go:14:23: lease: min-validity 40s (from //lease:defaults) must be less than ttl 10s",
	}
	got := strings.Join(errs, "\n")
	if got != strings.Join(want, "\n") {
		t.Errorf("diagnostics:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

// Finding 6. parseOthers keeps a left-out file when its package clause
// names the package, so a `//go:build ignore` program in a package main
// directory (the usual go:generate helper, gen.go: package main, func
// main) is read for clashes. No build ever compiles it with the package:
// with -tags ignore its func main is already declared twice. Its
// declarations nonetheless refuse a wrapper: main.go's //lease:lock on run
// gets "wrapper name Run is already declared at gen.go:7:6 (a file of the
// package that this build leaves out ...)".
//
// Breaks "no false errors on valid code": README says the files read for
// clashes are those "the build that takes them compiles"; the doc comment
// of parseOthers itself means to skip "a //go:build ignore program".
func TestAdversary50_IgnoreProgramInMainPackage(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		// (The go:generate line is joined here so that go generate on
		// this repository does not take it for its own.)
		"tool/main.go": `package main

import "context"

` + "//go:" + `generate go run gen.go

//lease:lock k:{id} deadline=5s
func run(ctx context.Context, id string) error { return nil }

func main() { _ = run }
`,
		"tool/gen.go": `//go:build ignore

package main

func main() { Run() }

func Run() {}
`,
	})
	if errs := adv46Generate(t, filepath.Join(mod, "tool")); errs != nil {
		t.Errorf("false error (gen.go is a //go:build ignore program that no build compiles with the package):\n%s", strings.Join(errs, "\n"))
	}
}

// Finding 7. name= accepts a predeclared identifier: name=error,
// name=string, name=nil, name=true. The output then declares, at package
// level, a func error / string / nil / true, which shadows the predeclared
// identifier in the whole package block, the output's own uses included
// (its signatures return error, its keys convert with string, Fence:
// true) and the user's files too. leasegen exits 0 and the package fails
// to compile: "error (function) is not a type", "string (function) is not
// a type", "cannot use nil (value of type func(...) error) as error value
// in return statement", "cannot use true (...) as bool value in struct
// literal". Root cause: the directive parser checks only
// token.IsIdentifier, declare (gen/naming.go) looks the name up in the
// package scope, where a universe object is not, and shadowedPredeclared
// (024bfd1) skips the declarations of leasegen's own output (and runs on
// the package's declarations only). Round 46 fixed name=_, name=init and
// name=main, not these. name=max breaks the package's own use of the
// builtin max ("not enough arguments in call to max"). (name=len, any,
// int64 build here only because neither this output nor the package uses
// them.)
//
// Breaks DESIGN §3 "anything else is a generate-time error" (exit 0 with a
// package that does not build); expected: an error at the name= value.
func TestAdversary50_WrapperNamedPredeclared(t *testing.T) {
	mod := adv46Module(t)
	files := map[string]string{}
	names := []string{"error", "string", "nil", "true", "len", "any", "int64"}
	for _, n := range names {
		files["wp"+n+"/p.go"] = "package wp" + n + `

import "context"

//lease:lock k:{id} deadline=5s fence name=` + n + `
func f(ctx context.Context, id string, n int) error { return nil }
`
	}
	// The package's own code uses the builtin max (Go 1.21) that
	// name=max would shadow.
	files["wpmax/p.go"] = `package wpmax

import "context"

//lease:lock k:{id} deadline=5s name=max
func f(ctx context.Context, id string, n int) error { return nil }

func bigger(a, b int) int { return max(a, b) }
`
	names = append(names, "max")
	adv46Write(t, mod, files)
	for _, n := range names {
		t.Run(n, func(t *testing.T) { adv46GenerateBuilds(t, mod, "wp"+n) })
	}
}

// Finding 8. A dot import in a file of another platform is not resolved
// (testClash: "A dot import of a package the package's other files do not
// import is not resolved"), and a platform-specific package is exactly one
// that only that platform's files import (golang.org/x/sys/windows, dot
// imported by a _windows.go file). Its exported names enter the windows
// build's package block: a wrapper Charge next to a dot-imported Charge
// makes GOOS=windows go build fail ("Charge already declared through
// dot-import of package x"), while leasegen on linux exits 0. README lists
// this limit for internal test files only; for the files the build leaves
// out it promises the dot-imported names are checked.
//
// Breaks "when leasegen exits 0 the package must build on every platform".
func TestAdversary50_DotImportInOtherPlatformFile(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"dotwin/winapi/w.go": `package winapi

// Charge is a Windows API call.
func Charge() error { return nil }
`,
		"dotwin/p.go": `package dotwin

import "context"

//lease:lock k:{id} deadline=5s
func charge(ctx context.Context, id string) error { return nil }
`,
		"dotwin/sys_windows.go": `package dotwin

import . "example.com/golden/dotwin/winapi"

var _ = Charge
`,
	})
	dir := filepath.Join(mod, "dotwin")
	if errs := adv46Generate(t, dir); errs != nil {
		t.Logf("leasegen reported errors (acceptable): %s", strings.Join(errs, "\n"))
		return
	}
	for _, goos := range []string{"linux", "windows"} {
		if out, err := adv50Build(t, mod, "dotwin", "GOOS="+goos, "GOARCH=amd64"); err != nil {
			t.Errorf("leasegen exited 0 but GOOS=%s go build fails: %v\n%s", goos, err, out)
		}
	}
}

// Probe: a decorator's type and constructor names (leasedStore,
// NewLeasedStore) against declarations in a file of another platform and
// in an internal test file; a method wrapper against a method of the
// receiver declared in another platform's file.
func TestAdversary50_DecoratorNamesInUnseenFiles(t *testing.T) {
	mod := adv46Module(t)
	iface := func(pkg string) string {
		return "package " + pkg + `

import "context"

type Store interface {
	//lease:lock k:{id} deadline=5s
	Put(ctx context.Context, id string) error
}
`
	}
	adv46Write(t, mod, map[string]string{
		"decwin/p.go": iface("decwin"),
		"decwin/s_windows.go": `package decwin

type leasedStore struct{}

func NewLeasedStore() {}
`,
		"dectest/p.go": iface("dectest"),
		"dectest/s_test.go": `package dectest

type leasedStore struct{}
`,
		"methwin/p.go": `package methwin

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type Jobs struct{ lc *lease.Client }

//lease:lock k:{id} deadline=5s
func (j *Jobs) settle(ctx context.Context, id string) error { return nil }

//lease:leader jobs:run
func (j *Jobs) run(ctx context.Context) error { return nil }
`,
		"methwin/j_windows.go": `package methwin

func (j *Jobs) Settle() {}

func (j *Jobs) RunAsLeader() {}
`,
	})
	for _, pkg := range []string{"decwin", "dectest", "methwin"} {
		t.Run(pkg, func(t *testing.T) {
			dir := filepath.Join(mod, pkg)
			if errs := adv46Generate(t, dir); errs != nil {
				t.Logf("leasegen reported errors (acceptable): %s", strings.Join(errs, "\n"))
				return
			}
			for _, goos := range []string{"linux", "windows"} {
				cmd := exec.Command("go", "test", "-c", "-o", os.DevNull, "./"+pkg)
				cmd.Dir = mod
				cmd.Env = gentest.GoEnv("GOOS="+goos, "GOARCH=amd64")
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("leasegen exited 0 but GOOS=%s go test -c fails: %v\n%s", goos, err, out)
				}
			}
		})
	}
}

// Finding 9. The receiver's type declared per platform: Jobs is a struct
// in jobs_windows.go with a field Settle, and another struct (no such
// field) in jobs_other.go (//go:build !windows). testClash checks the
// methods of the receiver declared in the files the build leaves out, but
// not the fields of the receiver type's declaration there (declare looks
// at g.members(recv), the type-checked linux type only). leasegen on linux
// writes the method Settle, and GOOS=windows go build fails: "field and
// method with the same name Settle".
//
// Breaks README "A wrapper's name must be free where it is declared: a
// clash with ... the files of the package that the current build leaves
// out ..., or the receiver's fields and methods is an error asking for
// name=", and "when leasegen exits 0 the package must build on every
// platform".
func TestAdversary50_ReceiverFieldInOtherPlatformType(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"recvwin/p.go": `package recvwin

import "context"

//lease:lock k:{id} deadline=5s
func (j *Jobs) settle(ctx context.Context, id string) error { return nil }
`,
		"recvwin/jobs_windows.go": `package recvwin

import "github.com/leasegen/leasegen/runtime/lease"

// Jobs on Windows also records whether a settle is pending.
type Jobs struct {
	lc     *lease.Client
	Settle bool
}
`,
		"recvwin/jobs_other.go": `//go:build !windows

package recvwin

import "github.com/leasegen/leasegen/runtime/lease"

type Jobs struct{ lc *lease.Client }
`,
	})
	if errs := adv46Generate(t, filepath.Join(mod, "recvwin")); errs != nil {
		t.Logf("leasegen reported errors (acceptable): %s", strings.Join(errs, "\n"))
		return
	}
	for _, goos := range []string{"linux", "windows"} {
		if out, err := adv50Build(t, mod, "recvwin", "GOOS="+goos, "GOARCH=amd64"); err != nil {
			t.Errorf("leasegen exited 0 but GOOS=%s go build fails: %v\n%s", goos, err, out)
		}
	}
}

// Held check (claim 1): an interface method's directive (decorator) with
// its own deadline under a //lease:defaults wait that exceeds it, and a
// function's own hold-min over the defaults' deadline: each at the
// directive's own option, naming the default, each once.
func TestAdversary50_DefaultsConflictDecoratorAndHoldMin(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"defdec/p.go": `// Package defdec.
//
//lease:defaults wait=10s deadline=20s
package defdec

import "context"

type Store interface {
	//lease:lock k:{id} deadline=5s
	Put(ctx context.Context, id string) error
	//lease:lock k:{id} deadline=5s
	Del(ctx context.Context, id string) error
}

//lease:lock a hold-min=30s
func f(ctx context.Context) error { return nil }
`,
	})
	errs := adv46Generate(t, filepath.Join(mod, "defdec"))
	want := []string{
		"p.go:9:22: lease: wait 10s (from //lease:defaults) must be less than deadline 5s",
		"p.go:11:22: lease: wait 10s (from //lease:defaults) must be less than deadline 5s",
		"p.go:15:16: lease: hold-min 30s must not exceed deadline 20s (from //lease:defaults)",
	}
	if got := strings.Join(errs, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("diagnostics:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

// Finding 10. parseOthers and parseTests list the directory with
// filepath.Glob(filepath.Join(dir, "*.go")), so the directory's own path
// is read as a pattern: a checkout under a path with a glob metacharacter
// (~/src/proj[old]/, a copy named "svc[2]") matches no file, and no file
// the build leaves out and no internal test file is read. The clashes
// 024bfd1 checks are then silently unchecked: clock_windows.go's
// package-level time is missed, leasegen imports "time" unnumbered and
// exits 0 on linux, and GOOS=windows go build fails ("time already
// declared through import of package time"); a Charge in an internal
// test file is missed likewise and go vet / go test fail ("Charge
// redeclared in this block").
//
// Breaks "when leasegen exits 0 the package must build on every
// platform/tag combination" (and go test). Expected: the same results as
// in a directory without brackets (os.ReadDir, not Glob).
func TestAdversary50_GlobMetacharInDirectory(t *testing.T) {
	t.Parallel()
	gentest.Env(t)
	mod := filepath.Join(t.TempDir(), "svc[2]")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	gentest.WriteModule(t, mod)
	src := func(pkg string) string {
		return "package " + pkg + `

import "context"

//lease:lock k:{id} deadline=5s
func charge(ctx context.Context, id string) error { return nil }
`
	}
	adv46Write(t, mod, map[string]string{
		"globos/p.go": src("globos"),
		"globos/clock_windows.go": `package globos

// time is the Windows clock's tick.
var time = 1
`,
		"globtest/p.go": src("globtest"),
		"globtest/p_test.go": `package globtest

import "testing"

func Charge() {}

func TestX(t *testing.T) {}
`,
	})
	t.Run("other GOOS", func(t *testing.T) {
		if errs := adv46Generate(t, filepath.Join(mod, "globos")); errs != nil {
			t.Logf("leasegen reported errors (acceptable): %s", strings.Join(errs, "\n"))
			return
		}
		for _, goos := range []string{"linux", "windows"} {
			if out, err := adv50Build(t, mod, "globos", "GOOS="+goos, "GOARCH=amd64"); err != nil {
				t.Errorf("leasegen exited 0 but GOOS=%s go build fails: %v\n%s", goos, err, out)
			}
		}
	})
	t.Run("internal test", func(t *testing.T) {
		if errs := adv46Generate(t, filepath.Join(mod, "globtest")); errs != nil {
			t.Logf("leasegen reported errors (acceptable): %s", strings.Join(errs, "\n"))
			return
		}
		cmd := exec.Command("go", "vet", "./globtest")
		cmd.Dir = mod
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("leasegen exited 0 but go vet (with the internal test) fails: %v\n%s", err, out)
		}
	})
}

// Held check: leasecheck's diagnostics at a position in a file its package
// does not hold (a declaration in another platform's file, which
// CheckPackage parses into the pass's FileSet): leasecheck must report the
// same error as leasegen, at the same file:line:col.
func TestAdversary50_LeasecheckPositionInOtherFile(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"chkpos/p.go": `package chkpos

import "context"

//lease:lock k:{id} deadline=5s fence
func f(ctx context.Context, id string) error { return nil }
`,
		"chkpos/flags_windows.go": `package chkpos

// true is false on Windows (legal, if unwise).
const true = false
`,
	})
	errs := adv46Generate(t, filepath.Join(mod, "chkpos"))
	want := []string{
		"flags_windows.go:4:7: lease: package-level true shadows the predeclared true",
	}
	for _, w := range want {
		found := false
		for _, e := range errs {
			found = found || strings.HasPrefix(e, w)
		}
		if !found {
			t.Errorf("leasegen: no %q in:\n%s", w, strings.Join(errs, "\n"))
		}
	}
	out, err := adv50Leasecheck(t, mod, "chkpos")
	if err == nil {
		t.Errorf("leasecheck found nothing:\n%s", out)
	}
	for _, w := range want {
		if !strings.Contains(out, "chkpos/"+w) {
			t.Errorf("leasecheck: no %q in:\n%s", "chkpos/"+w, out)
		}
	}
}

// adv50VetTool builds cmd/leasecheck in mod, for go vet -vettool.
func adv50VetTool(t *testing.T, mod string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "leasecheck")
	cmd := exec.Command("go", "build", gentest.ToolBuild, "-o", bin, "github.com/leasegen/leasegen/cmd/leasecheck")
	cmd.Dir = mod
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build leasecheck: %v\n%s", err, out)
	}
	return bin
}

// adv50Vet runs go vet -vettool=bin on pkg (./name) in mod for goos
// (amd64).
func adv50Vet(bin, mod, pkg, goos string) ([]byte, error) {
	cmd := exec.Command("go", "vet", "-vettool="+bin, pkg)
	cmd.Dir = mod
	cmd.Env = gentest.GoEnv("GOOS="+goos, "GOARCH=amd64")
	return cmd.CombinedOutput()
}
