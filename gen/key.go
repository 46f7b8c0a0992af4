package gen

import (
	"fmt"
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
	g.keyLocals = map[string]string{}
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
		if r := sig.Recv(); r != nil && r.Name() == root {
			// The receiver is not a parameter of the key: "did you mean
			// id?" would send the user after the wrong name.
			g.errorf(p.Pos, "key part %s: %s is the receiver; key parts name the function's parameters (pass the value as a parameter)", p.Src, root)
			return kp, false
		}
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
	// nilCheck records that expr (text in messages) must not be nil and
	// returns the expression to use from then on: when expr calls a
	// method, a local that holds its result (one per text in a wrapper),
	// so that the method is called once, for the check and the value.
	nilCheck := func(kp *templates.KeyPart, expr, text string) string {
		if !calls {
			kp.NilChecks = append(kp.NilChecks, templates.NilCheck{Expr: expr, Text: text})
			return expr
		}
		v, ok := g.keyLocals[text]
		if !ok {
			v = n.alloc("v", "v")
			g.keyLocals[text] = v
		}
		kp.NilChecks = append(kp.NilChecks, templates.NilCheck{Expr: expr, Text: text, Var: v})
		return v
	}
	for _, seg := range p.Path[1:] {
		if _, isTP := t.(*types.TypeParam); isTP {
			g.errorf(p.Pos, "key part %s: %s has a type parameter's type; key parts must have concrete types", p.Src, text)
			return kp, false
		}
		if nilable(t) {
			// A nil pointer's field, a nil interface's method: a panic.
			expr = nilCheck(&kp, expr, text)
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
			if len(index) > 1 {
				// Promoted: the embedded pointers and interfaces it is
				// reached through must not be nil either.
				var good bool
				if expr, good = g.embeddedNilChecks(p, t, index[:len(index)-1], expr, text, seg.Name, func(expr, text string) string { return nilCheck(&kp, expr, text) }); !good {
					return kp, false
				}
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
	kp, stringer, ok := g.keyValue(p, kp, expr, text, t, addressable, q, nilCheck)
	if ok && kp.NonEmpty && kp.Str != "" && (calls || stringer) {
		// Evaluate a method's result once: it is checked, then escaped.
		kp.StrVar = n.alloc("part", "part")
	}
	return kp, ok
}

// keyValue converts the part's final value to an escaped string.
// stringer reports that the value is the result of a String call.
func (g *pkgGen) keyValue(p directive.Part, kp templates.KeyPart, expr, text string, t types.Type, addressable bool, q *qual, nilCheck func(kp *templates.KeyPart, expr, text string) string) (_ templates.KeyPart, stringer, ok bool) {
	if _, isTP := t.(*types.TypeParam); isTP {
		g.errorf(p.Pos, "key part %s: %s has a type parameter's type; key parts must have concrete types", p.Src, text)
		return kp, false, false
	}
	if ptr, ok := t.Underlying().(*types.Pointer); ok {
		if _, basic := ptr.Elem().Underlying().(*types.Basic); basic {
			expr, t = "*"+nilCheck(&kp, expr, text), ptr.Elem()
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
	// receiver is the expression String or MarshalText is called on: the
	// value, nil-checked when it can be nil, and the embedded pointers and
	// interfaces the method is promoted through, nil-checked too (as for
	// {x.String()}: a nil one would panic in the call).
	receiver := func(method string) (string, bool) {
		e := expr
		if nilable(t) {
			e = nilCheck(&kp, e, text)
		}
		_, index, _ := types.LookupFieldOrMethod(t, addressable, g.pkg.Types, method)
		if len(index) > 1 {
			return g.embeddedNilChecks(p, t, index[:len(index)-1], e, text, method, func(e, tx string) string { return nilCheck(&kp, e, tx) })
		}
		return e, true
	}
	switch {
	case types.Implements(t, stringerIface):
		e, good := receiver("String")
		if !good {
			return kp, false, false
		}
		kp.Str, kp.NonEmpty, kp.Text = e+".String()", true, text
		return kp, true, true
	case types.Implements(t, marshalIface):
		e, good := receiver("MarshalText")
		if !good {
			return kp, false, false
		}
		kp.Marshal, kp.NonEmpty, kp.Text = e+".MarshalText()", true, text
		return kp, false, true
	}
	ts := types.TypeString(t, types.RelativeTo(g.pkg.Types))
	hint := ""
	if _, isPtr := t.Underlying().(*types.Pointer); !isPtr {
		// A String or MarshalText on *T: the method is there, on the
		// pointer (a part can call String by name).
		switch pt := types.NewPointer(t); {
		case types.Implements(pt, stringerIface) && addressable:
			hint = fmt.Sprintf("; String is declared on *%s: write {%s.String()}, or declare it on %s", ts, text, ts)
		case types.Implements(pt, stringerIface):
			// x.Get().String() would not compile: a result is not
			// addressable.
			hint = fmt.Sprintf("; String is declared on *%s, and %s is not addressable: declare it on %s", ts, text, ts)
		case types.Implements(pt, marshalIface):
			hint = fmt.Sprintf("; MarshalText is declared on *%s, not on %s", ts, ts)
		}
	}
	g.errorf(p.Pos, "key part %s: unsupported type %s (want %s)%s", p.Src, ts, keyKinds, hint)
	return kp, false, false
}

// nilable reports whether a value of type t on a key path can be nil
// where the path uses it: a pointer or an interface.
func nilable(t types.Type) bool {
	switch t.Underlying().(type) {
	case *types.Pointer, *types.Interface:
		return true
	}
	return false
}

// embeddedNilChecks nil-checks the embedded fields (index, from t) that a
// promoted method is reached through, and returns the expression of the
// last one when a check was needed (expr otherwise). A field is written
// as this package can select it: by its own name from the expression so
// far, promoted through the embedded fields this package cannot name (an
// unexported embedded struct of another package); one that needs a check
// and cannot be selected so is an error.
func (g *pkgGen) embeddedNilChecks(p directive.Part, t types.Type, index []int, expr, text, method string, nilCheck func(expr, text string) string) (string, bool) {
	e, tx, full := expr, text, text
	et := t // the type of e
	checked := false
	for _, i := range index {
		if ptr, ok := t.Underlying().(*types.Pointer); ok {
			t = ptr.Elem()
		}
		st, ok := t.Underlying().(*types.Struct)
		if !ok {
			return expr, true // not reached through fields
		}
		f := st.Field(i)
		t, full = f.Type(), full+"."+f.Name()
		obj, _, _ := types.LookupFieldOrMethod(et, false, g.pkg.Types, f.Name())
		if v, isVar := obj.(*types.Var); isVar && v.Origin() == f.Origin() {
			e, tx, et = e+"."+f.Name(), tx+"."+f.Name(), f.Type()
		} else if nilable(t) {
			g.errorf(p.Pos, "key part %s: %s is promoted through the embedded %s, which this package cannot check for nil; call a method declared on the type itself", p.Src, method, full)
			return expr, false
		}
		if nilable(t) {
			e, checked = nilCheck(e, tx), true
		}
	}
	if !checked {
		return expr, true
	}
	return e, true
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
