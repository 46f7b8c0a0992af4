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
	return ok
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
