package gen

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dave/jennifer/jen"
	"golang.org/x/tools/go/packages"

	"github.com/leasegen/leasegen/gen/directive"
	"github.com/leasegen/leasegen/templates"
)

const leasePkg = "github.com/leasegen/leasegen/runtime/lease"

// pkgGen builds the model of one package.
type pkgGen struct {
	pkg       *packages.Package
	fset      *token.FileSet
	errs      *errList
	defaults  *directive.Directive
	consumed  map[*ast.Comment]bool
	pos       map[*templates.Wrapper]token.Pos
	names     map[string]token.Pos // wrapper names declared by this run, per scope
	generated map[string]bool      // files written by leasegen (skipped)
	protected []Protected
}

func newPkgGen(p *packages.Package, fset *token.FileSet, el *errList) *pkgGen {
	g := &pkgGen{pkg: p, fset: fset, errs: el, generated: map[string]bool{}}
	for _, f := range p.Syntax {
		if isGeneratedFile(f) {
			g.generated[fset.Position(f.Pos()).Filename] = true
		}
	}
	return g
}

// isGeneratedFile reports whether f was written by leasegen.
func isGeneratedFile(f *ast.File) bool {
	return len(f.Comments) > 0 && len(f.Comments[0].List) > 0 && f.Comments[0].List[0].Text == "// "+templates.Header
}

// files returns the package's files except leasegen's output.
func (g *pkgGen) files() []*ast.File {
	var fs []*ast.File
	for _, f := range g.pkg.Syntax {
		if !g.generated[g.fset.Position(f.Pos()).Filename] {
			fs = append(fs, f)
		}
	}
	return fs
}

func (g *pkgGen) errorf(pos token.Pos, format string, args ...any) {
	g.errs.add(pos, "lease: "+fmt.Sprintf(format, args...))
}

// find parses the directives of a doc comment and marks its comments seen.
func (g *pkgGen) find(cg *ast.CommentGroup) []*directive.Directive {
	if cg == nil {
		return nil
	}
	for _, c := range cg.List {
		g.consumed[c] = true
	}
	ds, es := directive.Find(cg)
	g.errs.addAll(es)
	return ds
}

func (g *pkgGen) build() *templates.File {
	g.consumed = map[*ast.Comment]bool{}
	g.pos = map[*templates.Wrapper]token.Pos{}
	g.names = map[string]token.Pos{}
	m := &templates.File{PkgPath: g.pkg.PkgPath, PkgName: g.pkg.Name}

	// Package defaults live in the package doc comment.
	for _, f := range g.files() {
		for _, d := range g.find(f.Doc) {
			switch {
			case d.Name == directive.Lock:
				g.errorf(d.Slash, "//lease:lock in a package comment: put it in the doc comment of the function it protects")
			case g.defaults != nil:
				g.errorf(d.Slash, "duplicate //lease:defaults (first at %s)", g.errs.where(g.defaults.Slash))
			default:
				g.defaults = d
			}
		}
	}
	for _, f := range g.files() {
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if d := g.one(g.find(decl.Doc)); d != nil {
					if w := g.funcWrapper(decl, d); w != nil {
						m.Wrappers = append(m.Wrappers, w)
					}
				}
			case *ast.GenDecl:
				g.misplaced(g.find(decl.Doc), "a declaration")
				for _, spec := range decl.Specs {
					ts, ok := spec.(*ast.TypeSpec)
					if !ok {
						continue
					}
					g.misplaced(g.find(ts.Doc), "a type")
					if it, ok := ts.Type.(*ast.InterfaceType); ok {
						if d := g.decorator(ts, it); d != nil {
							m.Decorators = append(m.Decorators, d)
						}
					}
				}
			}
		}
	}
	// Any other lease directive is misplaced.
	for _, f := range g.files() {
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if g.consumed[c] {
					continue
				}
				d, es := directive.Parse(c.Slash, c.Text)
				g.errs.addAll(es)
				if d != nil {
					g.errorf(c.Slash, "misplaced //lease:%s: it must be in the doc comment of a function, a method or an interface method%s", d.Name, map[bool]string{true: " (//lease:defaults: in the package doc comment)"}[d.Name == directive.Defaults])
				}
			}
		}
	}
	sortByPos(g.fset, m.Wrappers, g.pos)
	return m
}

// one returns the single //lease:lock of a doc comment, reporting extras.
func (g *pkgGen) one(ds []*directive.Directive) *directive.Directive {
	var lock *directive.Directive
	for _, d := range ds {
		switch {
		case d.Name == directive.Defaults:
			g.errorf(d.Slash, "//lease:defaults belongs in the package doc comment, not on a function")
		case lock != nil:
			g.errorf(d.Slash, "duplicate //lease:lock (one per function; first at %s)", g.errs.where(lock.Slash))
		default:
			lock = d
		}
	}
	return lock
}

func (g *pkgGen) misplaced(ds []*directive.Directive, what string) {
	for _, d := range ds {
		g.errorf(d.Slash, "//lease:%s on %s: it must be in the doc comment of a function, a method or an interface method", d.Name, what)
	}
}

// checked merges package defaults and checks durations.
func (g *pkgGen) checked(d *directive.Directive) (*directive.Directive, bool) {
	m := d.Merge(g.defaults)
	es := m.Check()
	g.errs.addAll(es)
	return m, len(es) == 0 && !m.Invalid
}

func isContext(t types.Type) bool {
	n, ok := t.(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "context" && n.Obj().Name() == "Context"
}

var errorType = types.Universe.Lookup("error").Type()

func isLeaseClient(t types.Type) bool {
	p, ok := t.(*types.Pointer)
	if !ok {
		return false
	}
	n, ok := p.Elem().(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == leasePkg && n.Obj().Name() == "Client"
}

// checkShape reports a signature that is not func(context.Context, ...) (..., error).
func (g *pkgGen) checkShape(pos token.Pos, what string, sig *types.Signature) bool {
	ok := true
	if sig.Params().Len() == 0 || !isContext(sig.Params().At(0).Type()) {
		g.errorf(pos, "%s: a leased function takes a context.Context as its first parameter (the lease's context is passed there)", what)
		ok = false
	}
	if sig.Results().Len() == 0 || !types.Identical(sig.Results().At(sig.Results().Len()-1).Type(), errorType) {
		g.errorf(pos, "%s: a leased function returns error as its last result (lease errors are returned there)", what)
		ok = false
	}
	return ok
}

func exportName(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}

// funcWrapper builds the model of a function or method wrapper.
func (g *pkgGen) funcWrapper(fd *ast.FuncDecl, raw *directive.Directive) *templates.Wrapper {
	obj, _ := g.pkg.TypesInfo.Defs[fd.Name].(*types.Func)
	if obj == nil {
		return nil
	}
	sig := obj.Signature()
	d, ok := g.checked(raw)
	if !g.checkShape(fd.Name.Pos(), fd.Name.Name, sig) || !ok {
		return nil
	}
	w := &templates.Wrapper{Template: "func", Target: fd.Name.Name, ClientParam: -1}
	g.pos[w] = fd.Pos()

	// The receiver.
	var recvNamed *types.Named
	recvPtr := false
	if recv := sig.Recv(); recv != nil {
		w.Template = "method"
		t := recv.Type()
		if p, ok := t.(*types.Pointer); ok {
			t, recvPtr = p.Elem(), true
		}
		recvNamed, _ = t.(*types.Named)
		if recvNamed == nil || recvNamed.TypeParams().Len() > 0 {
			g.errorf(fd.Name.Pos(), "%s: methods of generic types are not supported (wrap a function instead)", fd.Name.Name)
			return nil
		}
	}
	if sig.TypeParams().Len() > 0 && recvNamed == nil {
		for i := range sig.TypeParams().Len() {
			tp := sig.TypeParams().At(i)
			w.TypeParams = append(w.TypeParams, templates.Param{Name: tp.Obj().Name(), Type: typeCode(tp.Constraint())})
		}
	}

	// The wrapper's name.
	switch {
	case d.WrapperName.Set():
		w.Name = d.WrapperName.V
	case token.IsExported(fd.Name.Name):
		g.errorf(d.Slash, "%s is exported: give its wrapper a name with name=Ident (and consider unexporting %s so callers cannot bypass the lease)", fd.Name.Name, fd.Name.Name)
		return nil
	default:
		w.Name = exportName(fd.Name.Name)
	}
	namePos := d.Slash
	if d.WrapperName.Set() {
		namePos = d.WrapperName.Pos
	}
	if !g.declare(namePos, w.Name, recvNamed) {
		return nil
	}

	// Names: everything the body refers to is reserved for parameters.
	n := newNamer()
	n.reserve(fd.Name.Name, "context", "lease", "fmt", "strconv", "time")
	collectPkgNames(sig, n)
	if recvNamed != nil {
		w.RecvName = n.alloc(recvName(fd), "r")
		if recvPtr {
			w.RecvType = jen.Op("*").Add(typeCode(recvNamed))
		} else {
			w.RecvType = typeCode(recvNamed)
		}
	}
	for _, tp := range w.TypeParams {
		n.reserve(tp.Name)
	}

	// The client.
	client, clientParam, ok := g.client(d, recvNamed, w.RecvName, n)
	if !ok {
		return nil
	}
	w.Client = client

	orig := map[string]int{}
	for i := range sig.Params().Len() {
		p := sig.Params().At(i)
		name := p.Name()
		if name != "" && name != "_" {
			orig[name] = len(w.Params)
		}
		def := "p" + strconv.Itoa(i)
		if i == 0 {
			def = "ctx"
		}
		prm := templates.Param{Name: n.alloc(name, def), Type: typeCode(p.Type())}
		if sig.Variadic() && i == sig.Params().Len()-1 {
			prm.Variadic, prm.Type = true, typeCode(p.Type().(*types.Slice).Elem())
		}
		w.Params = append(w.Params, prm)
		if i == 0 && clientParam != "" {
			w.ClientParam = 1
			w.Params = append(w.Params, templates.Param{Name: clientParam, Type: jen.Op("*").Qual(leasePkg, "Client")})
		}
	}
	for i := range sig.Results().Len() {
		w.Results = append(w.Results, typeCode(sig.Results().At(i).Type()))
	}

	// The call and the compile-time tie to the wrapped signature.
	switch {
	case recvNamed != nil:
		w.Call = jen.Id(w.RecvName).Dot(fd.Name.Name)
		if recvPtr {
			w.Tie = jen.Parens(jen.Op("*").Add(typeCode(recvNamed))).Dot(fd.Name.Name)
		} else {
			w.Tie = jen.Add(typeCode(recvNamed)).Dot(fd.Name.Name)
		}
		w.TieType = jen.Func().Add(signatureCode(types.NewSignatureType(nil, nil, nil,
			types.NewTuple(append([]*types.Var{types.NewParam(0, nil, "", recvType(recvNamed, recvPtr))}, tupleVars(sig.Params())...)...),
			sig.Results(), sig.Variadic())))
	case len(w.TypeParams) > 0:
		var targs []jen.Code
		for _, tp := range w.TypeParams {
			targs = append(targs, jen.Id(tp.Name))
		}
		w.Call = jen.Id(fd.Name.Name).Types(targs...)
	default:
		w.Call = jen.Id(fd.Name.Name)
		w.Tie = jen.Id(fd.Name.Name)
		w.TieType = jen.Func().Add(signatureCode(sig))
	}

	w.Key, ok = g.key(d, sig, orig, w, n)
	if !ok {
		return nil
	}
	g.locals(w, n)
	w.Spec = spec(d)
	w.Doc = wrapperDoc(w.Name, fd.Name.Name, d)
	g.protected = append(g.protected, Protected{Func: obj, Decl: fd, Wrapper: w.Name, Fence: d.Fence.Set(), SameParams: w.ClientParam < 0})
	return w
}

func recvType(n *types.Named, ptr bool) types.Type {
	if ptr {
		return types.NewPointer(n)
	}
	return n
}

func tupleVars(t *types.Tuple) []*types.Var {
	vs := make([]*types.Var, t.Len())
	for i := range vs {
		vs[i] = t.At(i)
	}
	return vs
}

func recvName(fd *ast.FuncDecl) string {
	if len(fd.Recv.List) > 0 && len(fd.Recv.List[0].Names) > 0 {
		return fd.Recv.List[0].Names[0].Name
	}
	return ""
}

// declare records a wrapper name and reports a clash with an existing
// declaration in its scope (the package, or the receiver's method set).
func (g *pkgGen) declare(pos token.Pos, name string, recv *types.Named) bool {
	scopeKey := name
	var existing types.Object
	if recv != nil {
		scopeKey = recv.Obj().Name() + "." + name
		existing, _, _ = types.LookupFieldOrMethod(types.NewPointer(recv), true, g.pkg.Types, name)
	} else {
		existing = g.pkg.Types.Scope().Lookup(name)
	}
	if existing != nil && g.generated[g.fset.Position(existing.Pos()).Filename] {
		existing = nil // our own earlier output (when checked without -tags leasegen)
	}
	if existing != nil {
		g.errorf(pos, "wrapper name %s is already declared at %s; choose another with name=", name, g.errs.where(existing.Pos()))
		return false
	}
	if prev, ok := g.names[scopeKey]; ok {
		g.errorf(pos, "wrapper name %s is also generated for the directive at %s; choose another with name=", name, g.errs.where(prev))
		return false
	}
	g.names[scopeKey] = pos
	return true
}

// client finds where the *lease.Client comes from: client=, the receiver's
// one field of that type, or an added parameter (returned by name).
func (g *pkgGen) client(d *directive.Directive, recv *types.Named, recvName string, n *namer) (jen.Code, string, bool) {
	var fields []string
	if recv != nil {
		if st, ok := recv.Underlying().(*types.Struct); ok {
			for i := range st.NumFields() {
				if f := st.Field(i); isLeaseClient(f.Type()) {
					fields = append(fields, f.Name())
				}
			}
		}
	}
	if d.Client.Set() {
		name := d.Client.V
		for _, f := range fields {
			if f == name {
				return jen.Id(recvName).Dot(name), "", true
			}
		}
		if v, ok := g.pkg.Types.Scope().Lookup(name).(*types.Var); ok && isLeaseClient(v.Type()) {
			n.reserve(name)
			return jen.Id(name), "", true
		}
		var cands []string
		cands = append(cands, fields...)
		for _, s := range g.pkg.Types.Scope().Names() {
			if v, ok := g.pkg.Types.Scope().Lookup(s).(*types.Var); ok && isLeaseClient(v.Type()) {
				cands = append(cands, s)
			}
		}
		g.errorf(d.Client.Pos, "client=%s: no receiver field or package-level variable %s of type *lease.Client%s", name, name, directive.Suggest(name, cands))
		return nil, "", false
	}
	switch len(fields) {
	case 0:
		// No source: the wrapper takes the client as a parameter after ctx.
		name := n.alloc("c", "c")
		return jen.Id(name), name, true
	case 1:
		return jen.Id(recvName).Dot(fields[0]), "", true
	}
	g.errorf(d.Slash, "the receiver has %d fields of type *lease.Client (%s): choose one with client=", len(fields), strings.Join(fields, ", "))
	return nil, "", false
}

func spec(d *directive.Directive) templates.Spec {
	return templates.Spec{
		TTL: d.TTL.V, Deadline: d.Deadline.V, Wait: d.Wait.V, MinValidity: d.MinValidity.V, HoldMin: d.HoldMin.V,
		Skip: d.Busy.V == "skip", Fence: d.Fence.Set(),
	}
}

func wrapperDoc(name, target string, d *directive.Directive) []string {
	opts := []string{"ttl " + d.TTL.V.String(), "deadline " + d.Deadline.V.String()}
	if d.Wait.V > 0 {
		opts = append(opts, "wait "+d.Wait.V.String())
	} else {
		opts = append(opts, "no wait")
	}
	opts = append(opts, "min-validity "+d.MinValidity.V.String())
	if d.HoldMin.V > 0 {
		opts = append(opts, "hold-min "+d.HoldMin.V.String())
	}
	if d.Busy.V == "skip" {
		opts = append(opts, "busy: skip")
	}
	if d.Fence.Set() {
		opts = append(opts, "fence")
	}
	return []string{
		fmt.Sprintf("%s calls %s while holding the lease %q", name, target, d.Key),
		fmt.Sprintf("(%s).", strings.Join(opts, ", ")),
		"Generated by leasegen from the //lease:lock directive on " + target + ".",
	}
}

// locals allocates the wrapper's local names.
func (g *pkgGen) locals(w *templates.Wrapper, n *namer) {
	w.KeyVar = n.alloc("key", "key")
	w.ErrVar = n.alloc("err", "err")
	for i := range len(w.Results) - 1 {
		w.ResultVars = append(w.ResultVars, n.alloc("r"+strconv.Itoa(i), "r"))
	}
	for _, p := range w.Key {
		if p.Marshal != nil {
			w.ScratchVars = append(w.ScratchVars, n.alloc("text", "text"))
		}
	}
}

// namer allocates identifiers that collide with nothing reserved.
type namer struct{ used map[string]bool }

func newNamer() *namer { return &namer{used: map[string]bool{"_": true}} }

func (n *namer) reserve(names ...string) {
	for _, s := range names {
		n.used[s] = true
	}
}

// alloc returns want if free (def if want is empty), else the first free
// want1, want2, ...
func (n *namer) alloc(want, def string) string {
	if want == "" || want == "_" {
		want = def
	}
	name := want
	for i := 1; n.used[name]; i++ {
		name = want + strconv.Itoa(i)
	}
	n.used[name] = true
	return name
}

// collectPkgNames reserves the names of packages the signature's types
// come from: a parameter with such a name would shadow them in the body.
func collectPkgNames(sig *types.Signature, n *namer) {
	var walk func(t types.Type)
	seen := map[types.Type]bool{}
	walk = func(t types.Type) {
		if t == nil || seen[t] {
			return
		}
		seen[t] = true
		switch t := t.(type) {
		case *types.Named:
			if t.Obj().Pkg() != nil {
				n.reserve(t.Obj().Pkg().Name())
			}
			for i := range t.TypeArgs().Len() {
				walk(t.TypeArgs().At(i))
			}
		case *types.Alias:
			if t.Obj().Pkg() != nil {
				n.reserve(t.Obj().Pkg().Name())
			}
			walk(types.Unalias(t))
		case *types.Pointer:
			walk(t.Elem())
		case *types.Slice:
			walk(t.Elem())
		case *types.Array:
			walk(t.Elem())
		case *types.Map:
			walk(t.Key())
			walk(t.Elem())
		case *types.Chan:
			walk(t.Elem())
		case *types.Signature:
			for i := range t.Params().Len() {
				walk(t.Params().At(i).Type())
			}
			for i := range t.Results().Len() {
				walk(t.Results().At(i).Type())
			}
		case *types.Struct:
			for i := range t.NumFields() {
				walk(t.Field(i).Type())
			}
		}
	}
	for i := range sig.Params().Len() {
		walk(sig.Params().At(i).Type())
	}
	for i := range sig.Results().Len() {
		walk(sig.Results().At(i).Type())
	}
}
