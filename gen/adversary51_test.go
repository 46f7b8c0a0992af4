package gen_test

// Adversary round 51 (generator): attacks on 313e382 (goSources,
// neverBuilt, parseOthers(seen), exportedNames, fieldNamed, maskTypes,
// predeclared wrapper names). Harness: round 46's adv46Module, adv46Write,
// adv46Generate and round 50's adv50Build, adv50Leasecheck, adv50GenFile.

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasegen/leasegen/internal/gentest"
)

// adv51BuildEach builds the packages pkgs (directories of mod) in one go
// build with env added, and returns the output of each that failed, by
// directory (a failure in a package below one of them counts for it). A
// go build that fails with no package named fails the test.
func adv51BuildEach(t *testing.T, mod string, pkgs []string, env ...string) map[string]string {
	t.Helper()
	args := []string{"build", "-json"}
	for _, pkg := range pkgs {
		args = append(args, "./"+pkg)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = mod
	cmd.Env = gentest.GoEnv(env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	text, failed := map[string]string{}, map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var ev struct{ ImportPath, Action, Output string }
		if err := dec.Decode(&ev); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go %s: reading its -json output: %v\n%s", strings.Join(args, " "), err, out)
		}
		pkg, _, _ := strings.Cut(strings.TrimPrefix(ev.ImportPath, "example.com/golden/"), "/")
		switch ev.Action {
		case "build-output":
			text[pkg] += ev.Output
		case "build-fail":
			failed[pkg] += text[pkg]
			text[pkg] = ""
		}
	}
	if err != nil && len(failed) == 0 {
		t.Fatalf("go %s (%v): %v\n%s%s", strings.Join(args, " "), env, err, out, stderr.Bytes())
	}
	return failed
}

// adv51GenerateAndBuild generates for pkg and, when leasegen reports no
// error, builds it for each GOOS; it fails on a generate-time error
// (the code is valid) and on any build failure after leasegen exited 0.
func adv51GenerateAndBuild(t *testing.T, mod, pkg string, gooses ...string) {
	t.Helper()
	if errs := adv46Generate(t, filepath.Join(mod, pkg)); errs != nil {
		t.Fatalf("false errors (the package builds on every platform):\n%s", strings.Join(errs, "\n"))
	}
	for _, goos := range gooses {
		if out, err := adv50Build(t, mod, pkg, "GOOS="+goos); err != nil {
			t.Errorf("leasegen exited 0 but GOOS=%s go build fails: %v\n%s\n--- lease_gen.go\n%s", goos, err, out, adv50GenFile(mod, pkg))
		}
	}
}

// Finding 1. exportedNames (gen/naming.go) reads every .go file of the
// dot-imported package's directory (goSources), whatever its package
// clause and build constraint: a `//go:build ignore` program (package
// main) next to the package, or a file of the package for another
// platform, contributes "exported names" no build of the importer ever
// sees. A wrapper Charge next to a windows file that dot-imports q, where
// q's only Charge is in its gen.go ignore program (or its q_linux.go,
// never compiled with a windows importer), is refused:
// "wrapper name Charge is a name ... dot-imports from package ...".
//
// Breaks "no false errors on valid code": the package with the wrapper
// builds for linux and windows.
func TestAdversary51_DotImportReadsFilesNoBuildTakes(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"dq/q.go": `package dq

var Thing = 1
`,
		// An ignore program (go run gen.go): package main, never part of dq.
		"dq/gen.go": `//go:build ignore

package main

func Charge() {}

func main() {}
`,
		"dqlin/q.go": `package dqlin

var Thing = 1
`,
		// Only the linux build of dqlin declares Charge.
		"dqlin/q_linux.go": `package dqlin

func Charge() {}
`,
		"dign/p.go": `package dign

import "context"

//lease:lock k:{id} deadline=5s
func charge(ctx context.Context, id string) error { return nil }
`,
		"dign/p_windows.go": `package dign

import . "example.com/golden/dq"

var _ = Thing
`,
		"dlin/p.go": `package dlin

import "context"

//lease:lock k:{id} deadline=5s
func charge(ctx context.Context, id string) error { return nil }
`,
		"dlin/p_windows.go": `package dlin

import . "example.com/golden/dqlin"

var _ = Thing
`,
	})
	for _, pkg := range []string{"dign", "dlin"} {
		t.Run(pkg, func(t *testing.T) {
			adv51GenerateAndBuild(t, mod, pkg, "linux", "windows")
		})
	}
}

// Finding 2. testClash resolves a dot import in a file leasegen did not
// type-check through `known`, the package as the type-checked files
// import it, i.e. for leasegen's GOOS. When that package declares
// different names per platform (syscall does), the lookup answers for the
// wrong platform:
//   - a windows file dot-imports syscall, and the wrapper is CreateFile
//     (syscall.CreateFile exists on windows only): leasegen on linux finds
//     no CreateFile in linux's syscall, exits 0, and GOOS=windows go build
//     fails ("CreateFile already declared through dot-import").
//   - the wrapper is Mount (syscall.Mount is linux-only): leasegen refuses
//     it although no build ever sees both.
//
// Breaks "when leasegen exits 0 the package builds on every platform"
// (first) and "no false errors on valid code" (second).
func TestAdversary51_DotImportOfKnownPackageOtherPlatform(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"dsyswin/p.go": `package dsyswin

import (
	"context"
	"syscall"
)

var _ = syscall.Getpid

//lease:lock k:{id} deadline=5s
func createFile(ctx context.Context, id string) error { return nil }
`,
		"dsyswin/p_windows.go": `package dsyswin

import . "syscall"

var _ = Getpid
`,
		"dsyslin/p.go": `package dsyslin

import (
	"context"
	"syscall"
)

var _ = syscall.Getpid

//lease:lock k:{id} deadline=5s
func mount(ctx context.Context, id string) error { return nil }
`,
		"dsyslin/p_windows.go": `package dsyslin

import . "syscall"

var _ = Getpid
`,
	})
	t.Run("windows-only name missed", func(t *testing.T) {
		if errs := adv46Generate(t, filepath.Join(mod, "dsyswin")); errs != nil {
			t.Logf("leasegen reported errors (acceptable):\n%s", strings.Join(errs, "\n"))
			return
		}
		for _, goos := range []string{"linux", "windows"} {
			if out, err := adv50Build(t, mod, "dsyswin", "GOOS="+goos); err != nil {
				t.Errorf("leasegen exited 0 but GOOS=%s go build fails: %v\n%s", goos, err, out)
			}
		}
	})
	t.Run("linux-only name refused", func(t *testing.T) {
		adv51GenerateAndBuild(t, mod, "dsyslin", "linux", "windows")
	})
}

// Finding 3. neverBuilt (gen/gen.go) only reads //go:build lines; a file
// constrained by the older `// +build ignore` alone (no //go:build line),
// which the go command still honours (the test first checks that go build
// passes over it: compiled, it would not build), is never compiled, yet
// its declarations are read for clashes: "wrapper name Charge is already
// declared at old.go:5:6 (a file of the package that this build leaves
// out ...)". Pre-1.17 code and old generators still carry such files.
//
// Breaks "no false errors on valid code".
func TestAdversary51_PlusBuildIgnoreFalseClash(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"pbign/p.go": `package pbign

import "context"

//lease:lock k:{id} deadline=5s
func charge(ctx context.Context, id string) error { return nil }
`,
		"pbign/old.go": `// +build ignore

package pbign

func Charge() {}

var _ = notDeclaredAnywhere // compiled, this file would not build
`,
	})
	// The package builds: the go command never compiles old.go.
	if out, err := adv50Build(t, mod, "pbign"); err != nil {
		t.Fatalf("go build does not honour // +build ignore here: %v\n%s", err, out)
	}
	adv51GenerateAndBuild(t, mod, "pbign", "linux", "windows")
}

// Held check: a constraint that needs ignore only on one branch
// (`//go:build ignore || windows`) is built on windows, so its Charge
// clashes with the wrapper there: leasegen must refuse (or the windows
// build breaks).
func TestAdversary51_IgnoreOrWindowsStillClashes(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"igor/p.go": `package igor

import "context"

//lease:lock k:{id} deadline=5s
func charge(ctx context.Context, id string) error { return nil }
`,
		"igor/w.go": `//go:build ignore || windows

package igor

func Charge() {}
`,
	})
	errs := adv46Generate(t, filepath.Join(mod, "igor"))
	if errs == nil {
		out, err := adv50Build(t, mod, "igor", "GOOS=windows")
		t.Fatalf("leasegen exited 0 with a Charge built on windows; GOOS=windows go build: %v\n%s", err, out)
	}
	if !strings.Contains(strings.Join(errs, "\n"), "w.go:5:6") {
		t.Errorf("error not at w.go:5:6:\n%s", strings.Join(errs, "\n"))
	}
}

// Held check. shadowedPredeclared scans the masked rendering
// for every identifier named like a universe object; maskTypes masks the
// type texts but not the names the output copies from the target: its
// parameter names (and a method's receiver name). A package with the
// pre-Go 1.21 helpers min and max, and a target whose parameters are
// called min and max (or len, cap), is valid Go; the wrapper's parameters
// shadow the package's functions locally, as the target's do. Held: the
// wrapper renames such parameters (min1, max1), and a receiver name is
// not counted.
func TestAdversary51_ParamNamesLikePredeclared(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"pminmax/p.go": `package pminmax

import "context"

func max(a, b int) int {
	if a > b {
		return a
	}
	return b
}

var _ = max(1, 2)

//lease:lock k:{id} deadline=5s
func resize(ctx context.Context, id string, min, max int) error { return nil }
`,
		"precv/p.go": `package precv

import "context"

// cap is the package's default capacity.
var cap = 8

type Pool struct{ n int }

//lease:lock k:{id} deadline=5s
func (cap *Pool) grow(ctx context.Context, id string) error { return nil }
`,
	})
	for _, pkg := range []string{"pminmax", "precv"} {
		t.Run(pkg, func(t *testing.T) {
			adv51GenerateAndBuild(t, mod, pkg, "linux")
			if out, err := adv50Leasecheck(t, mod, pkg); err != nil || out != "" {
				t.Errorf("leasecheck: %v\n%s", err, out)
			}
		})
	}
}

// Finding 5. testClash finds a method of the receiver's type
// in an unseen file by the receiver's base name (recvBase) and a field by
// a struct literal declared under the type's own name (fieldNamed). Two
// valid ways to give the windows build of T a member Charge escape both:
//   - a method declared on an alias of T (type A = T; func (A) Charge()),
//     which is a method of T;
//   - T declared in the windows file as a defined type of another struct
//     type (type T base), whose fields T has.
//
// leasegen on linux exits 0 with a wrapper method Charge on *T, and
// GOOS=windows go build fails ("field and method with the same name" /
// "method T.Charge already declared").
//
// Breaks "when leasegen exits 0 the package builds on every platform".
func TestAdversary51_ReceiverMemberThroughAliasOrDefinedType(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"ralias/p.go": `package ralias

import "context"

type T struct{ n int }

//lease:lock k:{id} deadline=5s
func (t *T) charge(ctx context.Context, id string) error { return nil }
`,
		"ralias/p_windows.go": `package ralias

type A = T

func (A) Charge() {}
`,
		"rdef/p.go": `package rdef

import "context"

//lease:lock k:{id} deadline=5s
func (t *T) charge(ctx context.Context, id string) error { return nil }
`,
		"rdef/t_linux.go": `package rdef

type T struct{ n int }
`,
		"rdef/t_windows.go": `package rdef

type base struct {
	n      int
	Charge func()
}

type T base
`,
	})
	for _, pkg := range []string{"ralias", "rdef"} {
		t.Run(pkg, func(t *testing.T) {
			if errs := adv46Generate(t, filepath.Join(mod, pkg)); errs != nil {
				t.Logf("leasegen reported errors (acceptable):\n%s", strings.Join(errs, "\n"))
				return
			}
			for _, goos := range []string{"linux", "windows"} {
				if out, err := adv50Build(t, mod, pkg, "GOOS="+goos); err != nil {
					t.Errorf("leasegen exited 0 but GOOS=%s go build fails: %v\n%s", goos, err, out)
				}
			}
		})
	}
}

// Held check: wrapper methods named like predeclared identifiers
// (name=len, name=max on a method) are allowed, since a method does not
// shadow anything; a package-level name=len is refused.
func TestAdversary51_PredeclaredNamesOnMethods(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"mlen/p.go": `package mlen

import "context"

type Q struct{ items []string }

//lease:lock k:{id} deadline=5s name=len
func (q *Q) size(ctx context.Context, id string) error { return nil }

//lease:lock k:{id} deadline=5s name=max
func (q Q) top(ctx context.Context, id string) error { return nil }
`,
		"flen/p.go": `package flen

import "context"

//lease:lock k:{id} deadline=5s name=len
func size(ctx context.Context, id string) error { return nil }
`,
	})
	adv51GenerateAndBuild(t, mod, "mlen", "linux")
	if out, err := adv50Leasecheck(t, mod, "mlen"); err != nil || out != "" {
		t.Errorf("leasecheck: %v\n%s", err, out)
	}
	if errs := adv46Generate(t, filepath.Join(mod, "flen")); errs == nil {
		t.Errorf("package-level name=len accepted:\n%s", adv50GenFile(mod, "flen"))
	}
}

// Robustness: files leasegen only parses (another platform's, an internal
// test file) that do not parse must not crash it. The partial ASTs the
// parser returns (BadDecl, a FuncDecl without a body, a TypeSpec without a
// type) reach declNames, fieldNamed and testClash.
func TestAdversary51_BrokenUnseenFilesNoPanic(t *testing.T) {
	t.Parallel()
	broken := []string{
		"package brk\n\nfunc (",
		"package brk\n\ntype T struct{ Charge",
		"package brk\n\ntype T\n",
		"package brk\n\nfunc (T) Charge(\n",
		"package brk\n\nimport . \n",
		"package brk\n\nimport . \"\"\n",
		"package brk\n\nimport . \"example.com/golden/nonexistent\"\n",
		"package brk\n\nimport . \"../rel\"\n",
		"package brk\n\nvar (\n",
		"package brk\n\nfunc[T any] Charge() {}\n",
		"package brk\n\ntype T[ struct{}\n",
		"package brk\n\ntype T struct{ *[]Charge; (Charge) }\n",
		"package brk\n\n\x00\xff",
	}
	for i, src := range broken {
		for _, name := range []string{"x_windows.go", "x_internal_test.go"} {
			t.Run(name+"/"+string(rune('a'+i)), func(t *testing.T) {
				mod := adv46Module(t)
				adv46Write(t, mod, map[string]string{
					"brk/p.go": `package brk

import "context"

type T struct{ n int }

//lease:lock k:{id} deadline=5s
func charge(ctx context.Context, id string) error { return nil }

//lease:lock k:{id} deadline=5s
func (t *T) charge(ctx context.Context, id string) error { return nil }
`,
					"brk/" + name: src,
				})
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("leasegen panicked on %q in %s: %v", src, name, r)
						}
					}()
					errs := adv46Generate(t, filepath.Join(mod, "brk"))
					t.Logf("errors: %v", errs)
				}()
			})
		}
	}
}

// Held check: a //go:build ignore inside the comment block attached to
// the package clause (no blank line) is still honoured by the go command
// (the probe shows x_windows.go is passed over on windows), and
// neverBuilt agrees: no clash is reported and both builds pass.
func TestAdversary51_AttachedGoBuildIgnore(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"attign/p.go": `package attign

import "context"

//lease:lock k:{id} deadline=5s
func charge(ctx context.Context, id string) error { return nil }
`,
		"attign/x_windows.go": `// Charge on windows.
//go:build ignore
package attign

func Charge() {}
`,
	})
	adv46Write(t, mod, map[string]string{"attign/probe.go": "package attign\n\nfunc Charge() {}\n"})
	out, err := adv50Build(t, mod, "attign", "GOOS=windows")
	os.Remove(filepath.Join(mod, "attign", "probe.go"))
	if err != nil {
		t.Fatalf("the go command builds x_windows.go here: %s", out)
	}
	adv51GenerateAndBuild(t, mod, "attign", "linux", "windows")
}

// Finding 7. CheckPackage (gen/check.go) takes the package's
// directory, and the set of files it type-checked (seen), from
// fset.Position(f.Pos()).Filename, which a //line directive before the
// package clause rewrites (generated code: goyacc, ragel and the like
// emit them, here with an absolute path). When the package's first file
// carries one, the analyzer reads internal tests and other platforms'
// files from the directive's directory instead of the package's, misses
// p_windows.go's package-level F, and renders the wrapper without
// renaming its parameter F, which leasegen (reading the real directory)
// renames: leasecheck calls the freshly generated file stale.
//
// The control package lnctl (no //line) passes.
//
// Breaks "leasecheck must agree the output is current".
func TestAdversary51_LineDirectiveMovesCheckerDir(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	elsewhere := t.TempDir()
	adv46Write(t, mod, map[string]string{
		"lnstale/a.go": "// Code generated by ragel. DO NOT EDIT.\n\n//line " + filepath.Join(elsewhere, "a.rl") + ":1\npackage lnstale\n\nvar A = 1\n",
		"lnstale/p.go": `package lnstale

import "context"

//lease:lock k:{id} deadline=5s
func put(ctx context.Context, id string, F int, opts struct{ F int }) error { return nil }
`,
		"lnstale/p_windows.go": `package lnstale

var F = 1
`,
	})
	// Control: the same package with a.go's //line directive dropped.
	for name, src := range map[string]string{
		"lnctl/a.go":         "package lnctl\n\nvar A = 1\n",
		"lnctl/p.go":         "package lnctl\n\nimport \"context\"\n\n//lease:lock k:{id} deadline=5s\nfunc put(ctx context.Context, id string, F int, opts struct{ F int }) error { return nil }\n",
		"lnctl/p_windows.go": "package lnctl\n\nvar F = 1\n",
	} {
		adv46Write(t, mod, map[string]string{name: src})
	}
	for _, pkg := range []string{"lnctl", "lnstale"} {
		t.Run(pkg, func(t *testing.T) {
			if errs := adv46Generate(t, filepath.Join(mod, pkg)); errs != nil {
				t.Fatalf("leasegen: %s", strings.Join(errs, "\n"))
			}
			if out, err := adv50Build(t, mod, pkg); err != nil {
				t.Fatalf("go build: %v\n%s", err, out)
			}
			if out, err := adv50Leasecheck(t, mod, pkg); err != nil || out != "" {
				t.Errorf("leasecheck on the freshly generated package: %v\n%s\n--- lease_gen.go\n%s", err, out, adv50GenFile(mod, pkg))
			}
		})
	}
}

// Finding 8. exportedNames runs `go list -find` in the
// directory of g.pkg.Syntax[0] as fset.Position reports it, which a
// //line directive before the package clause rewrites (here to a
// directory outside the module). go list then fails to find the module's
// package, exportedNames returns nil, and a windows file's dot import of
// example.com/golden/dq, which exports Charge on every platform, is not
// checked: leasegen exits 0 and GOOS=windows go build fails ("Charge
// already declared through dot-import"). The control package (no //line)
// is refused, as it should be.
//
// Breaks "when leasegen exits 0 the package builds on every platform".
func TestAdversary51_LineDirectiveHidesDotImportClash(t *testing.T) {
	mod := adv46Module(t)
	elsewhere := t.TempDir()
	files := map[string]string{
		"dq/q.go": "package dq\n\nvar Thing = 1\n\nfunc Charge() {}\n",
	}
	for _, pkg := range []string{"lndot", "lndotctl"} {
		header := ""
		if pkg == "lndot" {
			header = "// Code generated by ragel. DO NOT EDIT.\n\n//line " + filepath.Join(elsewhere, "a.rl") + ":1\n"
		}
		files[pkg+"/a.go"] = header + "package " + pkg + "\n\nvar A = 1\n"
		files[pkg+"/p.go"] = "package " + pkg + "\n\nimport \"context\"\n\n//lease:lock k:{id} deadline=5s\nfunc charge(ctx context.Context, id string) error { return nil }\n"
		files[pkg+"/p_windows.go"] = "package " + pkg + "\n\nimport . \"example.com/golden/dq\"\n\nvar _ = Thing\n"
	}
	adv46Write(t, mod, files)
	if errs := adv46Generate(t, filepath.Join(mod, "lndotctl")); errs == nil {
		t.Errorf("control: leasegen accepted the clash with dq.Charge")
	}
	if errs := adv46Generate(t, filepath.Join(mod, "lndot")); errs != nil {
		t.Logf("leasegen reported errors (acceptable):\n%s", strings.Join(errs, "\n"))
		return
	}
	if out, err := adv50Build(t, mod, "lndot", "GOOS=windows"); err != nil {
		t.Errorf("leasegen exited 0 but GOOS=windows go build fails: %v\n%s", err, out)
	}
}

// Finding 9. exportedNames asks `go list -find` for the
// dot-imported package's directory, in leasegen's environment (this
// GOOS). A platform-only package, the very case exportedNames is for, has
// no Go files for this GOOS: go list fails ("build constraints exclude
// all Go files"), exportedNames returns nil, and the clash is not
// checked. Here winapi has only api_windows.go, exporting Charge; the
// windows file of p dot-imports it; leasegen on linux exits 0 and
// GOOS=windows go build fails ("Charge already declared through
// dot-import").
//
// Breaks "when leasegen exits 0 the package builds on every platform".
func TestAdversary51_DotImportOfPlatformOnlyPackage(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"winapi/api_windows.go": `package winapi

var Thing = 1

func Charge() {}
`,
		"dwin/p.go": `package dwin

import "context"

//lease:lock k:{id} deadline=5s
func charge(ctx context.Context, id string) error { return nil }
`,
		"dwin/p_windows.go": `package dwin

import . "example.com/golden/winapi"

var _ = Thing
`,
	})
	if errs := adv46Generate(t, filepath.Join(mod, "dwin")); errs != nil {
		t.Logf("leasegen reported errors (acceptable):\n%s", strings.Join(errs, "\n"))
		return
	}
	for _, goos := range []string{"linux", "windows"} {
		if out, err := adv50Build(t, mod, "dwin", "GOOS="+goos); err != nil {
			t.Errorf("leasegen exited 0 but GOOS=%s go build fails: %v\n%s", goos, err, out)
		}
	}
}

// Finding 10. parseTests passes over a //go:build ignore
// internal test file for clashes (neverBuilt), but still collects every
// _test.go file mentioning "lease:" for testDirectives, whatever its
// build constraint: a test file no build ever compiles (a //go:build
// ignore example program kept next to the tests, here one that shows how
// a directive is written) makes leasegen refuse the package with
// "//lease:lock in a test file", while leasecheck (which never sees that
// file) finds nothing wrong. The same file named _example_test.go, or
// without _test in its name, is passed over.
//
// Breaks "no false errors on valid code" (and leasegen and leasecheck
// disagree).
func TestAdversary51_IgnoredTestFileDirectives(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"igtest/p.go": `package igtest

import "context"

//lease:lock k:{id} deadline=5s
func charge(ctx context.Context, id string) error { return nil }
`,
		"igtest/example_test.go": `//go:build ignore

// An example of a directive, run with go run example_test.go.
package main

import "context"

//lease:lock k:{id} deadline=5s
func settle(ctx context.Context, id string) error { return nil }

func main() {}
`,
	})
	adv51GenerateAndBuild(t, mod, "igtest", "linux")
	if out, err := adv50Leasecheck(t, mod, "igtest"); err != nil || out != "" {
		t.Errorf("leasecheck: %v\n%s", err, out)
	}
}

// Round 51 also found (left as a documented limit, README "Limits"):
// types that a leased function's signature uses but that are declared
// per platform (a key type int64 on linux and string on windows, a
// decorated interface embedding a per-platform interface) are read as
// this platform declares them, and the output may not build elsewhere.

// Probe: a package-level declaration of each predeclared identifier, in
// the package's own file or in another platform's file, next to targets
// of every kind (a string key, an int key, a fenced lock, a generic
// target, a leader, a decorator with a passthrough method). Either
// leasegen refuses (at load, or with the shadow error), or the package
// builds on linux and windows and vets: shadowedPredeclared renders the
// model with the package's type texts masked, and a masked rendering that
// hides one of leasegen's own uses would let a shadow through. A package
// that does not build on both platforms before generation (the target's
// own signature uses the shadowed name) is skipped. Held.
func TestAdversary51_PredeclaredShadowMatrix(t *testing.T) {
	t.Parallel()
	// (A fuller list, with false, cap, copy, panic, clear, uintptr and
	// recover, held too; trimmed for time.)
	names := []string{"len", "nil", "true", "int64", "any", "make", "new", "append", "min",
		"max", "iota", "comparable"}
	mod := adv46Module(t)
	files := map[string]string{}
	var pkgs []string
	for _, name := range names {
		for _, where := range []string{"own", "win"} {
			pkg := "shm" + strings.ReplaceAll(name, "_", "") + where
			pkgs = append(pkgs, pkg)
			files[pkg+"/p.go"] = "package " + pkg + `

import "context"

//lease:lock k:{id} deadline=5s
func a(ctx context.Context, id string) error { return ctx.Err() }

//lease:lock k:{n}:{u} deadline=5s fence
func b(ctx context.Context, n int, u uint64, tok int64) error { return ctx.Err() }

//lease:lock k:{id} deadline=5s
func c[T interface{ ~int64 | ~string }](ctx context.Context, id string, v T) ([]T, error) {
	var z []T
	return z, ctx.Err()
}

type Jobs struct{}

//lease:leader jobs:run
func (j *Jobs) run(ctx context.Context) error { return ctx.Err() }

type Store interface {
	//lease:lock k:{id} deadline=5s
	Put(ctx context.Context, id string) error
	Get(id string) ([]byte, bool)
}
`
			decl := "var " + name + " = 0\n"
			if where == "own" {
				files[pkg+"/shadow.go"] = "package " + pkg + "\n\n" + decl
			} else {
				files[pkg+"/shadow_windows.go"] = "package " + pkg + "\n\n" + decl
			}
		}
	}
	adv46Write(t, mod, files)
	// The builds run once per platform for all packages (a go build each
	// would take most of the test's time).
	gooses := []string{"linux", "windows"}
	before := map[string]string{}
	for _, goos := range gooses {
		for pkg, out := range adv51BuildEach(t, mod, pkgs, "GOOS="+goos) {
			before[pkg] += "GOOS=" + goos + ":\n" + out
		}
	}
	var generated []string
	for _, pkg := range pkgs {
		t.Run(pkg, func(t *testing.T) {
			if out, ok := before[pkg]; ok {
				t.Logf("the package does not build before generation (the target uses the name itself): nothing to check\n%s", out)
				return
			}
			var errs []string
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("leasegen panicked: %v", r)
					}
				}()
				errs = adv46Generate(t, filepath.Join(mod, pkg))
			}()
			if errs != nil {
				return // refused: acceptable
			}
			generated = append(generated, pkg)
		})
	}
	if len(generated) == 0 {
		t.Fatal("leasegen refused every package, or none built before generation: nothing was checked")
	}
	for _, goos := range gooses {
		for pkg, out := range adv51BuildEach(t, mod, generated, "GOOS="+goos) {
			t.Errorf("%s: leasegen exited 0 but GOOS=%s go build fails:\n%s\n--- lease_gen.go\n%s", pkg, goos, out, adv50GenFile(mod, pkg))
		}
	}
	t.Logf("%d packages generated and built on %v", len(generated), gooses)
}

// Held check (stale loops): type-text names declared in every kind of
// file leasegen or the analyzer may not type-check (a linux file, a
// windows file, an internal test file for windows, a //go:build leasegen
// file, a !leasegen file), with a dot import in the windows file:
// leasecheck (go run, with tests) and go vet -vettool=leasecheck on linux
// and windows agree the freshly generated file is current.
func TestAdversary51_StaleAcrossPlatformsAndTests(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"dq/q.go": "package dq\n\nvar Thing = 1\n",
		"stl/p.go": `package stl

import "context"

//lease:lock k:{id} deadline=5s
func put(ctx context.Context, id string, A, B, C, D, E int, o struct{ A, B, C, D, E int }) error {
	return nil
}

type Jobs struct{}

//lease:lock k:{id} deadline=5s
func (j *Jobs) get(ctx context.Context, id string, A int, o struct{ A int }) error { return nil }
`,
		"stl/a_linux.go":           "package stl\n\nvar A = 1\n",
		"stl/b_windows.go":         "package stl\n\nimport . \"example.com/golden/dq\"\n\nvar B = Thing\n",
		"stl/c_windows_test.go":    "package stl\n\nvar C = 1\n",
		"stl/d_tag.go":             "//go:build leasegen\n\npackage stl\n\nvar D = 1\n",
		"stl/e_notag.go":           "//go:build !leasegen\n\npackage stl\n\nvar E = 1\n",
		"stl/stl_internal_test.go": "package stl\n\nimport \"testing\"\n\nfunc TestX(t *testing.T) {}\n",
		"stl/stl_external_test.go": "package stl_test\n\nimport \"testing\"\n\nfunc TestY(t *testing.T) {}\n",
	})
	if errs := adv46Generate(t, filepath.Join(mod, "stl")); errs != nil {
		t.Fatalf("leasegen: %s", strings.Join(errs, "\n"))
	}
	if out, err := adv50Leasecheck(t, mod, "stl"); err != nil || out != "" {
		t.Errorf("leasecheck: %v\n%s\n--- lease_gen.go\n%s", err, out, adv50GenFile(mod, "stl"))
	}
	bin := adv50VetTool(t, mod)
	for _, goos := range []string{"linux", "windows"} {
		if out, err := adv50Vet(bin, mod, "./stl", goos); err != nil {
			t.Errorf("GOOS=%s go vet -vettool=leasecheck: %v\n%s", goos, err, out)
		}
		if out, err := adv50Build(t, mod, "stl", "GOOS="+goos); err != nil {
			t.Errorf("GOOS=%s go build: %v\n%s", goos, err, out)
		}
	}
}

// Finding 12. newNamer reserves a type text's identifier when
// the type-checked scope declares it or unseenNames (declNames of the
// files the caller did not type-check) has it. declNames takes every
// package-level FuncDecl name, init included, but init is never in a
// package scope: a `func init()` counts when its file is unseen and not
// when it is type-checked. A parameter named init next to a type text
// that mentions init (a field) is renamed (init1) by the caller that does
// not type-check the file with func init, and kept by the one that does:
//   - windows.go holds func init: leasegen on linux renames, go vet
//     -vettool=leasecheck with GOOS=windows keeps: stale forever there;
//   - notag.go (//go:build !leasegen) holds func init: leasegen renames,
//     leasecheck on linux keeps: stale forever.
//
// Breaks "leasecheck must agree the output is current".
func TestAdversary51_InitFuncStaleLoop(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	target := `

import "context"

//lease:lock k:{id} deadline=5s
func put(ctx context.Context, id string, init int, o struct{ init int }) error { return nil }
`
	adv46Write(t, mod, map[string]string{
		"initwin/p.go":       "package initwin" + target,
		"initwin/windows.go": "//go:build windows\n\npackage initwin\n\nfunc init() {}\n",
		"inittag/p.go":       "package inittag" + target,
		"inittag/notag.go":   "//go:build !leasegen\n\npackage inittag\n\nfunc init() {}\n",
	})
	bin := adv50VetTool(t, mod)
	for _, pkg := range []string{"initwin", "inittag"} {
		t.Run(pkg, func(t *testing.T) {
			if errs := adv46Generate(t, filepath.Join(mod, pkg)); errs != nil {
				t.Fatalf("leasegen: %s", strings.Join(errs, "\n"))
			}
			for _, goos := range []string{"linux", "windows"} {
				if out, err := adv50Build(t, mod, pkg, "GOOS="+goos); err != nil {
					t.Errorf("GOOS=%s go build: %v\n%s", goos, err, out)
				}
				if out, err := adv50Vet(bin, mod, "./"+pkg, goos); err != nil {
					t.Errorf("GOOS=%s go vet -vettool=leasecheck on the freshly generated package: %v\n%s\n--- lease_gen.go\n%s", goos, err, out, adv50GenFile(mod, pkg))
				}
			}
		})
	}
}

// Robustness: odd package shapes must give an error or generate, never
// panic: a package whose only files are for another GOOS; one whose only
// buildable file is an ignore program next to a windows file; a directory
// of internal test files only, one with a directive (these held: an
// unpositioned load error, or nothing generated).
//
// Finding 13 (subtest onlytag). A directive in a //go:build leasegen file
// (a file only leasegen's own load takes, next to a doc.go so that the
// package builds): leasegen (-tags leasegen) sees the function and
// generates its wrapper, exits 0, and the output (//go:build !leasegen)
// calls a function no other build compiles: go build fails on every
// platform with "undefined: charge". Round 50 made names of such files
// count for clashes; a directive in one should be an error at it (as a
// directive in a file the build leaves out is unseen).
//
// Breaks "when leasegen exits 0 the package builds".
func TestAdversary51_OddPackagesNoPanic(t *testing.T) {
	mod := adv46Module(t)
	target := "\n\nimport \"context\"\n\n//lease:lock k:{id} deadline=5s\nfunc charge(ctx context.Context, id string) error { return nil }\n"
	adv46Write(t, mod, map[string]string{
		"onlywin/p_windows.go": "package onlywin" + target,
		"onlyign/gen.go":       "//go:build ignore\n\npackage main\n\nfunc main() {}\n",
		"onlyign/p_windows.go": "package onlyign" + target,
		"onlytest/p_test.go":   "package onlytest" + target,
		"onlytest/q_test.go":   "package onlytest\n\nfunc Charge() {}\n",
		"onlytag/p.go":         "//go:build leasegen\n\npackage onlytag" + target,
		"onlytag/doc.go":       "// Package onlytag builds without the leasegen tag.\npackage onlytag\n",
	})
	for _, pkg := range []string{"onlywin", "onlyign", "onlytest", "onlytag"} {
		t.Run(pkg, func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("leasegen panicked: %v", r)
				}
			}()
			errs := adv46Generate(t, filepath.Join(mod, pkg))
			t.Logf("leasegen: %v", errs)
			if errs == nil {
				for _, goos := range []string{"linux", "windows"} {
					if out, err := adv50Build(t, mod, pkg, "GOOS="+goos); err != nil && !strings.Contains(out, "build constraints exclude all Go files") && !strings.Contains(out, "no non-test Go files") {
						t.Errorf("leasegen exited 0 but GOOS=%s go build fails: %v\n%s", goos, err, out)
					}
				}
			}
		})
	}
}

// Finding 14. A directory whose only files are tests, one
// holding a //lease:lock directive: leasegen exits 0 and writes nothing,
// silently ignoring the directive, where the same directive next to a
// non-test file is an error ("//lease:lock in a test file"); leasecheck
// (which loads the tests) reports it.
//
// Breaks "anything unsupported is a generate-time error" (leasegen and
// leasecheck disagree).
func TestAdversary51_TestOnlyDirectorySilent(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"tonly/p_test.go": "package tonly\n\nimport \"context\"\n\n//lease:lock k:{id} deadline=5s\nfunc charge(ctx context.Context, id string) error { return nil }\n",
	})
	errs := adv46Generate(t, filepath.Join(mod, "tonly"))
	lc, lcErr := adv50Leasecheck(t, mod, "tonly")
	t.Logf("leasecheck: %v\n%s", lcErr, lc)
	if errs == nil {
		t.Errorf("leasegen exited 0 with a //lease:lock in a test file (leasecheck: %v %s)", lcErr, lc)
	}
}
