package gen

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/tools/go/packages"

	"github.com/leasegen/leasegen/gen/directive"
	"github.com/leasegen/leasegen/templates"
)

const leasePkg = "github.com/leasegen/leasegen/runtime/lease"

// pkgGen builds the model of one package.
type pkgGen struct {
	pkg         *packages.Package
	fset        *token.FileSet
	errs        *errList
	defaults    *directive.Directive
	consumed    map[*ast.Comment]bool
	pos         map[*templates.Wrapper]token.Pos
	names       map[string]token.Pos // wrapper names declared by this run, per scope
	decorators  map[token.Pos]string // of names, those declared for a decorator: its interface
	typeNames   map[string]bool      // of names, the types this run declares (decorator structs)
	ptrMethods  map[string]bool      // of names, the methods (Recv.Name) with a pointer receiver
	generated   map[string]bool      // files written by leasegen (skipped)
	imports     map[string]string    // the generated file's import names: path -> name
	importPaths map[string]string    // and back: name -> path
	memberCache map[*types.Named]map[string]types.Object
	// exported caches the exported package-level names of packages that
	// only unseen files import (see exportedNames).
	exported map[string]map[string]bool
	// keyLocals names the locals that hold a key path's checked method
	// results in the wrapper being built, by path text.
	keyLocals map[string]string
	protected []Protected
	// tests are the package's _test.go files: their directives are errors
	// (see testDirectives). leasegen parses them itself; analyzers get them
	// in the package's files when they check a test variant.
	tests []*ast.File
	// internalTests are the _test.go files of the package itself (not
	// the external p_test), parsed by leasegen: go test compiles them
	// with the wrappers (see testClash).
	internalTests []*ast.File
	// others are the package's files that leasegen's build leaves out
	// (another GOOS or GOARCH, a build tag), parsed by leasegen: the
	// output has no build constraint, so the build that takes them
	// compiles them with the wrappers (see testClash).
	others []*ast.File
	// unseenNames are the package-level names those two kinds of files
	// declare, which leasegen does not type-check: the generated file
	// must not import a package under one.
	unseenNames map[string]token.Pos
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

// files returns the package's files except leasegen's output and test
// files.
func (g *pkgGen) files() []*ast.File {
	var fs []*ast.File
	for _, f := range g.pkg.Syntax {
		name := g.fset.Position(f.Pos()).Filename
		if !g.generated[name] && !isTestFile(name) {
			fs = append(fs, f)
		}
	}
	return fs
}

// declNames returns the package-level names that files declare, each with
// the position of its first declaration.
func declNames(files []*ast.File) map[string]token.Pos {
	names := map[string]token.Pos{}
	add := func(id *ast.Ident) {
		if id.Name == "_" || id.Name == "init" {
			return // declares nothing in the package block
		}
		if _, ok := names[id.Name]; !ok {
			names[id.Name] = id.Pos()
		}
	}
	for _, f := range files {
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil {
					add(decl.Name)
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						add(spec.Name)
					case *ast.ValueSpec:
						for _, id := range spec.Names {
							add(id)
						}
					}
				}
			}
		}
	}
	return names
}

func isTestFile(name string) bool { return strings.HasSuffix(name, "_test.go") }

// testDirectives reports //lease:lock and //lease:defaults in test files.
//
// leasegen generates wrappers from a package's non-test files only: a
// wrapper for a test function would need an output of its own per test
// package (lease_gen_test.go for p, another for p_test) that -check and CI
// would have to track, for code that protects nothing in production. Tests
// call the package's wrappers, or lease.Client.Do directly. Before, leasegen
// ignored such directives while leasecheck, which sees test files, found
// lease_gen.go stale forever; now both report this error.
func (g *pkgGen) testDirectives() {
	tests := g.tests
	for _, f := range g.pkg.Syntax {
		if isTestFile(g.fset.Position(f.Pos()).Filename) {
			tests = append(tests, f)
		}
	}
	reportTestDirectives(g.errs, tests)
}

// reportTestDirectives reports the lease directives of test files.
func reportTestDirectives(el *errList, tests []*ast.File) {
	for _, f := range tests {
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				d, es := directive.Parse(c.Slash, c.Text)
				el.addAll(es)
				if d != nil && d.Name != directive.Ignore {
					el.add(c.Slash, fmt.Sprintf("lease: //lease:%s in a test file: leasegen generates wrappers from non-test files only; move the function to a non-test file (tests call its wrapper), or call lease.Client.Do in the test", d.Name))
				}
			}
		}
	}
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
	// //lease:ignore is leasecheck's; its mistakes are reported above.
	return slices.DeleteFunc(ds, func(d *directive.Directive) bool { return d.Name == directive.Ignore })
}

func (g *pkgGen) build() *templates.File {
	g.consumed = map[*ast.Comment]bool{}
	g.pos = map[*templates.Wrapper]token.Pos{}
	g.names, g.decorators = map[string]token.Pos{}, nil
	g.imports, g.importPaths = map[string]string{}, map[string]string{}
	for _, path := range fixedImports {
		g.importName(path, path[strings.LastIndex(path, "/")+1:])
	}
	m := &templates.File{PkgPath: g.pkg.PkgPath, PkgName: g.pkg.Name, Imports: g.imports}
	g.testDirectives()

	// Package defaults live in the package doc comment.
	for _, f := range g.files() {
		for _, d := range g.find(f.Doc) {
			switch {
			case d.Name == directive.Lock || d.Name == directive.Leader:
				g.errorf(d.Slash, "//lease:%s in a package comment: put it in the doc comment of the function it protects", d.Name)
			case g.defaults != nil:
				g.errorf(d.Slash, "duplicate //lease:defaults (first at %s)", g.errs.where(g.defaults.Slash))
			default:
				g.defaults = d
			}
		}
	}
	for _, f := range g.files() {
		// A file only leasegen's own load (-tags leasegen) takes: no other
		// build compiles what it declares, which the output would call
		// (TestAdversary51_OddPackagesNoPanic/onlytag).
		tagOnly := needsTag(f, BuildTag)
		refuse := func(ds []*directive.Directive) []*directive.Directive {
			if !tagOnly {
				return ds
			}
			for _, d := range ds {
				g.errorf(d.Slash, "//lease:%s in a file whose build constraint needs the %s tag: only leasegen's own load takes it, and no other build compiles what it declares; move the declaration to a file that builds without it", d.Name, BuildTag)
			}
			return nil
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if d := g.one(refuse(g.find(decl.Doc)), "a function"); d != nil {
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
					if it, ok := ts.Type.(*ast.InterfaceType); ok && !tagOnly {
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
				if d != nil && d.Name != directive.Ignore {
					g.errorf(c.Slash, "misplaced //lease:%s: %s", d.Name, placement(d.Name))
				}
			}
		}
	}
	sortByPos(g.fset, m.Wrappers, g.pos)
	return m
}

// one returns the single //lease:lock or //lease:leader of the doc comment
// of on (a function, an interface method), reporting extras.
func (g *pkgGen) one(ds []*directive.Directive, on string) *directive.Directive {
	var first *directive.Directive
	for _, d := range ds {
		switch {
		case d.Name == directive.Defaults:
			g.errorf(d.Slash, "//lease:defaults belongs in the package doc comment, not on %s", on)
		case first != nil && first.Name == d.Name:
			g.errorf(d.Slash, "duplicate //lease:%s (one per function; first at %s)", d.Name, g.errs.where(first.Slash))
		case first != nil:
			g.errorf(d.Slash, "//lease:%s and //lease:%s (at %s) on one function: it is either protected by a lock or run as a leader", d.Name, first.Name, g.errs.where(first.Slash))
		default:
			first = d
		}
	}
	return first
}

func (g *pkgGen) misplaced(ds []*directive.Directive, what string) {
	for _, d := range ds {
		g.errorf(d.Slash, "//lease:%s on %s: %s", d.Name, what, placement(d.Name))
	}
}

// placement says where a directive named name belongs.
func placement(name string) string {
	if name == directive.Defaults {
		return "it must be in the package doc comment (the comment directly above the package clause)"
	}
	return "it must be in the doc comment of a function, a method or an interface method"
}

// checked merges package defaults, checks durations (the directive's own
// checks first, then the runtime's, so each problem is reported once) and
// warns about options that cannot take full effect.
func (g *pkgGen) checked(d *directive.Directive) (*directive.Directive, bool) {
	m := d.Merge(g.defaults)
	es := m.Check()
	g.errs.addAll(es)
	if len(es) > 0 || m.Invalid || !g.checkSpec(m) {
		return m, false
	}
	if m.Name == directive.Lock {
		g.warnWait(d, m)
	}
	return m, true
}

// funcWrapper builds the model of a function or method wrapper: a lock
// (//lease:lock) or a campaign (//lease:leader, template "leader").
func (g *pkgGen) funcWrapper(fd *ast.FuncDecl, raw *directive.Directive) *templates.Wrapper {
	obj, _ := g.pkg.TypesInfo.Defs[fd.Name].(*types.Func)
	if fd.Name.Name == "_" {
		g.errorf(raw.Slash, "a blank function (func _) cannot be called: the directive has nothing to wrap")
		return nil
	}
	if obj == nil {
		return nil
	}
	sig := obj.Signature()
	leader := raw.Name == directive.Leader
	d, ok := g.checked(raw)
	shaped := g.checkShape(fd.Name.Pos(), fd.Name.Name, sig)
	if leader && !g.checkLeaderShape(fd.Name.Pos(), fd.Name.Name, sig) {
		shaped = false
	}
	if !shaped || !ok {
		return nil
	}
	w := &templates.Wrapper{Template: "func", Target: fd.Name.Name, ClientParam: -1}
	g.pos[w] = fd.Pos()

	// The receiver.
	var recvNamed *types.Named
	recvPtr := false
	if recv := sig.Recv(); recv != nil {
		w.Template = "method"
		t := types.Unalias(recv.Type())
		if p, ok := t.(*types.Pointer); ok {
			t, recvPtr = types.Unalias(p.Elem()), true
		}
		recvNamed, _ = t.(*types.Named)
		if recvNamed == nil && hasInvalid(t) {
			g.errorf(fd.Name.Pos(), "%s: the receiver's type is undefined in the code as written (a name leasegen generates for a directive is a function, not a type)", fd.Name.Name)
			return nil
		}
		if recvNamed == nil || recvNamed.TypeParams().Len() > 0 {
			g.errorf(fd.Name.Pos(), "%s: methods of generic types are not supported (wrap a function instead)", fd.Name.Name)
			return nil
		}
	}
	if leader {
		w.Template = "leader" // a function or a method
	}
	// The wrapper's name.
	switch {
	case d.WrapperName.Set():
		w.Name = d.WrapperName.V
	case leader:
		// settle -> SettleAsLeader; Settle too: the suffix keeps the
		// name free, and says that the call campaigns until ctx ends.
		w.Name = exportName(fd.Name.Name) + leaderSuffix
	case token.IsExported(fd.Name.Name):
		g.errorf(d.Slash, "%s is exported: give its wrapper a name with name=Ident (and consider unexporting %s so callers cannot bypass the lease)", fd.Name.Name, fd.Name.Name)
		return nil
	case !token.IsExported(exportName(fd.Name.Name)):
		g.errorf(d.Slash, "%s has no exported form to name its wrapper after: give the wrapper a name with name=Ident", fd.Name.Name)
		return nil
	default:
		w.Name = exportName(fd.Name.Name)
	}
	namePos := d.Slash
	if d.WrapperName.Set() {
		namePos = d.WrapperName.Pos
	}
	if !g.declare(namePos, w.Name, recvNamed, "") {
		return nil
	}
	if recvNamed != nil && recvPtr {
		if g.ptrMethods == nil {
			g.ptrMethods = map[string]bool{}
		}
		g.ptrMethods[recvNamed.Obj().Name()+"."+w.Name] = true
	}

	// Type text first: it names the imports, which no parameter may shadow.
	q := g.qual()
	if sig.TypeParams().Len() > 0 && recvNamed == nil {
		for i := range sig.TypeParams().Len() {
			tp := sig.TypeParams().At(i)
			w.TypeParams = append(w.TypeParams, templates.Param{Name: tp.Obj().Name(), Type: q.typ(tp.Constraint())})
		}
	}
	paramTypes, results := q.sigTypes(sig)
	w.Results = append(w.Results, results...)
	// The compile-time tie to the wrapped signature.
	switch {
	case recvNamed != nil:
		w.RecvType = q.typ(recvType(recvNamed, recvPtr))
		if recvPtr {
			w.Tie = "(" + w.RecvType + ")." + fd.Name.Name
		} else {
			w.Tie = w.RecvType + "." + fd.Name.Name
		}
		w.TieType = "func" + q.signature(types.NewSignatureType(nil, nil, nil,
			types.NewTuple(append([]*types.Var{types.NewParam(0, nil, "", recvType(recvNamed, recvPtr))}, tupleVars(sig.Params())...)...),
			sig.Results(), sig.Variadic()))
	case len(w.TypeParams) > 0:
		// An instantiation with the wrapper's own type parameters, inside
		// a generic func _ (see templates.emitWrapper).
		var targs []string
		for _, tp := range w.TypeParams {
			targs = append(targs, tp.Name)
		}
		w.Tie = fd.Name.Name + "[" + strings.Join(targs, ", ") + "]"
		w.TieType = "func" + q.signature(sig)
	default:
		w.Tie = fd.Name.Name
		w.TieType = "func" + q.signature(sig)
	}

	// Names: everything the body refers to is reserved for parameters.
	typeParams := map[string]bool{}
	for _, tp := range w.TypeParams {
		typeParams[tp.Name] = true
	}
	n := g.newNamer(q, typeParams, paramTypes, w.Results)
	n.reserve(fd.Name.Name)
	// The package-level variable or constant a client= or identity= names
	// is used by the body: the receiver, named next, must not shadow it
	// (TestAdversary46_ReceiverShadowsClientOrIdentity).
	for _, o := range []directive.Word{d.Client, d.Identity} {
		if o.Set() && g.pkg.Types.Scope().Lookup(o.V) != nil {
			n.reserve(o.V)
		}
	}
	if recvNamed != nil {
		w.RecvName = n.alloc(recvName(fd), "r")
	}
	for _, tp := range w.TypeParams {
		// The package-level variable a client= or identity= names is
		// used by the body too, which the type parameter would shadow.
		for _, opt := range []struct {
			name string
			w    directive.Word
		}{{"client", d.Client}, {"identity", d.Identity}} {
			if opt.w.Set() && opt.w.V == tp.Name && g.pkg.Types.Scope().Lookup(tp.Name) != nil {
				g.errorf(fd.Name.Pos(), "%s: type parameter %s shadows the package-level %s that %s=%s names: rename one of them", fd.Name.Name, tp.Name, tp.Name, opt.name, opt.w.V)
				return nil
			}
		}
		if n.used[tp.Name] {
			// The wrapper copies type parameters as they are: one named
			// like a package or predeclared name its body uses would
			// shadow it there.
			g.errorf(fd.Name.Pos(), "%s: type parameter %s has a name the generated wrapper needs (a package it imports or a predeclared identifier): rename it", fd.Name.Name, tp.Name)
			return nil
		}
		n.reserve(tp.Name)
	}

	// The client.
	src, ok := g.client(d, sig, recvNamed, w.RecvName, n)
	if !ok {
		return nil
	}
	w.Client = src.expr
	// The candidate's identity (leaders), resolved before the parameters
	// are named: a package-level one is reserved from them.
	var ident identitySource
	if leader {
		if ident, ok = g.identity(d, sig, recvNamed, n); !ok {
			return nil
		}
	}

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
		prm := templates.Param{Name: n.alloc(name, def), Type: paramTypes[i], Variadic: sig.Variadic() && i == sig.Params().Len()-1}
		w.Params = append(w.Params, prm)
		if i == src.param {
			w.Client = prm.Name // the target's own client, as renamed
		}
		if i == 0 && src.added != "" {
			w.ClientParam = 1
			w.Params = append(w.Params, templates.Param{Name: src.added, Type: "*" + q.lease() + ".Client"})
			w.Client = src.added
		}
	}

	// The call.
	switch {
	case recvNamed != nil:
		w.Call = w.RecvName + "." + fd.Name.Name
	default:
		w.Call = w.Tie // f, or f[K, V]
	}

	w.Key, ok = g.key(d, sig, orig, w, n, q)
	if !ok {
		return nil
	}
	g.locals(w, n)
	w.Uses, w.Format = q.paths(), q.multiline
	name := qualifiedName(g.pkg.Name, recvNamed, recvPtr, fd.Name.Name)
	if leader {
		w.Lead = leadSpec(d, name, ident.expr(w, orig))
		w.Doc = leaderDoc(w.Name, fd.Name.Name, fd.Doc, d)
	} else {
		w.Spec = spec(d, name)
		w.Doc = wrapperDoc(w.Name, fd.Name.Name, fd.Doc, d, len(w.Results))
	}
	g.protected = append(g.protected, Protected{Func: obj, Decl: fd, Wrapper: w.Name, Fence: d.Fence.Set() || leader, Leader: leader,
		// A leader's wrapper campaigns until ctx ends: calling it instead
		// of the function is no mechanical fix.
		SameParams: w.ClientParam < 0 && !leader})
	return w
}
