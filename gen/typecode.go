package gen

import (
	"go/types"

	"github.com/dave/jennifer/jen"
)

// typeCode renders a type for the generated file. Every type goes through
// here so that imports are added by jen.Qual and same-package names stay
// unqualified.
func typeCode(t types.Type) jen.Code {
	switch t := t.(type) {
	case *types.Alias:
		if t.Obj().Pkg() == nil { // any
			return jen.Id(t.Obj().Name())
		}
		q := jen.Qual(t.Obj().Pkg().Path(), t.Obj().Name())
		if args := t.TypeArgs(); args.Len() > 0 {
			return q.Types(typeList(args)...)
		}
		return q
	case *types.Basic:
		if t.Kind() == types.UnsafePointer {
			return jen.Qual("unsafe", "Pointer")
		}
		return jen.Id(t.Name())
	case *types.Named:
		obj := t.Obj()
		var q *jen.Statement
		if obj.Pkg() == nil {
			q = jen.Id(obj.Name())
		} else {
			q = jen.Qual(obj.Pkg().Path(), obj.Name())
		}
		if args := t.TypeArgs(); args.Len() > 0 {
			return q.Types(typeList(args)...)
		}
		return q
	case *types.TypeParam:
		return jen.Id(t.Obj().Name())
	case *types.Pointer:
		return jen.Op("*").Add(typeCode(t.Elem()))
	case *types.Slice:
		return jen.Index().Add(typeCode(t.Elem()))
	case *types.Array:
		return jen.Index(jen.Lit(int(t.Len()))).Add(typeCode(t.Elem()))
	case *types.Map:
		return jen.Map(typeCode(t.Key())).Add(typeCode(t.Elem()))
	case *types.Chan:
		switch t.Dir() {
		case types.SendOnly:
			return jen.Chan().Op("<-").Add(typeCode(t.Elem()))
		case types.RecvOnly:
			return jen.Op("<-").Chan().Add(typeCode(t.Elem()))
		}
		return jen.Chan().Add(typeCode(t.Elem()))
	case *types.Signature:
		return jen.Func().Add(signatureCode(t))
	case *types.Struct:
		var fields []jen.Code
		for i := range t.NumFields() {
			f := t.Field(i)
			var c *jen.Statement
			if f.Embedded() {
				c = jen.Add(typeCode(f.Type()))
			} else {
				c = jen.Id(f.Name()).Add(typeCode(f.Type()))
			}
			if tag := t.Tag(i); tag != "" {
				c.Add(jen.Id("`" + tag + "`"))
			}
			fields = append(fields, c)
		}
		return jen.Struct(fields...)
	case *types.Interface:
		if t.IsImplicit() && t.NumEmbeddeds() == 1 {
			return typeCode(t.EmbeddedType(0))
		}
		var ms []jen.Code
		for i := range t.NumEmbeddeds() {
			ms = append(ms, typeCode(t.EmbeddedType(i)))
		}
		for i := range t.NumExplicitMethods() {
			m := t.ExplicitMethod(i)
			ms = append(ms, jen.Id(m.Name()).Add(signatureCode(m.Type().(*types.Signature))))
		}
		return jen.Interface(ms...)
	case *types.Union:
		var c jen.Statement
		for i := range t.Len() {
			if i > 0 {
				c.Op("|")
			}
			term := t.Term(i)
			if term.Tilde() {
				c.Op("~")
			}
			c.Add(typeCode(term.Type()))
		}
		return &c
	case *types.Tuple:
		return jen.List(typeList(t)...)
	}
	return jen.Id(t.String())
}

type typeLister interface {
	Len() int
	At(int) types.Type
}

type tupleLister struct{ *types.Tuple }

func (t tupleLister) At(i int) types.Type { return t.Tuple.At(i).Type() }

func typeList(l any) []jen.Code {
	var tl typeLister
	switch l := l.(type) {
	case *types.TypeList:
		tl = l
	case *types.Tuple:
		tl = tupleLister{l}
	}
	out := make([]jen.Code, tl.Len())
	for i := range out {
		out[i] = typeCode(tl.At(i))
	}
	return out
}

// signatureCode renders "(params) results" of a signature, unnamed.
func signatureCode(sig *types.Signature) *jen.Statement {
	var ps []jen.Code
	for i := range sig.Params().Len() {
		t := sig.Params().At(i).Type()
		if sig.Variadic() && i == sig.Params().Len()-1 {
			ps = append(ps, jen.Op("...").Add(typeCode(t.(*types.Slice).Elem())))
			continue
		}
		ps = append(ps, typeCode(t))
	}
	s := jen.Params(ps...)
	switch sig.Results().Len() {
	case 0:
	case 1:
		s.Add(typeCode(sig.Results().At(0).Type()))
	default:
		s.Params(typeList(sig.Results())...)
	}
	return s
}
