package gen

import (
	"fmt"
	"go/types"
	"slices"
	"strconv"
	"strings"

	"github.com/leasegen/leasegen/gen/directive"
)

// Client resolution: where a wrapper gets its *lease.Client.

// clientSource is where a wrapper's *lease.Client comes from: an
// expression (receiver field, package variable), one of the target's own
// parameters, or a parameter the wrapper adds after ctx.
type clientSource struct {
	expr  string // a field or package variable; "" otherwise
	param int    // index of the target's own *lease.Client parameter, or -1
	added string // name of the added parameter, or ""
}

// client finds the source, in this order: client= (a receiver field, a
// parameter or a package-level variable), the receiver's one field of type
// *lease.Client (its own, else one promoted from an embedded struct), the
// target's one parameter of that type, else an added parameter. Two or more
// candidates of one kind need client=.
func (g *pkgGen) client(d *directive.Directive, sig *types.Signature, recv *types.Named, recvName string, n *namer) (clientSource, bool) {
	fields, amb := g.clientFields(recv)
	var params []int // indexes of the target's *lease.Client parameters
	for i := range sig.Params().Len() {
		if isLeaseClient(sig.Params().At(i).Type()) {
			params = append(params, i)
		}
	}
	paramName := func(i int) string {
		if name := sig.Params().At(i).Name(); name != "" && name != "_" {
			return name
		}
		return "parameter " + strconv.Itoa(i+1) + " (unnamed)"
	}
	none := clientSource{param: -1}
	if d.Client.Set() {
		name := d.Client.V
		if recv != nil && g.clientField(recv, name) {
			return clientSource{expr: recvName + "." + name, param: -1}, true
		}
		for _, i := range params {
			if sig.Params().At(i).Name() == name {
				return clientSource{param: i}, true
			}
		}
		if v, ok := g.pkg.Types.Scope().Lookup(name).(*types.Var); ok && isLeaseClient(v.Type()) {
			n.reserve(name)
			return clientSource{expr: name, param: -1}, true
		}
		if recv != nil && g.ambiguousField(recv, name) {
			g.errorf(d.Client.Pos, "client=%s: %s.%s is ambiguous: embedded structs at the same depth both have a field %s (Go refuses the selector); give %s a field of its own, or name a parameter or package-level variable", name, recvName, name, name, recv.Obj().Name())
			return none, false
		}
		var cands []string
		cands = append(cands, fields...)
		for _, i := range params {
			cands = append(cands, sig.Params().At(i).Name())
		}
		for _, s := range g.pkg.Types.Scope().Names() {
			if v, ok := g.pkg.Types.Scope().Lookup(s).(*types.Var); ok && isLeaseClient(v.Type()) {
				cands = append(cands, s)
			}
		}
		g.errorf(d.Client.Pos, "client=%s: no receiver field, parameter or package-level variable %s of type *lease.Client%s", name, name, directive.Suggest(name, cands))
		return none, false
	}
	switch {
	case len(amb) > 0:
		// Go refuses recv.C when two embedded structs at one depth have
		// a field C: picking one, or adding a parameter, would hide that.
		g.errorf(d.Slash, "the receiver's *lease.Client field %s is promoted from embedded structs at the same depth, so %s.%s is ambiguous: give %s a field of its own, or choose a parameter or package-level variable with client=", amb[0], recvName, amb[0], recv.Obj().Name())
		return none, false
	case len(fields) == 1:
		return clientSource{expr: recvName + "." + fields[0], param: -1}, true
	case len(fields) > 1:
		g.errorf(d.Slash, "the receiver has %d fields of type *lease.Client (%s): choose one with client=", len(fields), strings.Join(fields, ", "))
		return none, false
	case len(params) == 1:
		return clientSource{param: params[0]}, true
	case len(params) > 1:
		var names []string
		for _, i := range params {
			names = append(names, paramName(i))
		}
		g.errorf(d.Slash, "the function takes %d parameters of type *lease.Client (%s): choose one with client=", len(params), strings.Join(names, ", "))
		return none, false
	}
	// No source: the wrapper takes the client as a parameter after ctx.
	if path, name := g.hiddenClientField(recv); name != "" {
		// Most likely a field named like the embedded client by mistake:
		// the wrapper's new parameter would be the only sign of it.
		g.errs.warn(d.Slash, fmt.Sprintf("lease: the receiver's embedded %s.%s is a *lease.Client that %s.%s hides (Go selects the shallower field), so the wrapper takes the client as a parameter; rename one of them, or choose a source with client=", path, name, recvName, name))
	}
	return clientSource{added: n.alloc("c", "c"), param: -1}, true
}

// hiddenClientField finds a *lease.Client field (name, in the embedded
// struct at path, "Base") that recv cannot select: a shallower field or
// method of the same name hides it. name is "" if there is none.
func (g *pkgGen) hiddenClientField(recv *types.Named) (path, name string) {
	embeddedFields(recv, func(p string, f *types.Var) bool {
		if p != "" && isLeaseClient(f.Type()) {
			if v, ambiguous := g.recvField(recv, f.Name()); v != f && !ambiguous {
				path, name = p, f.Name()
			}
		}
		return name == ""
	}, nil)
	return path, name
}

// embeddedFields calls field for recv's own fields (path ""), then those
// of the structs it embeds, level by level (path "Base", "Base.Inner"),
// each embedded struct once, while field returns true. levelDone, if not
// nil, is called after each level and stops the walk by returning false.
func embeddedFields(recv *types.Named, field func(path string, f *types.Var) bool, levelDone func() bool) {
	if recv == nil {
		return
	}
	st, ok := recv.Underlying().(*types.Struct)
	if !ok {
		return
	}
	type node struct {
		st   *types.Struct
		path string
	}
	seen := map[types.Type]bool{}
	for level := []node{{st, ""}}; len(level) > 0; {
		var next []node
		for _, nd := range level {
			for i := range nd.st.NumFields() {
				f := nd.st.Field(i)
				if !field(nd.path, f) {
					return
				}
				if !f.Embedded() {
					continue
				}
				t := types.Unalias(f.Type())
				if p, ok := t.(*types.Pointer); ok {
					t = types.Unalias(p.Elem())
				}
				if est, ok := t.Underlying().(*types.Struct); ok && !seen[t] {
					seen[t] = true
					path := f.Name()
					if nd.path != "" {
						path = nd.path + "." + path
					}
					next = append(next, node{est, path})
				}
			}
		}
		if levelDone != nil && !levelDone() {
			return
		}
		level = next
	}
}

// recvField is the field recv.name selects: one of recv's own fields, or
// one promoted from an embedded struct that no shallower field or method
// hides (nil if none, or if the name is a method). ambiguous: Go refuses
// recv.name, two embedded structs at the shallowest depth having it.
func (g *pkgGen) recvField(recv *types.Named, name string) (v *types.Var, ambiguous bool) {
	obj, index, _ := types.LookupFieldOrMethod(types.NewPointer(recv), true, g.pkg.Types, name)
	if obj == nil {
		return nil, index != nil
	}
	if v, ok := obj.(*types.Var); ok && v.IsField() {
		return v, false
	}
	return nil, false
}

// clientField reports that recv.name selects a field of type *lease.Client.
func (g *pkgGen) clientField(recv *types.Named, name string) bool {
	v, _ := g.recvField(recv, name)
	return v != nil && isLeaseClient(v.Type())
}

// ambiguousField reports that recv.name is ambiguous (see recvField).
func (g *pkgGen) ambiguousField(recv *types.Named, name string) bool {
	_, amb := g.recvField(recv, name)
	return amb
}

// clientFields lists the fields of type *lease.Client that recv.name
// selects: recv's own, else those promoted from embedded structs at the
// shallowest depth that has any (a service that embeds a Base holding the
// client). amb lists the names of such fields at that depth that Go finds
// ambiguous (two embedded structs have them).
func (g *pkgGen) clientFields(recv *types.Named) (names, amb []string) {
	embeddedFields(recv, func(_ string, f *types.Var) bool {
		if isLeaseClient(f.Type()) && !slices.Contains(names, f.Name()) && !slices.Contains(amb, f.Name()) {
			switch v, ambiguous := g.recvField(recv, f.Name()); {
			case v != nil && isLeaseClient(v.Type()):
				names = append(names, f.Name())
			case ambiguous:
				amb = append(amb, f.Name())
			}
		}
		return true
	}, func() bool { return len(names) == 0 && len(amb) == 0 })
	return names, amb
}
