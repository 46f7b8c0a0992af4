package leasecheck

import (
	"fmt"
	"go/ast"
	"go/types"
	"sort"
	"strings"

	"golang.org/x/tools/go/analysis"

	"github.com/leasegen/leasegen/gen"
)

// checkUnreachedTokens reports token reads (lease.TokenFrom, FencedFrom,
// FencedFromKey, fence.From, FromKey) in functions that no fenced lease can reach: outside a
// fenced lease they always find no token, so the write they guard is
// never fenced.
//
// Reachability is computed within the package, from the functions a fenced
// lease may run: fenced protected functions, and, since other packages'
// leases may call them, exported functions and methods, functions used as
// values, and methods that may implement one of the package's interfaces.
// A reader reached from none of them is reported; if unfenced protected
// functions reach it, the message names them (fence is missing there).
// Readers that are protected themselves are checkFence's.
func checkUnreachedTokens(pass *analysis.Pass, r *reporter, ps []gen.Protected, generated map[*ast.File]bool) {
	protected := map[*types.Func]gen.Protected{}
	for _, p := range ps {
		protected[p.Func] = p
	}
	// The package's interfaces are not only its named package-level ones:
	// a struct field's inline interface{ put(ctx) error }, a generic
	// constraint, a type declared in a function
	// (TestAdversary64cFenceInlineInterfaceUnreached). Every type
	// expression of the package is in TypesInfo.Types. Exported methods
	// are roots anyway; an unexported one can only implement interfaces
	// declared in this package.
	ifaceMethods := map[string]bool{}
	addIface := func(t types.Type) {
		if it, ok := t.Underlying().(*types.Interface); ok {
			for i := range it.NumMethods() {
				if m := it.Method(i); m.Exported() || m.Pkg() == pass.Pkg {
					ifaceMethods[m.Name()] = true
				}
			}
		}
	}
	for _, name := range pass.Pkg.Scope().Names() {
		if tn, ok := pass.Pkg.Scope().Lookup(name).(*types.TypeName); ok {
			addIface(tn.Type())
		}
	}
	for _, tv := range pass.TypesInfo.Types {
		if tv.IsType() {
			addIface(tv.Type)
		}
	}

	type node struct {
		decl  *ast.FuncDecl
		calls []*types.Func
		reads []*ast.Ident // calls of token readers
	}
	nodes := map[*types.Func]*node{}
	roots := map[*types.Func]bool{}
	var order []*types.Func
	for _, file := range pass.Files {
		if generated[file] {
			continue
		}
		for _, decl := range file.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			obj, _ := pass.TypesInfo.Defs[fd.Name].(*types.Func)
			if obj == nil {
				continue
			}
			n := &node{decl: fd}
			nodes[obj] = n
			order = append(order, obj)
			if obj.Exported() || (fd.Recv != nil && ifaceMethods[obj.Name()]) || protected[obj].Fence {
				roots[obj] = true
			}
			called := map[*ast.Ident]bool{}
			ast.Inspect(fd.Body, func(x ast.Node) bool {
				if call, ok := x.(*ast.CallExpr); ok {
					if f, id := calleeFunc(pass.TypesInfo, call); f != nil {
						called[id] = true
						if isTokenReader(f) {
							n.reads = append(n.reads, id)
						} else if f.Pkg() == pass.Pkg {
							n.calls = append(n.calls, f.Origin())
						}
					}
				}
				return true
			})
			// A function used as a value may be called from anywhere.
			ast.Inspect(fd.Body, func(x ast.Node) bool {
				if id, ok := x.(*ast.Ident); ok && !called[id] {
					if f, ok := pass.TypesInfo.Uses[id].(*types.Func); ok && f.Pkg() == pass.Pkg {
						roots[f.Origin()] = true
					}
				}
				return true
			})
		}
	}
	// Package-level values (var handlers = map[string]func{...}) too, but
	// not the generated signature ties.
	for _, file := range pass.Files {
		if generated[file] {
			continue
		}
		for _, decl := range file.Decls {
			if gd, ok := decl.(*ast.GenDecl); ok {
				ast.Inspect(gd, func(x ast.Node) bool {
					if id, ok := x.(*ast.Ident); ok {
						if f, ok := pass.TypesInfo.Uses[id].(*types.Func); ok && f.Pkg() == pass.Pkg {
							roots[f.Origin()] = true
						}
					}
					return true
				})
			}
		}
	}

	reach := func(from map[*types.Func]bool) map[*types.Func]bool {
		seen := map[*types.Func]bool{}
		var work []*types.Func
		for f := range from {
			seen[f] = true
			work = append(work, f)
		}
		for len(work) > 0 {
			f := work[len(work)-1]
			work = work[:len(work)-1]
			if n := nodes[f]; n != nil {
				for _, c := range n.calls {
					if !seen[c] {
						seen[c] = true
						work = append(work, c)
					}
				}
			}
		}
		return seen
	}
	fenced := reach(roots)
	for _, f := range order {
		n := nodes[f]
		if len(n.reads) == 0 || fenced[f] {
			continue
		}
		if _, ok := protected[f]; ok {
			continue // checkFence: a protected function reading its own lease's token
		}
		var unfenced []string
		for _, p := range ps {
			if !p.Fence && reach(map[*types.Func]bool{p.Func: true})[f] {
				unfenced = append(unfenced, p.Func.Name())
			}
		}
		sort.Strings(unfenced)
		msg := fmt.Sprintf("lease: %s reads a fencing token, but no fenced lease reaches it (no function with a fence directive calls it, directly or through others): it always finds none", f.Name())
		if len(unfenced) > 0 {
			msg = fmt.Sprintf("lease: %s reads a fencing token, but only leases without fence reach it (%s): add fence to their directives", f.Name(), strings.Join(unfenced, ", "))
		}
		r.report(analysis.Diagnostic{Pos: n.reads[0].Pos(), Category: "fence", Message: msg})
	}
}
