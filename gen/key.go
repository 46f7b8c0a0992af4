package gen

import (
	"go/token"
	"go/types"
	"maps"
	"slices"

	"github.com/leasegen/leasegen/gen/directive"
	"github.com/leasegen/leasegen/templates"
)

var (
	stringerIface = newIface("String", nil, types.Typ[types.String])
	marshalIface  = newIface("MarshalText", nil, types.NewSlice(types.Typ[types.Byte]), errorType)
)

func newIface(name string, params []types.Type, results ...types.Type) *types.Interface {
	var rs []*types.Var
	for _, r := range results {
		rs = append(rs, types.NewParam(token.NoPos, nil, "", r))
	}
	sig := types.NewSignatureType(nil, nil, nil, nil, types.NewTuple(rs...), false)
	it := types.NewInterfaceType([]*types.Func{types.NewFunc(token.NoPos, nil, name, sig)}, nil)
	it.Complete()
	return it
}

const keyKinds = "string, integer, bool, fmt.Stringer or encoding.TextMarshaler"

// key resolves the key template against the parameters.
func (g *pkgGen) key(d *directive.Directive, sig *types.Signature, orig map[string]int, w *templates.Wrapper, n *namer, q *qual) ([]templates.KeyPart, bool) {
	parts, es := directive.ParseKeyOf(d)
	g.errs.addAll(es)
	if len(es) > 0 {
		return nil, false
	}
	ok := true
	var out []templates.KeyPart
	for _, p := range parts {
		if p.Path == nil {
			out = append(out, templates.KeyPart{Lit: p.Lit, Src: p.Src})
			continue
		}
		kp, good := g.keyPart(p, sig, orig, w, n, q)
		kp.NonEmpty = kp.NonEmpty && !d.AllowEmpty.Set()
		ok = ok && good
		out = append(out, kp)
	}
	return out, ok
}

func (g *pkgGen) keyPart(p directive.Part, sig *types.Signature, orig map[string]int, w *templates.Wrapper, n *namer, q *qual) (templates.KeyPart, bool) {
	kp := templates.KeyPart{Src: p.Src}
	root := p.Path[0].Name
	idx, found := orig[root]
	if !found {
		names := slices.Sorted(maps.Keys(orig))
		g.errorf(p.Pos, "key part %s: no parameter %s%s", p.Src, root, directive.Suggest(root, names))
		return kp, false
	}
	// orig indexes the wrapper's params, which may hold an added client.
	sigIdx := idx
	if w.ClientParam >= 0 && idx > w.ClientParam {
		sigIdx--
	}
	v := sig.Params().At(sigIdx)
	t := v.Type()
	if sig.Variadic() && sigIdx == sig.Params().Len()-1 {
		g.errorf(p.Pos, "key part %s: %s is variadic; key parts must be single values", p.Src, root)
		return kp, false
	}
	expr := w.Params[idx].Name
	text := root
	// addressable: the value so far is a variable (a parameter, a field
	// of one, or reached through a pointer), so a method with a pointer
	// receiver can be called on it; a method's result is not.
	addressable := true
	calls := false // the path calls a method
	for _, seg := range p.Path[1:] {
		if _, isTP := t.(*types.TypeParam); isTP {
			g.errorf(p.Pos, "key part %s: %s has a type parameter's type; key parts must have concrete types", p.Src, text)
			return kp, false
		}
		if _, isPtr := t.Underlying().(*types.Pointer); isPtr {
			kp.NilChecks = append(kp.NilChecks, templates.NilCheck{Expr: expr, Text: text})
		}
		obj, index, indirect := types.LookupFieldOrMethod(t, addressable, g.pkg.Types, seg.Name)
		if obj == nil && index == nil && indirect {
			g.errorf(p.Pos, "key part %s: %s has a pointer receiver and %s is not addressable", p.Src, seg.Name, text)
			return kp, false
		}
		_, viaPtr := t.Underlying().(*types.Pointer)
		switch obj := obj.(type) {
		case *types.Var:
			if seg.Call {
				g.errorf(p.Pos, "key part %s: %s.%s is a field, not a method: write %s.%s", p.Src, text, seg.Name, text, seg.Name)
				return kp, false
			}
			if len(index) > 1 {
				g.errorf(p.Pos, "key part %s: %s.%s is promoted from an embedded field; spell out the path", p.Src, text, seg.Name)
				return kp, false
			}
			expr += "." + seg.Name
			t = obj.Type()
			addressable = addressable || viaPtr
		case *types.Func:
			msig := obj.Signature()
			if !seg.Call {
				g.errorf(p.Pos, "key part %s: %s.%s is a method: write %s.%s()", p.Src, text, seg.Name, text, seg.Name)
				return kp, false
			}
			if msig.Params().Len() != 0 || msig.Results().Len() != 1 {
				g.errorf(p.Pos, "key part %s: %s.%s must take no arguments and return one value", p.Src, text, seg.Name)
				return kp, false
			}
			expr += "." + seg.Name + "()"
			t = msig.Results().At(0).Type()
			addressable, calls = false, true
		default:
			g.errorf(p.Pos, "key part %s: %s (%s) has no field or method %s%s", p.Src, text, t, seg.Name, directive.Suggest(seg.Name, fieldsAndMethods(t, g.pkg.Types)))
			return kp, false
		}
		text += "." + seg.Name
		if seg.Call {
			text += "()"
		}
	}
	kp, stringer, ok := g.keyValue(p, kp, expr, text, t, q)
	if ok && kp.NonEmpty && kp.Str != "" && (calls || stringer) {
		// Evaluate a method's result once: it is checked, then escaped.
		kp.StrVar = n.alloc("part", "part")
	}
	return kp, ok
}

// keyValue converts the part's final value to an escaped string.
// stringer reports that the value is the result of a String call.
func (g *pkgGen) keyValue(p directive.Part, kp templates.KeyPart, expr, text string, t types.Type, q *qual) (_ templates.KeyPart, stringer, ok bool) {
	if _, isTP := t.(*types.TypeParam); isTP {
		g.errorf(p.Pos, "key part %s: %s has a type parameter's type; key parts must have concrete types", p.Src, text)
		return kp, false, false
	}
	if ptr, ok := t.Underlying().(*types.Pointer); ok {
		if _, basic := ptr.Elem().Underlying().(*types.Basic); basic {
			kp.NilChecks = append(kp.NilChecks, templates.NilCheck{Expr: expr, Text: text})
			expr, t = "*"+expr, ptr.Elem()
		}
	}
	if b, ok := t.Underlying().(*types.Basic); ok {
		conv := func(to string, want types.BasicKind) string {
			if tb, ok := t.(*types.Basic); ok && tb.Kind() == want {
				return expr
			}
			return to + "(" + expr + ")"
		}
		strconv := func(fn, arg string) string { return q.pkg("strconv", "strconv") + "." + fn + "(" + arg + ")" }
		switch {
		case b.Info()&types.IsString != 0:
			kp.Str, kp.NonEmpty, kp.Text = conv("string", types.String), true, text
			if tb, ok := t.(*types.Basic); !ok || tb.Kind() != types.String {
				kp.Unconverted = expr
			}
			return kp, false, true
		case b.Info()&types.IsInteger != 0 && b.Info()&types.IsUnsigned != 0:
			kp.Value = strconv("FormatUint", conv("uint64", types.Uint64)+", 10")
			return kp, false, true
		case b.Info()&types.IsInteger != 0:
			kp.Value = strconv("FormatInt", conv("int64", types.Int64)+", 10")
			return kp, false, true
		case b.Info()&types.IsBoolean != 0:
			kp.Value = strconv("FormatBool", conv("bool", types.Bool))
			return kp, false, true
		}
	}
	_, isIface := t.Underlying().(*types.Interface)
	_, isPtr := t.Underlying().(*types.Pointer)
	nilable := isIface || isPtr
	switch {
	case types.Implements(t, stringerIface):
		if nilable {
			kp.NilChecks = append(kp.NilChecks, templates.NilCheck{Expr: expr, Text: text})
		}
		kp.Str, kp.NonEmpty, kp.Text = expr+".String()", true, text
		return kp, true, true
	case types.Implements(t, marshalIface):
		if nilable {
			kp.NilChecks = append(kp.NilChecks, templates.NilCheck{Expr: expr, Text: text})
		}
		kp.Marshal, kp.NonEmpty, kp.Text = expr+".MarshalText()", true, text
		return kp, false, true
	}
	g.errorf(p.Pos, "key part %s: unsupported type %s (want %s)", p.Src, types.TypeString(t, types.RelativeTo(g.pkg.Types)), keyKinds)
	return kp, false, false
}

func fieldsAndMethods(t types.Type, pkg *types.Package) []string {
	var out []string
	ms := types.NewMethodSet(types.NewPointer(types.Unalias(t)))
	if _, ok := t.Underlying().(*types.Pointer); ok {
		ms = types.NewMethodSet(t)
	}
	for i := range ms.Len() {
		out = append(out, ms.At(i).Obj().Name())
	}
	u := t.Underlying()
	if p, ok := u.(*types.Pointer); ok {
		u = p.Elem().Underlying()
	}
	if st, ok := u.(*types.Struct); ok {
		for i := range st.NumFields() {
			if f := st.Field(i); f.Exported() || f.Pkg() == pkg {
				out = append(out, f.Name())
			}
		}
	}
	return out
}
