package gen

import (
	"go/types"
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/leasegen/leasegen/gen/directive"
)

// Client resolution: where a wrapper gets its *lease.Client.

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
