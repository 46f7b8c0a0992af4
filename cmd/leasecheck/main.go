// Command leasecheck checks lock discipline around leasegen's //lease:
// directives. Add it to a module with
// go get -tool github.com/leasegen/leasegen/cmd/leasecheck, then run it
// directly or as a vet tool:
//
//	go tool leasecheck ./...
//	go vet -vettool="$(go tool -n leasecheck)" ./...
//
// Not -vettool=$(which leasecheck): without leasecheck on PATH that is an
// empty -vettool, and go vet silently runs only its own checks.
//
// Given only package patterns it prints each finding as go build prints
// positions, relative to the working directory when below it (as leasegen
// does), sorted, and exits 3 when there are findings, 1 on errors. With
// flags (-fix, -json, -c, ...) or as a vet tool it is the standard
// go/analysis driver.
package main

import (
	"fmt"
	"go/token"
	"io"
	"os"
	"sort"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/checker"
	"golang.org/x/tools/go/analysis/singlechecker"
	"golang.org/x/tools/go/packages"

	"github.com/leasegen/leasegen/gen"
	"github.com/leasegen/leasegen/gen/leasecheck"
)

func main() {
	args := os.Args[1:]
	if len(args) == 0 || driverArgs(args) {
		singlechecker.Main(leasecheck.Analyzer)
	}
	wd, _ := os.Getwd()
	os.Exit(run(wd, args, os.Stderr))
}

// driverArgs reports whether the standard driver must handle args: flags,
// or the .cfg file go vet passes to a vet tool.
func driverArgs(args []string) bool {
	for _, a := range args {
		if strings.HasPrefix(a, "-") || strings.HasSuffix(a, ".cfg") {
			return true
		}
	}
	return false
}

// run checks the packages matching patterns (with their tests, as the
// standard driver does) and prints findings relative to dir.
func run(dir string, patterns []string, stderr io.Writer) int {
	pkgs, err := packages.Load(&packages.Config{Mode: packages.LoadAllSyntax | packages.NeedModule, Dir: dir, Tests: true}, patterns...)
	if err != nil {
		fmt.Fprintf(stderr, "leasecheck: %v\n", err)
		return 1
	}
	if len(pkgs) == 0 {
		fmt.Fprintf(stderr, "leasecheck: %s matched no packages\n", strings.Join(patterns, " "))
		return 1
	}
	code := 0
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		for _, e := range p.Errors {
			pos := e.Pos
			if file, rest, ok := strings.Cut(pos, ":"); ok {
				pos = gen.ShortPath(dir, file) + ":" + rest
			}
			if pos == "" || pos == "-" {
				fmt.Fprintln(stderr, e.Msg)
			} else {
				fmt.Fprintf(stderr, "%s: %s\n", pos, e.Msg)
			}
			code = 1
		}
	})
	g, err := checker.Analyze([]*analysis.Analyzer{leasecheck.Analyzer}, pkgs, nil)
	if err != nil {
		fmt.Fprintf(stderr, "leasecheck: %v\n", err)
		return 1
	}
	type finding struct {
		pos token.Position
		msg string
	}
	seen := map[finding]bool{} // a file of p is checked again in p's test variant
	var out []finding
	for act := range g.All() {
		if act.Err != nil {
			fmt.Fprintf(stderr, "leasecheck: %s: %v\n", act.Package.PkgPath, act.Err)
			code = 1
			continue
		}
		if !act.IsRoot {
			continue
		}
		for _, d := range act.Diagnostics {
			f := finding{act.Package.Fset.Position(d.Pos), d.Message}
			f.pos.Filename = gen.ShortPath(dir, f.pos.Filename)
			f.pos.Offset = 0
			if !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].pos, out[j].pos
		if a.Filename != b.Filename {
			return a.Filename < b.Filename
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Column != b.Column {
			return a.Column < b.Column
		}
		return out[i].msg < out[j].msg
	})
	for _, f := range out {
		fmt.Fprintf(stderr, "%s: %s\n", f.pos, f.msg)
	}
	if code == 0 && len(out) > 0 {
		code = 3 // as the standard driver: findings, no errors
	}
	return code
}
