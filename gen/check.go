package gen

import (
	"go/ast"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/tools/go/packages"

	"github.com/leasegen/leasegen/templates"
)

// Problem is a positioned diagnostic about a directive.
type Problem struct {
	Pos token.Pos
	Msg string
}

// Protected is an annotated function and its wrapper.
type Protected struct {
	Func    *types.Func
	Decl    *ast.FuncDecl
	Wrapper string // the generated wrapper's name (a method when Func is one)
	Fence   bool   // the lease mints fencing tokens
	Leader  bool   // a //lease:leader: Wrapper campaigns and runs Func once per term
	// SameParams: the wrapper takes exactly Func's parameters (no added
	// *lease.Client), so a call can be redirected by renaming.
	SameParams bool
}

// Checked is what CheckPackage found.
type Checked struct {
	Problems  []Problem
	Protected []Protected
	// Output is the file leasegen would write, or nil when the package
	// has no directives or has problems.
	Output []byte
	// Generated names the files in the package that leasegen wrote.
	Generated []*ast.File
}

// CheckPackage runs leasegen's checks on an already type-checked package
// (for analyzers, which get one from the driver) and renders what
// leasegen would write. Files that leasegen generated are recognised and
// left out of the checks.
func CheckPackage(fset *token.FileSet, files []*ast.File, pkg *types.Package, info *types.Info) *Checked {
	p := &packages.Package{PkgPath: pkg.Path(), Name: pkg.Name(), Syntax: files, Types: pkg, TypesInfo: info, Fset: fset}
	wd, _ := os.Getwd() // positions in messages, as the driver prints its own
	el := &errList{dir: wd, fset: fset}
	g := newPkgGen(p, fset, el)
	// The names of the internal test files and of the files leasegen's
	// build leaves out, as leasegen reads them from the directory: the
	// rendering must not depend on whether files holds them (a package's
	// test variant, a build with other tags) or not.
	// Files by where they are, not where a //line comment says they are.
	for _, f := range files {
		if name := fset.PositionFor(f.Pos(), false).Filename; !isTestFile(name) && !g.generated[fset.Position(f.Pos()).Filename] {
			seen := map[string]bool{}
			for _, f := range files {
				seen[fset.PositionFor(f.Pos(), false).Filename] = true
			}
			_, internal := parseTests(fset, filepath.Dir(name), pkg.Name())
			g.unseenNames = declNames(append(internal, parseOthers(fset, filepath.Dir(name), pkg.Name(), func(path string) bool { return seen[path] })...))
			break
		}
	}
	m := g.build()
	if len(m.Wrappers) > 0 || len(m.Decorators) > 0 {
		g.refuseCgo()
	}
	c := &Checked{Protected: g.protected}
	for _, f := range files {
		if isGeneratedFile(f) {
			c.Generated = append(c.Generated, f)
		}
	}
	if len(el.raw) == 0 && (len(m.Wrappers) > 0 || len(m.Decorators) > 0) {
		out, err := templates.Render(m)
		if err == nil && !g.shadowedPredeclared(m) {
			c.Output = out
		}
	}
	c.Problems = el.raw
	return c
}

// refuseCgo reports, at its first import "C", a package that uses cgo:
// leasegen refuses it when loading (see load), so an analyzer must not ask
// for a go generate that would fail.
func (g *pkgGen) refuseCgo() {
	var first *ast.ImportSpec
	var names []string
	for _, f := range g.files() {
		for _, imp := range f.Imports {
			if imp.Path.Value == `"C"` {
				if first == nil {
					first = imp
				}
				names = append(names, filepath.Base(g.fset.Position(f.Pos()).Filename))
				break
			}
		}
	}
	if first != nil {
		g.errorf(first.Path.Pos(), "package %s uses cgo (%s): leasegen reads packages without cgo; move the leased functions to a package without cgo", g.pkg.PkgPath, strings.Join(names, ", "))
	}
}
