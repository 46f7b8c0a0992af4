package gen

import (
	"go/ast"
	"go/token"
	"go/types"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/leasegen/leasegen/templates"
)

// Naming: wrapper names, their clashes, and the identifiers a wrapper declares.

func exportName(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
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
			if w.KeyErrVar == "" {
				w.KeyErrVar = n.alloc("keyErr", "keyErr")
			}
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

// usePkgs reserves the names of packages the signature's types come from
// (a parameter with such a name would shadow them in the body) and records
// them for the file's imports.
func (g *pkgGen) usePkgs(sig *types.Signature, n *namer) {
	var walk func(t types.Type)
	seen := map[types.Type]bool{}
	use := func(obj types.Object) {
		if p := obj.Pkg(); p != nil {
			n.reserve(p.Name())
			if p != g.pkg.Types {
				g.imports[p.Path()] = p.Name()
			}
		}
	}
	walk = func(t types.Type) {
		if t == nil || seen[t] {
			return
		}
		seen[t] = true
		switch t := t.(type) {
		case *types.Named:
			use(t.Obj())
			for i := range t.TypeArgs().Len() {
				walk(t.TypeArgs().At(i))
			}
		case *types.Alias:
			use(t.Obj())
			for i := range t.TypeArgs().Len() {
				walk(t.TypeArgs().At(i))
			}
			walk(types.Unalias(t))
		case *types.TypeParam:
			walk(t.Constraint())
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
		case *types.Interface:
			for i := range t.NumEmbeddeds() {
				walk(t.EmbeddedType(i))
			}
			for i := range t.NumExplicitMethods() {
				walk(t.ExplicitMethod(i).Type())
			}
		case *types.Union:
			for i := range t.Len() {
				walk(t.Term(i).Type())
			}
		}
	}
	for i := range sig.TypeParams().Len() {
		walk(sig.TypeParams().At(i))
	}
	walk(sig)
}
