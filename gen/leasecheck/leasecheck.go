// Package leasecheck defines an Analyzer that checks lock discipline around
// leasegen's //lease: directives:
//
//   - directive: malformed or misplaced directives, with leasegen's own
//     messages (it runs the generator's checks);
//   - stale: lease_gen.go missing or out of date (a suggested fix rewrites it);
//   - bypass: a call to a protected function outside its generated wrapper
//     (a suggested fix calls the wrapper where it takes the same arguments),
//     or to a //lease:leader function outside its campaign;
//   - fence: a fenced lease whose function never reads its token,
//     TokenFrom inside a lease that has no fence, and token reads in
//     functions no fenced lease can reach;
//   - escape: a goroutine started inside a protected function (also a
//     function given to time.AfterFunc) that uses its context and that
//     some path returns without waiting for;
//   - order: two protected functions that take each other's leases in
//     opposite orders.
//
// A bypass, escape, fence or order finding that does not apply is answered
// with a reason on its line or the line above:
//
//	//lease:ignore escape the worker stops in Close before the lease ends
//
// A suppression without a reason, or one that suppresses nothing, is a
// finding itself.
package leasecheck

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"

	"github.com/leasegen/leasegen/gen"
)

// Analyzer is the leasecheck analyzer.
var Analyzer = &analysis.Analyzer{
	Name:      "leasecheck",
	Doc:       "check lock discipline around leasegen //lease: directives",
	URL:       "https://pkg.go.dev/github.com/leasegen/leasegen/gen/leasecheck",
	Requires:  []*analysis.Analyzer{inspect.Analyzer},
	Run:       run,
	FactTypes: []analysis.Fact{new(protectedFact), new(readsTokenFact)},
}

// protectedFact marks an exported protected function for other packages.
type protectedFact struct {
	Wrapper string
	Leader  bool // run by a //lease:leader wrapper
}

func (*protectedFact) AFact() {}
func (f *protectedFact) String() string {
	if f.Leader {
		return "run as leader by " + f.Wrapper
	}
	return "protected by " + f.Wrapper
}

// readsTokenFact marks a function that reads the fencing token from its
// context, directly or through the functions it calls.
type readsTokenFact struct{}

func (*readsTokenFact) AFact()         {}
func (*readsTokenFact) String() string { return "reads fencing token" }

const leasePkg = "github.com/leasegen/leasegen/runtime/lease"
const fencePkg = "github.com/leasegen/leasegen/runtime/fence"

func run(pass *analysis.Pass) (any, error) {
	chk := gen.CheckPackage(pass.Fset, pass.Files, pass.Pkg, pass.TypesInfo)
	for _, p := range chk.Problems {
		pass.Report(analysis.Diagnostic{Pos: p.Pos, Category: "directive", Message: p.Msg})
	}
	checkStale(pass, chk)

	protected := map[*types.Func]gen.Protected{}
	for _, p := range chk.Protected {
		protected[p.Func] = p
		if p.Func.Exported() {
			pass.ExportObjectFact(p.Func, &protectedFact{Wrapper: p.Wrapper, Leader: p.Leader})
		}
	}
	generated := map[*ast.File]bool{}
	for _, f := range chk.Generated {
		generated[f] = true
	}
	ins := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	r := newReporter(pass, generated)
	checkBypass(pass, r, ins, protected, generated)
	markTokenReaders(pass, generated)
	checkFence(pass, r, chk.Protected)
	checkUnreachedTokens(pass, r, chk.Protected, generated)
	checkEscape(pass, r, chk.Protected)
	checkOrder(pass, r, chk.Protected, generated)
	r.unused()
	return nil, nil
}

// checkStale compares lease_gen.go with what leasegen would write now.
func checkStale(pass *analysis.Pass, chk *gen.Checked) {
	if len(chk.Problems) > 0 {
		return // leasegen would refuse; the directive diagnostics say why
	}
	var existing *ast.File
	for _, f := range chk.Generated {
		existing = f
	}
	switch {
	case chk.Output == nil && existing == nil:
		return
	case chk.Output == nil:
		pass.Report(analysis.Diagnostic{Pos: existing.Package, Category: "stale", Message: "lease: generated file has no directives left: re-run go generate (leasegen removes it)"})
		return
	case existing == nil:
		pos := pass.Files[0].Package // a package with only decorators
		if len(chk.Protected) > 0 {
			pos = chk.Protected[0].Decl.Pos()
		}
		msg := "lease: no generated wrappers for this package's //lease: directives: run go generate"
		if !runsLeasegen(pass) {
			// go generate would do nothing: say what is missing.
			msg += " (no //go:generate line in this package runs leasegen: add //go:generate go tool leasegen to one of its files)"
		}
		pass.Report(analysis.Diagnostic{Pos: pos, Category: "stale", Message: msg})
		return
	}
	name := pass.Fset.File(existing.Pos()).Name()
	content, err := pass.ReadFile(name)
	if err != nil {
		content, err = os.ReadFile(name)
	}
	if err != nil {
		return
	}
	// A checkout with CRLF line endings (git core.autocrlf, the default on
	// Windows) holds the same Go source: compare the text, and write the
	// fix in the endings the file has (TestAdversary64cStaleCRLFCheckout).
	crlf := bytes.Contains(content, []byte("\r\n"))
	if crlf {
		content = bytes.ReplaceAll(content, []byte("\r\n"), []byte("\n"))
	}
	if bytes.Equal(content, chk.Output) {
		return
	}
	fixed := chk.Output
	if crlf {
		fixed = bytes.ReplaceAll(fixed, []byte("\n"), []byte("\r\n"))
	}
	tf := pass.Fset.File(existing.Pos())
	pass.Report(analysis.Diagnostic{
		Pos: existing.Package, Category: "stale",
		Message: fmt.Sprintf("lease: %s is stale: the directives or signatures changed since it was generated; run go generate", filepath.Base(name)),
		SuggestedFixes: []analysis.SuggestedFix{{
			Message:   "regenerate " + filepath.Base(name),
			TextEdits: []analysis.TextEdit{{Pos: token.Pos(tf.Base()), End: token.Pos(tf.Base() + tf.Size()), NewText: fixed}},
		}},
	})
}

// runsLeasegen reports that a //go:generate line of the package names
// leasegen. go generate reads more than the analyzed files: the test files
// (internal and external), and files built only with the "generate" tag it
// sets; so every .go file of the package's directories is read, whatever
// its build constraints (a hint wrongly given is worse than one missed).
func runsLeasegen(pass *analysis.Pass) bool {
	dirs := map[string]bool{}
	for _, f := range pass.Files {
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if isLeasegenLine(c.Text) {
					return true
				}
			}
		}
		dirs[filepath.Dir(pass.Fset.File(f.Pos()).Name())] = true
	}
	for dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return true // cannot tell: no hint
		}
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") {
				continue
			}
			content, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				return true
			}
			for line := range strings.Lines(string(content)) {
				if isLeasegenLine(strings.TrimRight(line, "\r\n")) {
					return true
				}
			}
		}
	}
	return false
}

// isLeasegenLine reports that line is a //go:generate line (as go generate
// recognizes them: the command after a space or a tab) naming leasegen.
func isLeasegenLine(line string) bool {
	return (strings.HasPrefix(line, "//go:generate ") || strings.HasPrefix(line, "//go:generate\t")) && strings.Contains(line, "leasegen")
}

// enclosingFunc returns the innermost function declaration around n.
func enclosingFunc(stack []ast.Node) *ast.FuncDecl {
	for i := len(stack) - 1; i >= 0; i-- {
		if fd, ok := stack[i].(*ast.FuncDecl); ok {
			return fd
		}
	}
	return nil
}

func calleeFunc(info *types.Info, call *ast.CallExpr) (*types.Func, *ast.Ident) {
	var id *ast.Ident
	fun := ast.Unparen(call.Fun)
	// A generic instantiation, f[T] or f[T1, T2], maybe of pkg.F.
	switch fn := fun.(type) {
	case *ast.IndexExpr:
		fun = ast.Unparen(fn.X)
	case *ast.IndexListExpr:
		fun = ast.Unparen(fn.X)
	}
	switch fn := fun.(type) {
	case *ast.Ident:
		id = fn
	case *ast.SelectorExpr:
		id = fn.Sel
	}
	if id == nil {
		return nil, nil
	}
	f, _ := info.Uses[id].(*types.Func)
	return f, id
}

// checkBypass reports calls to protected functions outside their wrappers.
func checkBypass(pass *analysis.Pass, r *reporter, ins *inspector.Inspector, protected map[*types.Func]gen.Protected, generated map[*ast.File]bool) {
	fileOf := map[token.Pos]*ast.File{}
	for _, f := range pass.Files {
		fileOf[f.FileStart] = f
	}
	ins.WithStack([]ast.Node{(*ast.CallExpr)(nil)}, func(n ast.Node, push bool, stack []ast.Node) bool {
		if !push {
			return true
		}
		call := n.(*ast.CallExpr)
		f, id := calleeFunc(pass.TypesInfo, call)
		if f == nil {
			return true
		}
		f = f.Origin()
		file := stack[0].(*ast.File)
		if generated[file] {
			return true
		}
		wrapper := ""
		same, leader := false, false
		if p, ok := protected[f]; ok {
			wrapper, same, leader = p.Wrapper, p.SameParams, p.Leader
			// The protected function may call itself (recursion under
			// the same lease).
			if fd := enclosingFunc(stack); fd != nil && pass.TypesInfo.Defs[fd.Name] == f {
				return true
			}
		} else {
			var fact protectedFact
			if !pass.ImportObjectFact(f, &fact) {
				return true
			}
			wrapper, leader = fact.Wrapper, fact.Leader
		}
		d := analysis.Diagnostic{
			Pos: id.Pos(), End: id.End(), Category: "bypass",
			Message: fmt.Sprintf("lease: call to %s bypasses its lease: call %s instead", f.Name(), wrapper),
		}
		if leader {
			d.Message = fmt.Sprintf("lease: call to %s bypasses its leader election: call %s instead (it campaigns and calls %s for every term won)", f.Name(), wrapper, f.Name())
		}
		if same {
			d.SuggestedFixes = []analysis.SuggestedFix{{
				Message:   "call " + wrapper,
				TextEdits: []analysis.TextEdit{{Pos: id.Pos(), End: id.End(), NewText: []byte(wrapper)}},
			}}
		}
		r.report(d)
		return true
	})
	checkValues(pass, r, ins, protected, generated)
}

// checkValues reports protected functions used as values (s.charge passed
// to a retry helper, stored in a field): whoever calls the value later
// calls the function without its lease.
func checkValues(pass *analysis.Pass, r *reporter, ins *inspector.Inspector, protected map[*types.Func]gen.Protected, generated map[*ast.File]bool) {
	ins.WithStack([]ast.Node{(*ast.Ident)(nil)}, func(n ast.Node, push bool, stack []ast.Node) bool {
		if !push || generated[stack[0].(*ast.File)] {
			return true
		}
		id := n.(*ast.Ident)
		f, ok := pass.TypesInfo.Uses[id].(*types.Func)
		if !ok {
			return true
		}
		f = f.Origin()
		// The expression that names f: x.f, pkg.f, (*T).f or f, maybe
		// instantiated (f[T]) or in parentheses.
		i := len(stack) - 1
		if i > 0 {
			if sel, ok := stack[i-1].(*ast.SelectorExpr); ok && sel.Sel == id {
				i--
			}
		}
		for i > 0 {
			switch p := stack[i-1].(type) {
			case *ast.ParenExpr:
				i--
				continue
			case *ast.IndexExpr:
				if p.X == stack[i] {
					i--
					continue
				}
			case *ast.IndexListExpr:
				if p.X == stack[i] {
					i--
					continue
				}
			}
			break
		}
		if i > 0 {
			switch p := stack[i-1].(type) {
			case *ast.CallExpr:
				if p.Fun == stack[i] {
					return true // a call: checkBypass's
				}
			case *ast.BinaryExpr:
				if p.Op == token.EQL || p.Op == token.NEQ {
					return true // compared (with nil), not called
				}
			}
		}
		wrapper, same := "", false
		if p, ok := protected[f]; ok {
			if fd := enclosingFunc(stack); fd != nil && pass.TypesInfo.Defs[fd.Name] == f {
				return true
			}
			wrapper, same = p.Wrapper, p.SameParams
		} else {
			var fact protectedFact
			if !pass.ImportObjectFact(f, &fact) {
				return true
			}
			wrapper = fact.Wrapper
		}
		d := analysis.Diagnostic{
			Pos: id.Pos(), End: id.End(), Category: "bypass",
			Message: fmt.Sprintf("lease: %s used as a value bypasses its lease (whoever calls it later runs it unprotected): use %s instead", f.Name(), wrapper),
		}
		if same {
			d.SuggestedFixes = []analysis.SuggestedFix{{
				Message:   "use " + wrapper,
				TextEdits: []analysis.TextEdit{{Pos: id.Pos(), End: id.End(), NewText: []byte(wrapper)}},
			}}
		}
		r.report(d)
		return true
	})
}

// isTokenReader reports whether f reads a fencing token from a context.
func isTokenReader(f *types.Func) bool {
	if f.Pkg() == nil {
		return false
	}
	switch f.Pkg().Path() + "." + f.Name() {
	case leasePkg + ".TokenFrom", leasePkg + ".FencedFrom", leasePkg + ".FencedFromKey", fencePkg + ".From", fencePkg + ".FromKey":
		return true
	}
	return false
}

// isLeaseToken reports whether f is (*lease.Lease).Token: a function
// that asks the Lease from lease.FromContext for its token reads it too.
// (checkUnreachedTokens leaves it out: a Lease comes from anywhere, not
// only from a context.)
func isLeaseToken(f *types.Func) bool {
	recv := f.Signature().Recv()
	if recv == nil || f.Name() != "Token" || f.Pkg() == nil || f.Pkg().Path() != leasePkg {
		return false
	}
	t := recv.Type()
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Name() == "Lease"
}

// markTokenReaders exports readsTokenFact for every function of the
// package that reads the token directly or through calls, to a fixpoint.
func markTokenReaders(pass *analysis.Pass, generated map[*ast.File]bool) {
	type fn struct {
		obj   *types.Func
		calls []*types.Func
		reads bool
	}
	var fns []*fn
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
			x := &fn{obj: obj}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				callee, _ := calleeFunc(pass.TypesInfo, call)
				switch {
				case callee == nil:
					// A call through a func value or interface could read
					// the token; assume it does if it gets a context.
					if passesContext(pass.TypesInfo, call) {
						x.reads = true
					}
				case isTokenReader(callee), isLeaseToken(callee):
					x.reads = true
				default:
					// An interface method may be implemented by a reader.
					if recv := callee.Type().(*types.Signature).Recv(); recv != nil && types.IsInterface(recv.Type()) && passesContext(pass.TypesInfo, call) {
						x.reads = true
					}
					x.calls = append(x.calls, callee.Origin())
				}
				return true
			})
			fns = append(fns, x)
		}
	}
	reads := map[*types.Func]bool{}
	for changed := true; changed; {
		changed = false
		for _, x := range fns {
			if reads[x.obj] {
				continue
			}
			r := x.reads
			for _, c := range x.calls {
				if reads[c] {
					r = true
				} else if c.Pkg() != pass.Pkg {
					var fact readsTokenFact
					r = r || pass.ImportObjectFact(c, &fact)
				}
			}
			if r {
				reads[x.obj] = true
				changed = true
			}
		}
	}
	for obj := range reads {
		pass.ExportObjectFact(obj, &readsTokenFact{})
	}
}

func passesContext(info *types.Info, call *ast.CallExpr) bool {
	for _, a := range call.Args {
		if t := info.TypeOf(a); t != nil && isContext(t) {
			return true
		}
	}
	return false
}

func isContext(t types.Type) bool {
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "context" && n.Obj().Name() == "Context"
}

// checkFence: a fenced lease nobody reads, and TokenFrom under a lease
// without fence.
func checkFence(pass *analysis.Pass, r *reporter, ps []gen.Protected) {
	for _, p := range ps {
		var fact readsTokenFact
		reads := pass.ImportObjectFact(p.Func, &fact)
		// A leader's terms are always fenced: reading the token is its
		// choice, not a forgotten option.
		if p.Fence && !reads && !p.Leader {
			r.report(analysis.Diagnostic{Pos: p.Decl.Name.Pos(), Category: "fence",
				Message: fmt.Sprintf("lease: %s's lease mints fencing tokens but it never reads one (lease.TokenFrom, fence.From or Lease.Token): the resource cannot reject stale writes", p.Func.Name())})
		}
		if !p.Fence && p.Decl.Body != nil {
			lctx := leaseContexts(pass.TypesInfo, p.Decl) // ctx and the contexts derived from it
			ast.Inspect(p.Decl.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				if f, id := calleeFunc(pass.TypesInfo, call); f != nil && isTokenReader(f) && usesAny(pass.TypesInfo, call, lctx) {
					r.report(analysis.Diagnostic{Pos: id.Pos(), Category: "fence",
						Message: fmt.Sprintf("lease: %s reads a fencing token but its lease has no fence option: add fence to the directive", p.Func.Name())})
				}
				return true
			})
		}
	}
}

func paramObj(info *types.Info, fd *ast.FuncDecl, i int) types.Object {
	k := 0
	for _, f := range fd.Type.Params.List {
		for _, name := range f.Names {
			if k == i {
				return info.Defs[name]
			}
			k++
		}
		if len(f.Names) == 0 {
			k++
		}
	}
	return nil
}

// checkOrder finds protected functions whose bodies call each other's
// wrappers: A holding its lease takes B's, and B holding its lease takes
// A's. Each waits for the other until its wait runs out. A wrapper called
// by a package function that the body calls (directly or through others)
// is taken under the lease too (A → settle → B:
// TestAdversary64cOrderThroughHelper); calls through func values and
// interfaces are not followed.
func checkOrder(pass *analysis.Pass, r *reporter, ps []gen.Protected, generated map[*ast.File]bool) {
	byWrapper := map[string]gen.Protected{}
	for _, p := range ps {
		byWrapper[wrapperKey(p.Func, p.Wrapper)] = p
	}
	// The package's own functions, not the generated wrappers: a wrapper
	// call is an edge, not a path to follow.
	decls := funcDecls(pass, generated)
	type edge struct {
		from, to *types.Func
		pos      token.Pos
		via      string // the function called at pos that takes to's lease, if not to's wrapper
	}
	edges := map[[2]*types.Func]edge{}
	// calls visits body's calls: of a protected function's wrapper
	// (to q), and of the package's other functions (f).
	calls := func(body *ast.BlockStmt, wrapper func(q gen.Protected, id *ast.Ident), other func(f *types.Func, id *ast.Ident)) {
		ast.Inspect(body, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if f, id := calleeFunc(pass.TypesInfo, call); f != nil {
					if q, ok := byWrapper[wrapperKey(f, f.Name())]; ok {
						wrapper(q, id)
					} else if decls[f.Origin()] != nil {
						other(f, id)
					}
				}
			}
			return true
		})
	}
	for _, p := range ps {
		if p.Decl.Body == nil {
			continue
		}
		addEdge := func(q gen.Protected, pos token.Pos, via string) {
			if k := [2]*types.Func{p.Func, q.Func}; q.Func != p.Func && edges[k].from == nil {
				edges[k] = edge{p.Func, q.Func, pos, via}
			}
		}
		// Direct wrapper calls first: an edge is placed at one of them
		// when there is one.
		var helpers []edge // functions the body calls, at the call
		calls(p.Decl.Body, func(q gen.Protected, id *ast.Ident) { addEdge(q, id.Pos(), "") }, func(f *types.Func, id *ast.Ident) {
			if f.Origin() != p.Func {
				helpers = append(helpers, edge{p.Func, f.Origin(), id.Pos(), f.Name()})
			}
		})
		seen := map[*types.Func]bool{p.Func: true}
		for _, h := range helpers {
			work := []*types.Func{h.to}
			for len(work) > 0 {
				fn := work[len(work)-1]
				work = work[:len(work)-1]
				if seen[fn] {
					continue
				}
				seen[fn] = true
				calls(decls[fn].Body, func(q gen.Protected, _ *ast.Ident) { addEdge(q, h.pos, h.via) }, func(f *types.Func, _ *ast.Ident) {
					if !seen[f.Origin()] {
						work = append(work, f.Origin())
					}
				})
			}
		}
	}
	// A lease taken inside another protected function's body is taken
	// under the caller's lease too (A → B's wrapper, B's body → C's
	// wrapper: A holds A's lease while C's is taken), placed at A's call
	// (TestAdversary65aOrderThroughProtectedCallee).
	for changed := true; changed; {
		changed = false
		for k1, e1 := range edges {
			for k2, e2 := range edges {
				if k1[1] != k2[0] || k1[0] == k2[1] {
					continue
				}
				k := [2]*types.Func{k1[0], k2[1]}
				if _, ok := edges[k]; ok {
					continue
				}
				via := e1.via
				if via == "" {
					via = e1.to.Name()
				}
				edges[k] = edge{e1.from, e2.to, e1.pos, via}
				changed = true
			}
		}
	}
	for k, e := range edges {
		back, ok := edges[[2]*types.Func{k[1], k[0]}]
		if !ok {
			continue
		}
		through := ""
		if e.via != "" {
			through = " (through " + e.via + ")"
		}
		// Both ends are in this package's directory: the file's name
		// places the other end (a full path would be absolute).
		at := pass.Fset.Position(back.pos)
		r.report(analysis.Diagnostic{Pos: e.pos, Category: "order",
			Message: fmt.Sprintf("lease: lock-order inversion: %s takes %s's lease%s while holding its own, and %s does the opposite (at %s:%d:%d): take them in one order", e.from.Name(), e.to.Name(), through, e.to.Name(), filepath.Base(at.Filename), at.Line, at.Column)})
	}
}

// wrapperKey names a wrapper by receiver type (aliases unaliased: the
// wrapper is written on the type the alias names) or package, and name,
// so that methods of different types and functions of different packages
// do not collide.
func wrapperKey(f *types.Func, name string) string {
	sig := f.Type().(*types.Signature)
	if r := sig.Recv(); r != nil {
		t := types.Unalias(r.Type())
		if p, ok := t.(*types.Pointer); ok {
			t = types.Unalias(p.Elem())
		}
		return types.TypeString(t, nil) + "." + name
	}
	if f.Pkg() != nil {
		return f.Pkg().Path() + "." + name
	}
	return name
}
