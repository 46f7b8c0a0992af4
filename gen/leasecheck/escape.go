package leasecheck

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"slices"
	"strings"

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
	var decls map[*types.Func]*ast.FuncDecl // built on the first goroutine that needs it
	for _, p := range ps {
		if p.Decl.Body == nil {
			continue
		}
		var g *cfg.CFG // built on the first goroutine that needs it
		lits := map[*ast.FuncLit]*cfg.CFG{}
		lctx := leaseContexts(pass.TypesInfo, p.Decl)
		ast.Inspect(p.Decl.Body, func(n ast.Node) bool {
			what := "goroutine uses %s's lease context and may outlive the lease"
			st, ok := n.(*ast.GoStmt)
			if !ok {
				// time.AfterFunc(d, f) runs f on a goroutine of its own
				// later: as go f() started at the call.
				call, isCall := n.(*ast.CallExpr)
				if !isCall || len(call.Args) != 2 || !isTimeAfterFunc(pass.TypesInfo, call) {
					return true
				}
				st = &ast.GoStmt{Go: call.Pos(), Call: &ast.CallExpr{Fun: call.Args[1], Lparen: call.Lparen, Rparen: call.Rparen}}
				what = "time.AfterFunc's function uses %s's lease context and may run after the lease ends"
			}
			if !goUses(pass.TypesInfo, st.Call, lctx) {
				return true
			}
			if decls == nil {
				decls = funcDecls(pass, nil)
			}
			if sig := signals(pass.TypesInfo, decls, st); len(sig) > 0 {
				// A closure that waits for its own goroutine before it
				// returns (a fan-out inside an errgroup task, a helper that
				// returns <-errc) leaves none running when it returns; a
				// closure run as a goroutine is checked as one itself
				// (TestAdversary64cEscapeWaitInsideClosure).
				if g == nil {
					g = cfg.New(p.Decl.Body, mayReturn(pass.TypesInfo))
				}
				// Only where the closure itself has returned before the
				// function does: called in place (or deferred), through a
				// local variable only ever called so, or run by an
				// errgroup's or WaitGroup's Go that every path waits for;
				// not one run by go, or by a Go never waited for
				// (TestAdversary65aEscapeClosureRunAsynchronously).
				if lit := enclosingLit(p.Decl.Body, st); lit != nil && closureDone(pass.TypesInfo, g, p.Decl.Body, lit) {
					if lits[lit] == nil {
						lits[lit] = cfg.New(lit.Body, mayReturn(pass.TypesInfo))
					}
					if awaited(pass.TypesInfo, lits[lit], lit.Body, st, sig, spawnLoop(lit.Body, st)) {
						return true
					}
				}
				if awaited(pass.TypesInfo, g, p.Decl.Body, st, sig, spawnLoop(p.Decl.Body, st)) {
					return true
				}
			}
			r.report(analysis.Diagnostic{Pos: st.Go, Category: "escape",
				Message: "lease: " + fmt.Sprintf(what, p.Func.Name()) + ": wait for it before returning (sync.WaitGroup, errgroup, or a channel it closes or sends on, received before return), or explain with //lease:ignore escape <reason>"})
			return true
		})
	}
}

// isTimeAfterFunc reports a call of time.AfterFunc.
func isTimeAfterFunc(info *types.Info, call *ast.CallExpr) bool {
	sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
	if !ok {
		return false
	}
	fn, ok := info.Uses[sel.Sel].(*types.Func)
	return ok && fn.Name() == "AfterFunc" && fn.Pkg() != nil && fn.Pkg().Path() == "time"
}

// leaseContexts returns the protected function's context parameter and
// the variables holding contexts derived from it (cctx, cancel :=
// context.WithTimeout(ctx, d); vctx := context.WithValue(cctx, k, v)):
// a goroutine given any of them runs under the lease.
func leaseContexts(info *types.Info, fd *ast.FuncDecl) map[types.Object]bool {
	out := map[types.Object]bool{}
	if obj := paramObj(info, fd, 0); obj != nil {
		out[obj] = true
	}
	if fd.Body == nil {
		return out
	}
	// derived: e is ctx (or a derived one), or a call given it as its
	// first argument, the parent by convention (context.WithTimeout(ctx,
	// d), errgroup.WithContext(ctx)); a context merely built from one of
	// ctx's values is not derived from it.
	derived := func(e ast.Expr) bool {
		switch e := ast.Unparen(e).(type) {
		case *ast.Ident:
			return out[info.Uses[e]]
		case *ast.CallExpr:
			if len(e.Args) > 0 {
				if id, ok := ast.Unparen(e.Args[0]).(*ast.Ident); ok {
					return out[info.Uses[id]]
				}
			}
		}
		return false
	}
	for grew := true; grew; {
		grew = false
		add := func(lhs []*ast.Ident) {
			for _, id := range lhs {
				obj := info.ObjectOf(id)
				if obj != nil && !out[obj] && isContext(obj.Type()) {
					out[obj] = true
					grew = true
				}
			}
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt: // cctx, cancel := context.WithTimeout(ctx, d)
				if len(n.Rhs) == 1 && derived(n.Rhs[0]) {
					var ids []*ast.Ident
					for _, l := range n.Lhs {
						if id, ok := l.(*ast.Ident); ok {
							ids = append(ids, id)
						}
					}
					add(ids)
				}
			case *ast.ValueSpec: // var cctx, cancel = context.WithTimeout(ctx, d)
				if len(n.Values) == 1 && derived(n.Values[0]) {
					add(n.Names)
				}
			}
			return true
		})
	}
	return out
}

// goUses reports whether the goroutine of call runs with one of lctx:
// its function (a literal's body, a method value's receiver) names one,
// or an argument does. The arguments are evaluated before the goroutine
// starts: one of a basic type (a request ID read from ctx, a length)
// carries no context into it
// (TestAdversary64cEscapeArgumentComputedFromContext).
func goUses(info *types.Info, call *ast.CallExpr, lctx map[types.Object]bool) bool {
	if usesAny(info, call.Fun, lctx) {
		return true
	}
	for _, a := range call.Args {
		if t := info.TypeOf(a); t != nil {
			if b, ok := t.Underlying().(*types.Basic); ok && b.Kind() != types.UnsafePointer && b.Kind() != types.Invalid {
				continue
			}
		}
		if usesAny(info, a, lctx) {
			return true
		}
	}
	return false
}

// usesAny reports whether n refers to one of objs (func literals
// included: a goroutine's body).
func usesAny(info *types.Info, n ast.Node, objs map[types.Object]bool) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && objs[info.Uses[id]] {
			found = true
		}
		return !found
	})
	return found
}

// signals returns what the goroutine of st signals when it is done or
// has a result: channels it closes or sends on and WaitGroups it calls
// Done on, in a func literal's body or in the body of the package's
// function or method it runs (a method closing its receiver's done
// channel: TestAdversary64cEscapeMethodClosesReceiverChannel), and the
// channels and WaitGroups a named function is given. A signal on a
// parameter is one on the argument the go statement gives it
// (go func(wg *sync.WaitGroup){ defer wg.Done() … }(&wg):
// TestAdversary64cEscapeSignalHandedAsArgument).
func signals(info *types.Info, decls map[*types.Func]*ast.FuncDecl, st *ast.GoStmt) map[types.Object]bool {
	out := map[types.Object]bool{}
	var ftype *ast.FuncType
	var body *ast.BlockStmt
	args := map[types.Object]types.Object{}
	if lit, ok := ast.Unparen(st.Call.Fun).(*ast.FuncLit); ok {
		ftype, body = lit.Type, lit.Body
	} else {
		for _, a := range st.Call.Args {
			if obj := refObj(info, a); obj != nil && (isChan(obj.Type()) || isWaitGroup(obj.Type())) {
				out[obj] = true
			}
		}
		if f, _ := calleeFunc(info, st.Call); f != nil {
			if fd := decls[f.Origin()]; fd != nil {
				ftype, body = fd.Type, fd.Body
				// The receiver is the value the go statement names
				// (go d.run(ctx) with run closing its receiver d:
				// TestAdversary65aEscapeMethodSignalNotSeen).
				if sel, ok := ast.Unparen(st.Call.Fun).(*ast.SelectorExpr); ok && fd.Recv != nil && len(fd.Recv.List) == 1 && len(fd.Recv.List[0].Names) == 1 {
					if obj := info.Defs[fd.Recv.List[0].Names[0]]; obj != nil {
						args[obj] = refObj(info, sel.X)
					}
				}
			}
		}
	}
	if body == nil {
		return out
	}
	// The arguments given to the parameters (none to a variadic one
	// without ...: they arrive in a new slice).
	i := 0
	for _, field := range ftype.Params.List {
		names := field.Names
		if len(names) == 0 {
			names = []*ast.Ident{nil}
		}
		for _, name := range names {
			if name != nil && i < len(st.Call.Args) {
				if _, variadic := field.Type.(*ast.Ellipsis); !variadic || st.Call.Ellipsis.IsValid() {
					if obj := info.Defs[name]; obj != nil {
						args[obj] = refObj(info, st.Call.Args[i])
					}
				}
			}
			i++
		}
	}
	add := func(obj types.Object) {
		if obj == nil {
			return
		}
		if arg, isParam := args[obj]; isParam {
			obj = arg // nil: an argument that names no variable
		}
		if obj != nil {
			out[obj] = true
		}
	}
	// The body, and the bodies of the package's functions it calls (a
	// helper method that closes a field: defer w.finish()), whose own
	// parameters name nothing of the caller's.
	seen := map[*ast.BlockStmt]bool{}
	var inspect func(b *ast.BlockStmt)
	inspect = func(b *ast.BlockStmt) {
		if seen[b] {
			return
		}
		seen[b] = true
		ast.Inspect(b, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SendStmt:
				add(refObj(info, n.Chan))
			case *ast.CallExpr:
				if id, ok := ast.Unparen(n.Fun).(*ast.Ident); ok && id.Name == "close" && len(n.Args) == 1 {
					if _, builtin := info.Uses[id].(*types.Builtin); builtin {
						add(refObj(info, n.Args[0]))
					}
				}
				if sel, ok := ast.Unparen(n.Fun).(*ast.SelectorExpr); ok && sel.Sel.Name == "Done" {
					if obj := refObj(info, sel.X); obj != nil && isWaitGroup(obj.Type()) {
						add(obj)
					}
				}
				if f, _ := calleeFunc(info, n); f != nil {
					if fd := decls[f.Origin()]; fd != nil && len(seen) < 32 {
						inspect(fd.Body)
					}
				}
			}
			return true
		})
	}
	inspect(body)
	return out
}

// funcDecls maps the package's functions and methods to their
// declarations, but for those in the files of skip.
func funcDecls(pass *analysis.Pass, skip map[*ast.File]bool) map[*types.Func]*ast.FuncDecl {
	out := map[*types.Func]*ast.FuncDecl{}
	for _, f := range pass.Files {
		if skip[f] {
			continue
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				if obj, ok := pass.TypesInfo.Defs[fd.Name].(*types.Func); ok {
					out[obj] = fd
				}
			}
		}
	}
	return out
}

// closureDone reports whether lit, a func literal directly in body (not
// in another literal), has returned on every path out of body: it is
// called where it is defined (or deferred), or held by a local variable
// that is only ever called so, or run by the Go of an errgroup.Group or
// a sync.WaitGroup whose Wait every path reaches.
func closureDone(info *types.Info, g *cfg.CFG, body *ast.BlockStmt, lit *ast.FuncLit) bool {
	var stack, path []ast.Node
	ast.Inspect(body, func(n ast.Node) bool {
		if path != nil {
			return false
		}
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		stack = append(stack, n)
		if n == lit {
			path = slices.Clone(stack)
			return false
		}
		return true
	})
	if len(path) < 2 {
		return false
	}
	for _, n := range path[:len(path)-1] {
		if _, ok := n.(*ast.FuncLit); ok {
			return false // in another closure: not followed
		}
	}
	parent := path[len(path)-2]
	for i := len(path) - 2; i > 0; i-- {
		if _, ok := parent.(*ast.ParenExpr); !ok {
			break
		}
		parent = path[i-1]
	}
	grand := ast.Node(nil)
	if i := slices.Index(path, parent); i > 0 {
		grand = path[i-1]
	}
	// calledInPlace: a call of the closure that is not a go statement's.
	calledInPlace := func(call *ast.CallExpr, above ast.Node) bool {
		gs, isGo := above.(*ast.GoStmt)
		return !isGo || gs.Call != call
	}
	switch p := parent.(type) {
	case *ast.CallExpr:
		if ast.Unparen(p.Fun) == lit {
			return calledInPlace(p, grand)
		}
		// x.Go(lit): done once x.Wait() is reached on every path.
		sel, ok := ast.Unparen(p.Fun).(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Go" || !isGroup(info.TypeOf(sel.X)) {
			return false
		}
		x := refObj(info, sel.X)
		if x == nil {
			return false
		}
		st := &ast.GoStmt{Go: p.Pos(), Call: p}
		return awaited(info, g, body, st, map[types.Object]bool{x: true}, spawnLoop(body, st))
	case *ast.AssignStmt:
		if len(p.Lhs) != 1 || len(p.Rhs) != 1 {
			return false
		}
		id, ok := p.Lhs[0].(*ast.Ident)
		if !ok {
			return false
		}
		return onlyCalled(info, body, info.ObjectOf(id))
	case *ast.ValueSpec:
		if len(p.Names) != 1 || len(p.Values) != 1 {
			return false
		}
		return onlyCalled(info, body, info.ObjectOf(p.Names[0]))
	}
	return false
}

// onlyCalled reports whether every use of v in body calls it, not as a
// go statement's call (nor passes it on, nor assigns it).
func onlyCalled(info *types.Info, body *ast.BlockStmt, v types.Object) bool {
	if v == nil {
		return false
	}
	ok := true
	var stack []ast.Node
	ast.Inspect(body, func(n ast.Node) bool {
		if !ok {
			return false
		}
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		stack = append(stack, n)
		id, isID := n.(*ast.Ident)
		if !isID || info.Uses[id] != v {
			return true
		}
		call, isCall := ast.Node(nil), false
		if len(stack) >= 2 {
			if c, is := stack[len(stack)-2].(*ast.CallExpr); is && c.Fun == id {
				call, isCall = c, true
			}
		}
		if !isCall {
			ok = false
			return false
		}
		if len(stack) >= 3 {
			if gs, isGo := stack[len(stack)-3].(*ast.GoStmt); isGo && gs.Call == call {
				ok = false
			}
		}
		return true
	})
	return ok
}

// isGroup reports an errgroup.Group or a sync.WaitGroup (or a pointer to
// one).
func isGroup(t types.Type) bool {
	if t == nil {
		return false
	}
	if isWaitGroup(t) {
		return true
	}
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && strings.HasSuffix(n.Obj().Pkg().Path(), "/errgroup") && n.Obj().Name() == "Group"
}

// enclosingLit returns the innermost func literal in body around st, or
// nil.
func enclosingLit(body *ast.BlockStmt, st *ast.GoStmt) *ast.FuncLit {
	var lit *ast.FuncLit
	ast.Inspect(body, func(n ast.Node) bool {
		if n == nil || n.Pos() > st.Pos() || n.End() < st.End() {
			return false
		}
		if l, ok := n.(*ast.FuncLit); ok {
			lit = l
		}
		return true
	})
	return lit
}

// spawnLoop returns the one loop around st in body ("" if none, if nested,
// or if it starts more than one goroutine per iteration) as
// the text of its header: a range over the same expression, or a for with
// the same init and condition, runs as many times (see awaited).
func spawnLoop(body *ast.BlockStmt, st *ast.GoStmt) string {
	loop, depth := enclosingLoop(body, st)
	if depth != 1 {
		return "" // nested loops start more goroutines than one header runs
	}
	gos := 0
	ast.Inspect(loop, func(n ast.Node) bool {
		if _, ok := n.(*ast.GoStmt); ok {
			gos++
		}
		return true
	})
	if gos != 1 {
		return "" // several goroutines per iteration, one wait each is not enough
	}
	return loopKey(loop)
}

func loopKey(n ast.Node) string {
	switch l := n.(type) {
	case *ast.RangeStmt:
		return "range " + types.ExprString(l.X)
	case *ast.ForStmt:
		if l.Cond == nil {
			return ""
		}
		init := ""
		if as, ok := l.Init.(*ast.AssignStmt); ok && len(as.Rhs) == 1 {
			init = types.ExprString(as.Rhs[0])
		}
		return "for " + init + "; " + types.ExprString(l.Cond)
	}
	return ""
}

// awaited reports whether every path from st to a return of the function
// waits on one of sig. When st is in a loop (loop: its header), a later
// loop with the same header whose body waits counts as waiting: it runs
// as many times, one wait per goroutine (fan-in).
func awaited(info *types.Info, g *cfg.CFG, body *ast.BlockStmt, st *ast.GoStmt, sig map[types.Object]bool, loop string) bool {
	// A deferred wait at the body's top level before the go statement is
	// registered on every path to a return after it. One after the go
	// statement (or nested) waits only on the paths that pass it: a return
	// before it leaves the goroutine running (see the graph walk below).
	for _, s := range body.List {
		if d, ok := s.(*ast.DeferStmt); ok && d.End() <= st.Pos() && waits(info, d, sig, nil, true) {
			return true
		}
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
	// A go statement inside a func literal (start := func() { go ... })
	// is not a node of the function's graph: the paths start after the
	// node that holds the literal, where it can first be called. One held
	// by a defer runs at the return itself.
	var start *cfg.Block
	at := 0
	for _, b := range g.Blocks {
		for i, n := range b.Nodes {
			if n == st || n.Pos() <= st.Pos() && st.End() <= n.End() && start == nil {
				if _, ok := n.(*ast.DeferStmt); ok {
					return false
				}
				start, at = b, i+1
			}
		}
	}
	if start == nil {
		return false // unreachable go statement
	}
	// A goroutine started in a loop is one of many: a single receive after
	// the loop waits for one of them (hedged requests return the first
	// answer and leave the rest running). Outside the loop only a Wait, a
	// range over the channel or a matching loop (above) waits for all.
	spawn, _ := enclosingLoop(body, st)
	// A range over the channel that can return or break early stops
	// receiving before the last goroutine sent: it waits for one, not all
	// (TestAdversary64cEscapeRangeLoopEarlyExit).
	partial := map[ast.Node]bool{}
	ast.Inspect(body, func(n ast.Node) bool {
		if rs, ok := n.(*ast.RangeStmt); ok && exitsEarly(rs.Body, true) {
			partial[rs.X] = true
		}
		return true
	})
	counts := func(n ast.Node) bool {
		if spawn == nil || spawn.Pos() <= n.Pos() && n.End() <= spawn.End() {
			return true
		}
		return !partial[n] && waitsOn(info, n, sig, isDefer(n), false) // waitsAll, into a deferred func
	}
	seen := map[*cfg.Block]bool{}
	// escapes reports whether a path from b.Nodes[from:] reaches an exit
	// without waiting.
	var escapes func(b *cfg.Block, from int) bool
	escapes = func(b *cfg.Block, from int) bool {
		if loop != "" && from == 0 && (b.Kind == cfg.KindRangeLoop || b.Kind == cfg.KindForLoop) &&
			b.Stmt.Pos() > st.End() && loopKey(b.Stmt) == loop && loopWaits(info, b.Stmt, sig) {
			return false
		}
		if b.Kind == cfg.KindSelectCaseBody && from == 0 {
			// The case ran because its comm did: a receive from a
			// signalled channel has waited.
			if cc, ok := b.Stmt.(*ast.CommClause); ok && cc.Comm != nil && waits(info, cc.Comm, sig, nil, false) && counts(cc.Comm) {
				return false
			}
		}
		for _, n := range b.Nodes[from:] {
			// A defer passed on the way runs its wait at the return.
			if waits(info, n, sig, selects, isDefer(n)) && counts(n) {
				return false
			}
		}
		if len(b.Succs) == 0 {
			if b.Kind == cfg.KindSelectAfterCase && len(b.Nodes) == 0 {
				// After the last case of a select without default: no
				// case ran, which a select never does. (A default's body
				// is this block's nodes.)
				return false
			}
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

func isDefer(n ast.Node) bool {
	_, ok := n.(*ast.DeferStmt)
	return ok
}

// enclosingLoop returns the innermost loop around st in body (not crossing
// a func literal), or nil, and how many loops are around it.
func enclosingLoop(body *ast.BlockStmt, st *ast.GoStmt) (loop ast.Node, depth int) {
	ast.Inspect(body, func(n ast.Node) bool {
		if n == nil || n.Pos() > st.Pos() || n.End() < st.End() {
			return false
		}
		switch n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.RangeStmt, *ast.ForStmt:
			loop, depth = n, depth+1
		}
		return true
	})
	return loop, depth
}

// waitsAll reports whether n waits for every goroutine that signals sig:
// a Wait on such a WaitGroup, or a range over such a channel (until it is
// closed), not a single receive.
func waitsAll(info *types.Info, n ast.Node, sig map[types.Object]bool) bool {
	return waitsOn(info, n, sig, false, false)
}

// loopWaits reports whether the body of loop n waits on one of sig in a
// statement at its top level that every iteration runs (a receive, a Wait,
// an if's init or condition).
func loopWaits(info *types.Info, n ast.Node, sig map[types.Object]bool) bool {
	var body *ast.BlockStmt
	switch l := n.(type) {
	case *ast.RangeStmt:
		body = l.Body
	case *ast.ForStmt:
		body = l.Body
	}
	if body == nil {
		return false
	}
	// A return, break or goto in the loop may leave it before every
	// goroutine was waited for (return on the first error).
	if exitsEarly(body, false) {
		return false
	}
	for _, s := range body.List {
		switch s := s.(type) {
		case *ast.IfStmt:
			// if err := <-errc; ... : the init runs on every iteration.
			if s.Init != nil && waits(info, s.Init, sig, nil, false) || waits(info, s.Cond, sig, nil, false) {
				return true
			}
		case *ast.ExprStmt, *ast.AssignStmt, *ast.DeclStmt:
			// Not a compound statement, whose receive might be skipped.
			if waits(info, s, sig, nil, false) {
				return true
			}
		}
		if continues(s) {
			return false // iterations that continue here skip the wait below
		}
	}
	return false
}

// exitsEarly reports whether a loop body may leave the loop before its
// range ends: a return, a goto, a labelled break, or a break outside the
// for, range, switch and select statements nested in it (or, with
// labelled, a labelled continue, which may continue an outer loop),
// outside func literals. A break that leaves only a nested statement
// does not (TestAdversary65aEscapeRangeInnerBreak).
func exitsEarly(body *ast.BlockStmt, labelled bool) bool {
	exits := false
	var walk func(n ast.Node, nested bool)
	walk = func(n ast.Node, nested bool) {
		ast.Inspect(n, func(m ast.Node) bool {
			if exits || m == nil {
				return false
			}
			switch m := m.(type) {
			case *ast.FuncLit:
				return false
			case *ast.ForStmt, *ast.RangeStmt, *ast.SwitchStmt, *ast.TypeSwitchStmt, *ast.SelectStmt:
				if m != n {
					walk(m, true) // an unlabelled break in it leaves only it
					return false
				}
			case *ast.ReturnStmt:
				exits = true
			case *ast.BranchStmt:
				switch {
				case m.Tok == token.GOTO,
					m.Tok == token.BREAK && (m.Label != nil || !nested),
					labelled && m.Tok == token.CONTINUE && m.Label != nil:
					exits = true
				}
			}
			return !exits
		})
	}
	walk(body, false)
	return exits
}

// continues reports whether s may continue the loop whose body it is in:
// an unlabelled continue outside the loops nested in s, or any labelled
// one.
func continues(s ast.Stmt) bool {
	found := false
	var visit func(n ast.Node, nested bool)
	visit = func(n ast.Node, nested bool) {
		ast.Inspect(n, func(x ast.Node) bool {
			switch x := x.(type) {
			case *ast.FuncLit:
				return false
			case *ast.ForStmt, *ast.RangeStmt:
				if x != n {
					visit(x, true)
					return false
				}
			case *ast.BranchStmt:
				if x.Tok == token.CONTINUE && (x.Label != nil || !nested) {
					found = true
				}
			}
			return !found
		})
	}
	switch s.(type) {
	case *ast.ForStmt, *ast.RangeStmt:
		visit(s, true) // a loop of the body: its continues are its own
	default:
		visit(s, false)
	}
	return found
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
	return waitsOn(info, n, sig, inLits, true)
}

// waitsOn is waits without selects; receives says whether a single
// receive counts (waitsAll: no).
func waitsOn(info *types.Info, n ast.Node, sig map[types.Object]bool, inLits, receives bool) bool {
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
			if receives && n.Op == token.ARROW {
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
