package gen

import (
	"go/types"
	"slices"
	"strconv"
	"strings"
)

// Go text for the generated file. Every type and every package reference
// goes through a qual, which names packages as the file imports them and
// records which ones a wrapper uses. The text is what gofmt prints (the
// templates write gofmt's layout; the golden test holds them to it).

// fixedImports are the packages the templates and key values use, named
// first so that they keep their own names.
var fixedImports = []string{"context", "fmt", "strconv", "time", leasePkg}

// importName returns the name the generated file imports path under,
// assigning one on first use: the package's own name, numbered if another
// import, a package-level declaration or a predeclared identifier already
// has it.
func (g *pkgGen) importName(path, name string) string {
	if n, ok := g.imports[path]; ok {
		return n
	}
	taken := func(s string) bool {
		if _, ok := g.importPaths[s]; ok {
			return true
		}
		if _, ok := g.names[s]; ok {
			return true // a package-level wrapper of this run
		}
		if _, ok := g.unseenNames[s]; ok {
			return true // declared by an internal test file or a file of another platform, compiled with the output there
		}
		if types.Universe.Lookup(s) != nil || s == "init" {
			// A package named error, len or string: imported under its
			// own name it would hide the predeclared one in the whole file
			// (TestAdversary63c_ImportNamedLikePredeclared). A package
			// named init cannot be imported under that name at all
			// (TestAdversary64b_ImportNamedInit).
			return true
		}
		return g.pkg.Types != nil && g.pkg.Types.Scope().Lookup(s) != nil
	}
	unique := name
	for i := 1; taken(unique); i++ {
		unique = name + strconv.Itoa(i)
	}
	g.imports[path], g.importPaths[unique] = unique, path
	return unique
}

// qual writes Go text for one wrapper and records the imports it needs.
type qual struct {
	g    *pkgGen
	uses map[string]bool
	// multiline: a struct or interface literal that gofmt may spread over
	// lines (two or more elements, a tag, or one element longer than
	// about 30 bytes: go/printer's isOneLineFieldList); the wrapper is
	// then gofmt'd. Any non-empty literal counts: gofmt decides.
	multiline bool
}

func (g *pkgGen) qual() *qual { return &qual{g: g, uses: map[string]bool{}} }

// pkg returns the name of the imported package path (of package name)
// and records its use.
func (q *qual) pkg(path, name string) string {
	q.uses[path] = true
	return q.g.importName(path, name)
}

// lease is "lease" (the runtime's import name).
func (q *qual) lease() string { return q.pkg(leasePkg, "lease") }

// paths returns the recorded imports, sorted.
func (q *qual) paths() []string {
	out := make([]string, 0, len(q.uses))
	for p := range q.uses {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

func (q *qual) obj(o types.Object) string {
	if p := o.Pkg(); p != nil && p != q.g.pkg.Types {
		return q.pkg(p.Path(), p.Name()) + "." + o.Name()
	}
	return o.Name()
}

// typ renders t as gofmt prints it in a signature. Struct and interface
// literals are written on one line.
func (q *qual) typ(t types.Type) string {
	switch t := t.(type) {
	case *types.Alias:
		return q.obj(t.Obj()) + q.typeArgs(t.TypeArgs())
	case *types.Named:
		return q.obj(t.Obj()) + q.typeArgs(t.TypeArgs())
	case *types.Basic:
		if t.Kind() == types.UnsafePointer {
			return q.pkg("unsafe", "unsafe") + ".Pointer"
		}
		return t.Name()
	case *types.TypeParam:
		return t.Obj().Name()
	case *types.Pointer:
		return "*" + q.typ(t.Elem())
	case *types.Slice:
		return "[]" + q.typ(t.Elem())
	case *types.Array:
		return "[" + strconv.FormatInt(t.Len(), 10) + "]" + q.typ(t.Elem())
	case *types.Map:
		return "map[" + q.typ(t.Key()) + "]" + q.typ(t.Elem())
	case *types.Chan:
		switch t.Dir() {
		case types.SendOnly:
			return "chan<- " + q.typ(t.Elem())
		case types.RecvOnly:
			return "<-chan " + q.typ(t.Elem())
		}
		if c, ok := t.Elem().(*types.Chan); ok && c.Dir() == types.RecvOnly {
			return "chan (" + q.typ(c) + ")" // chan <-chan T would read as chan<- (chan T)
		}
		return "chan " + q.typ(t.Elem())
	case *types.Signature:
		return "func" + q.signature(t)
	case *types.Struct:
		if t.NumFields() == 0 {
			return "struct{}"
		}
		var fs []string
		for i := range t.NumFields() {
			f := t.Field(i)
			s := q.typ(f.Type())
			if !f.Embedded() {
				s = f.Name() + " " + s
			}
			if tag := t.Tag(i); tag != "" {
				if strings.Contains(tag, "`") {
					s += " " + strconv.Quote(tag)
				} else {
					s += " `" + tag + "`"
				}
			}
			fs = append(fs, s)
		}
		q.multiline = true // one tagged field is spread over lines too (adv46_struct_tag_gofmt)
		return "struct{ " + strings.Join(fs, "; ") + " }"
	case *types.Interface:
		if t.IsImplicit() && t.NumEmbeddeds() == 1 {
			return q.typ(t.EmbeddedType(0)) // a constraint written ~int | ~string
		}
		var es []string
		for i := range t.NumEmbeddeds() {
			es = append(es, q.typ(t.EmbeddedType(i)))
		}
		for i := range t.NumExplicitMethods() {
			m := t.ExplicitMethod(i)
			es = append(es, m.Name()+q.signature(m.Signature()))
		}
		if len(es) == 0 {
			return "interface{}"
		}
		q.multiline = true
		return "interface{ " + strings.Join(es, "; ") + " }"
	case *types.Union:
		var ts []string
		for i := range t.Len() {
			term := t.Term(i)
			s := q.typ(term.Type())
			if term.Tilde() {
				s = "~" + s
			}
			ts = append(ts, s)
		}
		return strings.Join(ts, " | ")
	}
	return t.String()
}

func (q *qual) typeArgs(l *types.TypeList) string {
	if l.Len() == 0 {
		return ""
	}
	args := make([]string, l.Len())
	for i := range args {
		args[i] = q.typ(l.At(i))
	}
	return "[" + strings.Join(args, ", ") + "]"
}

// sigTypes returns the type text of sig's parameters (a variadic one's
// element type: the parameter is written "name ...T") and of its results.
func (q *qual) sigTypes(sig *types.Signature) (params, results []string) {
	params = make([]string, sig.Params().Len())
	for i := range params {
		t := sig.Params().At(i).Type()
		if sig.Variadic() && i == len(params)-1 {
			t = t.(*types.Slice).Elem()
		}
		params[i] = q.typ(t)
	}
	for i := range sig.Results().Len() {
		results = append(results, q.typ(sig.Results().At(i).Type()))
	}
	return params, results
}

// signature renders "(params) results" of a signature, unnamed.
func (q *qual) signature(sig *types.Signature) string {
	ps, rs := q.sigTypes(sig)
	if sig.Variadic() {
		ps[len(ps)-1] = "..." + ps[len(ps)-1]
	}
	s := "(" + strings.Join(ps, ", ") + ")"
	switch len(rs) {
	case 0:
	case 1:
		s += " " + rs[0]
	default:
		s += " (" + strings.Join(rs, ", ") + ")"
	}
	return s
}
