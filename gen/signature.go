package gen

import (
	"go/token"
	"go/types"
)

// Signature checks: what a leased function must look like.

func isContext(t types.Type) bool {
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "context" && n.Obj().Name() == "Context"
}

var errorType = types.Universe.Lookup("error").Type()

func isLeaseClient(t types.Type) bool {
	p, ok := types.Unalias(t).(*types.Pointer)
	if !ok {
		return false
	}
	n, ok := types.Unalias(p.Elem()).(*types.Named)
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
	for i := range sig.TypeParams().Len() {
		if tp := sig.TypeParams().At(i); hasInvalid(tp.Constraint()) {
			g.errorf(tp.Obj().Pos(), "%s: the constraint of type parameter %s is undefined in the code as written (a name leasegen generates for a directive is a function, not a type)", what, tp.Obj().Name())
			ok = false
		}
	}
	for _, vs := range [][]*types.Var{tupleVars(sig.Params()), tupleVars(sig.Results())} {
		for _, v := range vs {
			if !hasInvalid(v.Type()) {
				continue
			}
			// A type the checker could not resolve, whose error the run
			// forgave as a name it generates (undefined: Charge, with a
			// wrapper Charge): a wrapper is a function, not a type, and
			// the wrapper could only write "invalid type"
			// (TestAdversary63c_ForgivenUndefinedInType).
			g.errorf(v.Pos(), "%s: the type of %s is undefined in the code as written: leasegen cannot write it into the wrapper (a wrapper it generates is a function, not a type, and a decorator type it generates cannot appear in a leased signature)", what, varName(v))
			ok = false
		}
	}
	return ok
}

// varName names a parameter or result in an error.
func varName(v *types.Var) string {
	if v.Name() == "" || v.Name() == "_" {
		return "an unnamed parameter or result"
	}
	return v.Name()
}

// hasInvalid reports whether t is, or is built from, a type the checker
// could not resolve. A named type is looked at for its type arguments
// only: its own declaration checked (or failed) where it was declared.
func hasInvalid(t types.Type) bool {
	switch t := t.(type) {
	case *types.Basic:
		return t.Kind() == types.Invalid
	case *types.Alias:
		return hasInvalid(types.Unalias(t))
	case *types.Pointer:
		return hasInvalid(t.Elem())
	case *types.Slice:
		return hasInvalid(t.Elem())
	case *types.Array:
		return hasInvalid(t.Elem())
	case *types.Chan:
		return hasInvalid(t.Elem())
	case *types.Map:
		return hasInvalid(t.Key()) || hasInvalid(t.Elem())
	case *types.Signature:
		for _, vs := range [][]*types.Var{tupleVars(t.Params()), tupleVars(t.Results())} {
			for _, v := range vs {
				if hasInvalid(v.Type()) {
					return true
				}
			}
		}
	case *types.Struct:
		for i := range t.NumFields() {
			if hasInvalid(t.Field(i).Type()) {
				return true
			}
		}
	case *types.Interface:
		for i := range t.NumExplicitMethods() {
			if hasInvalid(t.ExplicitMethod(i).Type()) {
				return true
			}
		}
		for i := range t.NumEmbeddeds() {
			if hasInvalid(t.EmbeddedType(i)) {
				return true
			}
		}
	case *types.Union:
		for i := range t.Len() {
			if hasInvalid(t.Term(i).Type()) {
				return true
			}
		}
	case *types.TypeParam:
		return false // its constraint is checked with the signature's type parameters
	case *types.Named:
		for i := range t.TypeArgs().Len() {
			if hasInvalid(t.TypeArgs().At(i)) {
				return true
			}
		}
	}
	return false
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
