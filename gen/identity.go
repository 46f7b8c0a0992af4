package gen

import (
	"fmt"
	"go/constant"
	"go/token"
	"go/types"
	"strings"

	"github.com/leasegen/leasegen/gen/directive"
	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/templates"
)

// Leader wrappers: their name, shape and the candidate's identity.

// leaderSuffix ends a leader wrapper's default name: settle ->
// SettleAsLeader.
const leaderSuffix = "AsLeader"

// checkLeaderShape reports a leader function that returns more than an
// error (checkShape has checked the rest): it runs once per term, and its
// wrapper campaigns until ctx ends, so there is no result to return.
func (g *pkgGen) checkLeaderShape(pos token.Pos, what string, sig *types.Signature) bool {
	if sig.Results().Len() > 1 {
		g.errorf(pos, "%s: a leader function returns only error (it runs once per term won, and its wrapper campaigns until ctx ends)", what)
		return false
	}
	return true
}

// identitySource is where a leader wrapper gets its candidate's name
// (identity=): a receiver field, one of the target's parameters or a
// package-level variable or constant, of a string type. None set: the
// runtime's default (lease.DefaultOwner).
type identitySource struct {
	field, param, pkg string
	conv              bool // a named string type: converted with string(...)
}

// identity resolves d's identity= option. A package-level name is
// reserved in n, so that no parameter of the wrapper shadows it.
func (g *pkgGen) identity(d *directive.Directive, sig *types.Signature, recv *types.Named, n *namer) (identitySource, bool) {
	if !d.Identity.Set() {
		return identitySource{}, true
	}
	name := d.Identity.V
	str := func(t types.Type) (ok, conv bool) {
		b, ok := t.Underlying().(*types.Basic)
		if !ok || b.Info()&types.IsString == 0 {
			return false, false
		}
		return true, b.Info()&types.IsUntyped == 0 && !types.Identical(t, types.Typ[types.String])
	}
	var cands []string
	wrong := "" // name found, but not of a string type
	note := func(what string, t types.Type) {
		if wrong == "" {
			wrong = fmt.Sprintf(": %s %s is of type %s", what, name, types.TypeString(t, types.RelativeTo(g.pkg.Types)))
		}
	}
	if recv != nil {
		if st, ok := recv.Underlying().(*types.Struct); ok {
			for i := range st.NumFields() {
				if f := st.Field(i); !f.Embedded() {
					if ok, _ := str(f.Type()); !ok && f.Name() == name {
						note("field", f.Type())
					}
					if ok, conv := str(f.Type()); ok {
						if f.Name() == name {
							return identitySource{field: name, conv: conv}, true
						}
						cands = append(cands, f.Name())
					}
				}
			}
		}
		// A field promoted from an embedded struct (a Base that holds the
		// node's name), as the receiver's selector reaches it.
		if v, _ := g.recvField(recv, name); v != nil && !v.Embedded() {
			if ok, conv := str(v.Type()); ok {
				return identitySource{field: name, conv: conv}, true
			}
			note("field", v.Type())
		}
	}
	for i := range sig.Params().Len() {
		p := sig.Params().At(i)
		if ok, _ := str(p.Type()); !ok && p.Name() == name {
			note("parameter", p.Type())
		}
		if ok, conv := str(p.Type()); ok && p.Name() != "" && p.Name() != "_" {
			if p.Name() == name {
				return identitySource{param: name, conv: conv}, true
			}
			cands = append(cands, p.Name())
		}
	}
	scope := g.pkg.Types.Scope()
	pkgLevel := func(obj types.Object) (ok, conv bool) {
		switch obj.(type) {
		case *types.Var, *types.Const:
			return str(obj.Type())
		}
		return false, false
	}
	if obj := scope.Lookup(name); obj != nil {
		if ok, conv := pkgLevel(obj); ok {
			if c, isC := obj.(*types.Const); isC && c.Val().Kind() == constant.String {
				// A constant's value is known now: what the runtime
				// would refuse (a name too long to store) is refused here.
				if err := (lease.LeadSpec{Owner: constant.StringVal(c.Val())}).Check(); err != nil {
					g.errorf(d.Identity.Pos, "identity=%s: the runtime would refuse this candidate: %s", name, strings.TrimPrefix(err.Error(), "lease: "))
					return identitySource{}, false
				}
			}
			n.reserve(name)
			return identitySource{pkg: name, conv: conv}, true
		}
		note("package-level "+map[bool]string{true: "constant", false: "name"}[isConst(obj)], obj.Type())
	}
	for _, s := range scope.Names() {
		if ok, _ := pkgLevel(scope.Lookup(s)); ok {
			cands = append(cands, s)
		}
	}
	if wrong != "" {
		g.errorf(d.Identity.Pos, "identity=%s%s; the candidate's identity is a string (a host or pod name)", name, wrong)
		return identitySource{}, false
	}
	if recv != nil && g.ambiguousField(recv, name) {
		g.errorf(d.Identity.Pos, "identity=%s: the receiver's %s is ambiguous: embedded structs at the same depth both have a field %s (Go refuses the selector); give %s a field of its own, or name a parameter or package-level variable or constant", name, name, name, recv.Obj().Name())
		return identitySource{}, false
	}
	g.errorf(d.Identity.Pos, "identity=%s: no receiver field, parameter or package-level variable or constant %s of a string type%s", name, name, directive.Suggest(name, cands))
	return identitySource{}, false
}

func isConst(obj types.Object) bool { _, ok := obj.(*types.Const); return ok }

// expr is the identity's Go expression in wrapper w ("" for none); orig
// maps the target's parameter names to their index in w.Params.
func (s identitySource) expr(w *templates.Wrapper, orig map[string]int) string {
	var e string
	switch {
	case s.field != "":
		e = w.RecvName + "." + s.field
	case s.param != "":
		e = w.Params[orig[s.param]].Name
	case s.pkg != "":
		e = s.pkg
	default:
		return ""
	}
	if s.conv {
		return "string(" + e + ")"
	}
	return e
}
