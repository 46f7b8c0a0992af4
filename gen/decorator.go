package gen

import (
	"fmt"
	"go/ast"
	"go/types"
	"slices"
	"strconv"
	"strings"

	"github.com/leasegen/leasegen/gen/directive"
	"github.com/leasegen/leasegen/templates"
)

// decorator builds NewLeased<Iface> for an interface with annotated
// methods, or returns nil when none is annotated.
func (g *pkgGen) decorator(ts *ast.TypeSpec, it *ast.InterfaceType) *templates.Decorator {
	dirs := map[string]*directive.Directive{}
	docs := map[string]*ast.CommentGroup{}
	for _, f := range it.Methods.List {
		d := g.one(g.find(f.Doc), "an interface method")
		if d == nil {
			continue
		}
		if len(f.Names) == 0 {
			g.errorf(d.Slash, "//lease:%s on an embedded interface: annotate the methods where they are declared", d.Name)
			continue
		}
		if d.Name == directive.Leader {
			g.errorf(d.Slash, "//lease:leader on an interface method: a leader wraps a function or method that runs for a term (put it on the implementation's method)")
			continue
		}
		dirs[f.Names[0].Name] = d
		docs[f.Names[0].Name] = f.Doc
	}
	tn, _ := g.pkg.TypesInfo.Defs[ts.Name].(*types.TypeName)
	if tn == nil {
		return nil
	}
	// Methods of embedded interfaces declared in this package keep their
	// directives: a decorator of Store{ Base; ... } leases Base's annotated
	// methods as NewLeasedBase does (passing them through would run them
	// unprotected). Their problems are reported once, at Base. A method
	// declared more than once (Store redeclares Base's, or two embedded
	// interfaces both declare it) is leased when one declaration has a
	// directive; two different directives are an error: a directive on
	// Store's own declaration chooses.
	inherited := map[string]inheritedMethod{}
	if iface, ok := tn.Type().Underlying().(*types.Interface); ok {
		for i := range iface.NumMethods() {
			m := iface.Method(i)
			if _, own := dirs[m.Name()]; own {
				continue
			}
			var found []inheritedMethod
			for _, e := range g.embeddedDecls(iface, m.Name(), map[*types.Func]bool{}) {
				ds, _ := directive.Find(e.doc)
				for _, d := range ds {
					if d.Name == directive.Lock {
						e.d = d
						found = append(found, e)
						break
					}
				}
			}
			if len(found) == 0 {
				continue
			}
			if first := found[0]; !slices.ContainsFunc(found[1:], func(e inheritedMethod) bool { return g.directiveText(e.d) != g.directiveText(first.d) }) {
				dirs[m.Name()], docs[m.Name()], inherited[m.Name()] = first.d, first.doc, first
				continue
			}
			var from []string
			for _, e := range found {
				from = append(from, e.from+"."+m.Name())
			}
			g.errorf(ts.Name.Pos(), "%s.%s: %s have different //lease:lock directives; declare %s in %s with the one to use", ts.Name.Name, m.Name(), strings.Join(from, " and "), m.Name(), ts.Name.Name)
			return nil
		}
	}
	if len(dirs) == len(inherited) {
		return nil // no annotated method of its own: Base's decorator serves
	}
	if _, alias := tn.Type().(*types.Alias); alias {
		g.errorf(ts.Name.Pos(), "%s: is a type alias; a decorator is generated for a defined interface type (type %s interface{ ... })", ts.Name.Name, ts.Name.Name)
		return nil
	}
	named, _ := tn.Type().(*types.Named)
	if named == nil || named.TypeParams().Len() > 0 {
		g.errorf(ts.Name.Pos(), "%s: generic interfaces are not supported", ts.Name.Name)
		return nil
	}
	iface := named.Underlying().(*types.Interface)
	if !iface.IsMethodSet() {
		// NewLeasedS(next S, ...) S would not compile.
		g.errorf(ts.Name.Pos(), "%s: is a constraint (it embeds comparable or type terms), not a type of values; a decorator wraps a value of an interface type (annotate the methods of an interface without them)", ts.Name.Name)
		return nil
	}
	for i := range iface.NumMethods() {
		if m := iface.Method(i); !m.Exported() && m.Pkg() != g.pkg.Types {
			g.errorf(ts.Name.Pos(), "%s: no decorator can implement it outside package %s, which declares its unexported method %s", ts.Name.Name, m.Pkg().Name(), m.Name())
			return nil
		}
	}
	for i := range iface.NumMethods() {
		// A method (of an embedded interface of another package) whose
		// signature names what only its package can write
		// (TestAdversary46_DecoratorForeignUnexportedType).
		m := iface.Method(i)
		if obj := foreignUnexported(m.Signature(), g.pkg.Types, map[types.Type]bool{}); obj != nil {
			g.errorf(ts.Name.Pos(), "%s: no decorator can implement it outside package %s: its method %s uses %s, which that package does not export", ts.Name.Name, obj.Pkg().Name(), m.Name(), obj.Name())
			return nil
		}
	}
	// The decorator's fields must not share a name with a method.
	fields := newNamer()
	for i := range iface.NumMethods() {
		fields.reserve(iface.Method(i).Name())
	}
	dec := &templates.Decorator{
		Iface: ts.Name.Name, IfaceTyp: g.qual().typ(named),
		Ctor: "NewLeased" + exportName(ts.Name.Name), Struct: "leased" + exportName(ts.Name.Name),
		Recv: "x", Next: fields.alloc("next", ""), ClientF: fields.alloc("leases", ""),
	}
	// The receiver is named in every method: not like a name the
	// methods' types use (an import x, a type x), which it would shadow
	// in the bodies (TestAdversary46_DecoratorReceiverShadowsResultType).
	typeNames := map[string]bool{}
	tq := g.qual()
	for i := range iface.NumMethods() {
		ps, rs := tq.sigTypes(iface.Method(i).Signature())
		for _, text := range append(ps, rs...) {
			for _, id := range identRE.FindAllString(text, -1) {
				typeNames[id] = true
			}
		}
	}
	for k := 1; typeNames[dec.Recv]; k++ {
		dec.Recv = "x" + strconv.Itoa(k)
	}
	for _, name := range []string{dec.Ctor, dec.Struct} {
		if !g.declare(ts.Name.Pos(), name, nil, ts.Name.Name) {
			return nil
		}
	}
	if g.typeNames == nil {
		g.typeNames = map[string]bool{}
	}
	g.typeNames[dec.Struct] = true
	ok := true
	for i := range iface.NumMethods() {
		m := iface.Method(i)
		if inh, ok := inherited[m.Name()]; ok {
			// Reported at the declaring interface: drop this pass's copies.
			// The declaration with the directive gives the parameter names
			// its key uses.
			nerr, nwarn := len(g.errs.list), len(g.errs.warns)
			if !g.decoratorMethod(dec, ts, inh.fn, dirs, docs) {
				ok = false
			}
			g.errs.list, g.errs.raw, g.errs.warns = g.errs.list[:nerr], g.errs.raw[:nerr], g.errs.warns[:nwarn]
			if w := dec.Methods; ok && len(w) > 0 && w[len(w)-1].Name == m.Name() {
				doc := w[len(w)-1].Doc
				doc[len(doc)-1] = "Generated by leasegen from the //lease:lock directive on " + inh.from + "." + m.Name() + "."
			}
			continue
		}
		if !g.decoratorMethod(dec, ts, m, dirs, docs) {
			ok = false
		}
	}
	if !ok {
		return nil
	}
	return dec
}

// decoratorMethod adds m to dec: leased when dirs has its directive,
// passed through otherwise. It reports false on a problem.
func (g *pkgGen) decoratorMethod(dec *templates.Decorator, ts *ast.TypeSpec, m *types.Func, dirs map[string]*directive.Directive, docs map[string]*ast.CommentGroup) bool {
	sig := m.Signature()
	w := &templates.Wrapper{Template: "decorator", Name: m.Name(), Target: ts.Name.Name + "." + m.Name(), ClientParam: -1}
	// Type text first: it names the imports, which no parameter may
	// shadow.
	q := g.qual()
	ptypes, results := q.sigTypes(sig)
	w.Results = append(w.Results, results...)
	n := g.newNamer(q, nil, ptypes, w.Results)
	n.reserve(dec.Recv)
	orig := map[string]int{}
	for j := range sig.Params().Len() {
		p := sig.Params().At(j)
		if p.Name() != "" && p.Name() != "_" {
			orig[p.Name()] = j
		}
		def := "p" + strconv.Itoa(j)
		if j == 0 {
			def = "ctx"
		}
		w.Params = append(w.Params, templates.Param{Name: n.alloc(p.Name(), def), Type: ptypes[j], Variadic: sig.Variadic() && j == sig.Params().Len()-1})
	}
	w.Uses, w.Format = q.paths(), q.multiline
	d := dirs[m.Name()]
	if d == nil {
		if m.Pkg() != nil && m.Pkg() != g.pkg.Types {
			w.Doc = wrap(fmt.Sprintf("%s passes through to next: it is declared in package %s, whose directives (if any) a decorator of package %s does not apply.", m.Name(), m.Pkg().Path(), g.pkg.Name), 77)
		}
		dec.Passthrough = append(dec.Passthrough, w)
		return true
	}
	if d.WrapperName.Set() || d.Client.Set() {
		pos := d.WrapperName.Pos
		if !d.WrapperName.Set() {
			pos = d.Client.Pos
		}
		g.errorf(pos, "name= and client= do not apply to interface methods (the decorator keeps the method names and takes the client in %s)", dec.Ctor)
		return false
	}
	md, good := g.checked(d)
	// At the method's name, as for a function (DESIGN §8; adv46_iface_shape_position).
	if !g.checkShape(m.Pos(), ts.Name.Name+"."+m.Name(), sig) || !good {
		return false
	}
	w.Client = dec.Recv + "." + dec.ClientF
	w.Call = dec.Recv + "." + dec.Next + "." + m.Name()
	key, good := g.key(md, sig, orig, w, n, q)
	if !good {
		return false
	}
	w.Key = key
	g.locals(w, n)
	w.Uses, w.Format = q.paths(), q.multiline
	w.Spec = spec(md, g.pkg.Name+"."+ts.Name.Name+"."+m.Name())
	w.Doc = wrapperDoc(m.Name(), ts.Name.Name+"."+m.Name(), docs[m.Name()], md, len(w.Results))
	dec.Methods = append(dec.Methods, w)
	return true
}

// interfaceMethodDoc returns the doc comment of the interface method m
// declared in this package (nil if none).
func (g *pkgGen) interfaceMethodDoc(m *types.Func) *ast.CommentGroup {
	var doc *ast.CommentGroup
	for _, f := range g.files() {
		if f.FileStart > m.Pos() || m.Pos() > f.FileEnd {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if fl, ok := n.(*ast.Field); ok && len(fl.Names) > 0 && fl.Names[0].Pos() == m.Pos() {
				doc = fl.Doc
			}
			return doc == nil
		})
	}
	return doc
}

// inheritedMethod is a declaration, in an interface of this package that
// an interface embeds, of one of its methods.
type inheritedMethod struct {
	fn   *types.Func
	from string // the declaring interface
	doc  *ast.CommentGroup
	d    *directive.Directive // its //lease:lock, if any
}

// embeddedDecls lists the declarations of the method name in the
// interfaces of this package that iface embeds, at any depth, each once.
func (g *pkgGen) embeddedDecls(iface *types.Interface, name string, seen map[*types.Func]bool) []inheritedMethod {
	var out []inheritedMethod
	for i := range iface.NumEmbeddeds() {
		named, _ := types.Unalias(iface.EmbeddedType(i)).(*types.Named)
		if named == nil {
			continue
		}
		e, ok := named.Underlying().(*types.Interface)
		if !ok {
			continue
		}
		for j := range e.NumExplicitMethods() {
			if m := e.ExplicitMethod(j); m.Name() == name && m.Pkg() == g.pkg.Types && !seen[m.Origin()] {
				seen[m.Origin()] = true
				out = append(out, inheritedMethod{fn: m, from: named.Obj().Name(), doc: g.interfaceMethodDoc(m)})
			}
		}
		out = append(out, g.embeddedDecls(e, name, seen)...)
	}
	return out
}

// directiveText is d's comment as written, to compare two directives.
func (g *pkgGen) directiveText(d *directive.Directive) string {
	for _, f := range g.files() {
		if f.FileStart <= d.Slash && d.Slash <= f.FileEnd {
			for _, cg := range f.Comments {
				for _, c := range cg.List {
					if c.Slash == d.Slash {
						return strings.Join(strings.Fields(c.Text), " ")
					}
				}
			}
		}
	}
	return ""
}

// foreignUnexported returns a name t uses that code in package here cannot
// write: an unexported type, alias, struct field or method of another
// package (nil if none).
func foreignUnexported(t types.Type, here *types.Package, seen map[types.Type]bool) types.Object {
	if t == nil || seen[t] {
		return nil
	}
	seen[t] = true
	foreign := func(obj types.Object) bool {
		return obj != nil && obj.Pkg() != nil && obj.Pkg() != here && !obj.Exported()
	}
	walkArgs := func(args *types.TypeList) types.Object {
		for i := range args.Len() {
			if obj := foreignUnexported(args.At(i), here, seen); obj != nil {
				return obj
			}
		}
		return nil
	}
	switch t := t.(type) {
	case *types.Alias:
		if foreign(t.Obj()) {
			return t.Obj()
		}
		return walkArgs(t.TypeArgs())
	case *types.Named:
		if foreign(t.Obj()) {
			return t.Obj()
		}
		return walkArgs(t.TypeArgs())
	case *types.Pointer:
		return foreignUnexported(t.Elem(), here, seen)
	case *types.Slice:
		return foreignUnexported(t.Elem(), here, seen)
	case *types.Array:
		return foreignUnexported(t.Elem(), here, seen)
	case *types.Chan:
		return foreignUnexported(t.Elem(), here, seen)
	case *types.Map:
		if obj := foreignUnexported(t.Key(), here, seen); obj != nil {
			return obj
		}
		return foreignUnexported(t.Elem(), here, seen)
	case *types.Signature:
		for _, tup := range []*types.Tuple{t.Params(), t.Results()} {
			for i := range tup.Len() {
				if obj := foreignUnexported(tup.At(i).Type(), here, seen); obj != nil {
					return obj
				}
			}
		}
	case *types.Struct:
		for i := range t.NumFields() {
			f := t.Field(i)
			if foreign(f) {
				return f
			}
			if obj := foreignUnexported(f.Type(), here, seen); obj != nil {
				return obj
			}
		}
	case *types.Interface:
		for i := range t.NumMethods() {
			m := t.Method(i)
			if foreign(m) {
				return m
			}
			if obj := foreignUnexported(m.Type(), here, seen); obj != nil {
				return obj
			}
		}
	}
	return nil
}
