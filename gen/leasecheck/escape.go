package leasecheck

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/cfg"

	"github.com/leasegen/leasegen/gen"
)

// checkEscape reports goroutines started inside a protected function that
// use its context and may still run after it returns: the lease is
// released then, and the goroutine works unprotected.
//
// A goroutine is awaited when every path from its go statement to a return
// of the function passes a wait on something the goroutine signals, as
// lostcancel follows paths to a return that skip the cancel:
//
//   - a sync.WaitGroup it calls Done on (wg.Wait(), also deferred);
//   - a channel it closes or sends on, received from (<-done, v := <-errc,
//     return <-errc, for range ch, a select whose every case receives from
//     such a channel).
//
// A goroutine started by calling a named function signals what it is
// given: a channel or a *sync.WaitGroup among its arguments. errgroup's
// g.Go and sync.WaitGroup.Go start no go statement of the function and
// pass: their Wait is the caller's business.
func checkEscape(pass *analysis.Pass, r *reporter, ps []gen.Protected) {
	for _, p := range ps {
		if p.Decl.Body == nil {
			continue
		}
		var g *cfg.CFG // built on the first goroutine that needs it
		ast.Inspect(p.Decl.Body, func(n ast.Node) bool {
			st, ok := n.(*ast.GoStmt)
			if !ok || !usesParam(pass.TypesInfo, st.Call, p.Decl, 0) {
				return true
			}
			if g == nil {
				g = cfg.New(p.Decl.Body, mayReturn(pass.TypesInfo))
			}
			if sig := signals(pass.TypesInfo, st); len(sig) > 0 && awaited(pass.TypesInfo, g, p.Decl.Body, st, sig) {
				return true
			}
			r.report(analysis.Diagnostic{Pos: st.Go, Category: "escape",
				Message: fmt.Sprintf("lease: goroutine uses %s's lease context and may outlive the lease: wait for it before returning (sync.WaitGroup, errgroup, or a channel it closes or sends on, received before return), or explain with //lease:ignore escape <reason>", p.Func.Name())})
			return true
		})
	}
}

// signals returns what the goroutine of st signals when it is done or
// has a result: channels it closes or sends on and WaitGroups it calls
// Done on (from a func literal's body), or the channels and WaitGroups a
// named function is given.
func signals(info *types.Info, st *ast.GoStmt) map[types.Object]bool {
	out := map[types.Object]bool{}
	lit, ok := ast.Unparen(st.Call.Fun).(*ast.FuncLit)
	if !ok {
		for _, a := range st.Call.Args {
			if u, ok := a.(*ast.UnaryExpr); ok && u.Op == token.AND {
				a = u.X
			}
			if obj := refObj(info, a); obj != nil && (isChan(obj.Type()) || isWaitGroup(obj.Type())) {
				out[obj] = true
			}
		}
		return out
	}
	ast.Inspect(lit.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SendStmt:
			if obj := refObj(info, n.Chan); obj != nil {
				out[obj] = true
			}
		case *ast.CallExpr:
			if id, ok := ast.Unparen(n.Fun).(*ast.Ident); ok && id.Name == "close" && len(n.Args) == 1 {
				if _, builtin := info.Uses[id].(*types.Builtin); builtin {
					if obj := refObj(info, n.Args[0]); obj != nil {
						out[obj] = true
					}
				}
			}
			if sel, ok := ast.Unparen(n.Fun).(*ast.SelectorExpr); ok && sel.Sel.Name == "Done" {
				if obj := refObj(info, sel.X); obj != nil && isWaitGroup(obj.Type()) {
					out[obj] = true
				}
			}
		}
		return true
	})
	return out
}

// awaited reports whether every path from st to a return of the function
// waits on one of sig.
func awaited(info *types.Info, g *cfg.CFG, body *ast.BlockStmt, st *ast.GoStmt, sig map[types.Object]bool) bool {
	// A deferred wait anywhere in the body runs at every return.
	deferred := false
	for _, s := range body.List {
		if d, ok := s.(*ast.DeferStmt); ok && waits(info, d, sig, nil, true) {
			deferred = true
		}
	}
	if deferred {
		return true
	}
	// The comm statements of a select are evaluated in the block before
	// the cases: a receive there waits only when every case receives.
	selects := map[ast.Node]*ast.SelectStmt{}
	ast.Inspect(body, func(n ast.Node) bool {
		if s, ok := n.(*ast.SelectStmt); ok {
			for _, c := range s.Body.List {
				if comm := c.(*ast.CommClause).Comm; comm != nil {
					selects[comm] = s
				}
			}
		}
		return true
	})
	var start *cfg.Block
	at := 0
	for _, b := range g.Blocks {
		for i, n := range b.Nodes {
			if n == st {
				start, at = b, i+1
			}
		}
	}
	if start == nil {
		return false // unreachable go statement
	}
	seen := map[*cfg.Block]bool{}
	// escapes reports whether a path from b.Nodes[from:] reaches an exit
	// without waiting.
	var escapes func(b *cfg.Block, from int) bool
	escapes = func(b *cfg.Block, from int) bool {
		for _, n := range b.Nodes[from:] {
			if waits(info, n, sig, selects, false) {
				return false
			}
		}
		if len(b.Succs) == 0 {
			return b.Return() != nil || !endsInNoReturn(info, b)
		}
		for _, s := range b.Succs {
			if !seen[s] {
				seen[s] = true
				if escapes(s, 0) {
					return true
				}
			}
		}
		return false
	}
	return !escapes(start, at)
}

// waits reports whether n waits on one of sig: receives from such a
// channel (ranges over it), or calls Wait on such a WaitGroup. Func
// literals are not entered (their code runs later, if at all) unless
// inLits, for a deferred func.
func waits(info *types.Info, n ast.Node, sig map[types.Object]bool, selects map[ast.Node]*ast.SelectStmt, inLits bool) bool {
	if s := selects[n]; s != nil {
		// Waits only if every case receives from a signalled channel.
		for _, c := range s.Body.List {
			comm := c.(*ast.CommClause).Comm
			if comm == nil || !waits(info, comm, sig, nil, false) {
				return false
			}
		}
		return true
	}
	if e, ok := n.(ast.Expr); ok {
		// A range statement's X is a node of its own: range over a channel
		// receives until it is closed.
		if obj := refObj(info, e); obj != nil && sig[obj] && isChan(obj.Type()) {
			return true
		}
	}
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			return inLits
		case *ast.UnaryExpr:
			if n.Op == token.ARROW {
				if obj := refObj(info, n.X); obj != nil && sig[obj] {
					found = true
				}
			}
		case *ast.CallExpr:
			if sel, ok := ast.Unparen(n.Fun).(*ast.SelectorExpr); ok && sel.Sel.Name == "Wait" {
				if obj := refObj(info, sel.X); obj != nil && sig[obj] {
					found = true
				}
			}
		}
		return !found
	})
	return found
}

// refObj is the variable or field an expression names (x, s.done, &wg),
// or nil.
func refObj(info *types.Info, e ast.Expr) types.Object {
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		return info.ObjectOf(e)
	case *ast.SelectorExpr:
		return info.ObjectOf(e.Sel)
	case *ast.UnaryExpr:
		if e.Op == token.AND {
			return refObj(info, e.X)
		}
	}
	return nil
}

func isChan(t types.Type) bool {
	_, ok := t.Underlying().(*types.Chan)
	return ok
}

func isWaitGroup(t types.Type) bool {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "sync" && n.Obj().Name() == "WaitGroup"
}

// mayReturn: panic does not return; a path that panics is not an escape
// that waiting could fix.
func mayReturn(info *types.Info) func(*ast.CallExpr) bool {
	return func(call *ast.CallExpr) bool {
		if id, ok := ast.Unparen(call.Fun).(*ast.Ident); ok && id.Name == "panic" {
			_, builtin := info.Uses[id].(*types.Builtin)
			return !builtin
		}
		return true
	}
}

func endsInNoReturn(info *types.Info, b *cfg.Block) bool {
	if len(b.Nodes) == 0 {
		return false
	}
	es, ok := b.Nodes[len(b.Nodes)-1].(*ast.ExprStmt)
	if !ok {
		return false
	}
	call, ok := es.X.(*ast.CallExpr)
	return ok && !mayReturn(info)(call)
}
