package gen_test

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"strings"
	"testing"

	"github.com/leasegen/leasegen/gen"
)

// Found by round 31b: leasegen refuses a package that uses cgo ("uses cgo
// (x.go): leasegen reads packages without cgo"), but leasecheck, which
// gets the package from go vet or go/packages, asked for "run go
// generate" (stale), which then fails: a loop for the user. CheckPackage
// now reports the refusal as a problem at the import "C", so the analyzer
// says what leasegen says and asks for no regeneration.
func TestAdversary31b_CheckPackageRefusesCgo(t *testing.T) {
	fset := token.NewFileSet()
	srcs := map[string]string{
		"c.go": "package cg\n\nimport \"context\"\n\n//lease:lock a:{id} deadline=5s\nfunc work(ctx context.Context, id string) error { return nil }\n",
		"x.go": "package cg\n\n// int add(int a, int b) { return a + b; }\nimport \"C\"\n\nfunc Add() int { return int(C.add(1, 2)) }\n",
	}
	var files []*ast.File
	for _, name := range []string{"c.go", "x.go"} {
		f, err := parser.ParseFile(fset, name, srcs[name], parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Defs: map[*ast.Ident]types.Object{}, Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}, Implicits: map[ast.Node]types.Object{}}
	conf := types.Config{Importer: importer.Default(), FakeImportC: true}
	pkg, err := conf.Check("example.com/cg", fset, files, info)
	if err != nil {
		t.Fatal(err)
	}
	chk := gen.CheckPackage(fset, files, pkg, info)
	if chk.Output != nil {
		t.Error("CheckPackage renders an output for a package leasegen refuses")
	}
	var msgs []string
	for _, p := range chk.Problems {
		msgs = append(msgs, fset.Position(p.Pos).String()+": "+p.Msg)
	}
	want := `x.go:4:8: lease: package example.com/cg uses cgo (x.go): leasegen reads packages without cgo`
	if len(msgs) != 1 || !strings.HasPrefix(msgs[0], want) {
		t.Errorf("problems = %q; want one starting %q", msgs, want)
	}
}
