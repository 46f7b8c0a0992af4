package gen_test

// Adversary round 65b (generator): code broken with or without the
// output that round 64b's narrowed forgiveness still lets through.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// adv65bHead is the head of every package below: a method wrapper
// (*Service).ChargeOrder, an interface asking for it, and a function
// wrapper Charge (which takes an added *lease.Client after ctx).
const adv65bHead = `package %s

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type OrderServer interface {
	ChargeOrder(ctx context.Context, id string) error
}

func Register(s OrderServer) {}

type Service struct{ leases *lease.Client }

//lease:lock orders:{id} deadline=1s
func (s *Service) chargeOrder(ctx context.Context, id string) error { return nil }

//lease:lock a:{id} deadline=1s
func charge(ctx context.Context, id string) error { return nil }

var _ = context.Background

`

// adv65bCase is one package of a table: its source after adv65bHead, and
// the text on the line a compiler error belongs to.
type adv65bCase struct{ pkg, src, at string }

// adv65bLine returns the 1-based line of src holding at (its last
// occurrence).
func adv65bLine(src, at string) int {
	i := strings.LastIndex(src, at)
	if i < 0 {
		return 0
	}
	return strings.Count(src[:i], "\n") + 1
}

// adv65bWantRefused runs leasegen on each case's package and wants an
// error at the case's line of p.go and nothing written; otherwise it
// reports what go build says of the package leasegen let through.
func adv65bWantRefused(t *testing.T, mod string, files map[string]string, cases []adv65bCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.pkg, func(t *testing.T) {
			line := adv65bLine(files[c.pkg+"/p.go"], c.at)
			errs := adv46Generate(t, filepath.Join(mod, c.pkg))
			for _, e := range errs {
				if strings.HasPrefix(e, fmt.Sprintf("p.go:%d:", line)) {
					return
				}
			}
			var out []byte
			if errs == nil {
				cmd := exec.Command("go", "build", "-o", os.DevNull, "./"+c.pkg)
				cmd.Dir = mod
				out, _ = cmd.CombinedOutput()
			}
			t.Errorf("want the compiler's error at p.go:%d, nothing written; leasegen reported %q (go build after it: %s)", line, errs, out)
		})
	}
}

// Round 64b forgives "undefined: Charge" only where typePosition
// (gen/gen.go:731) does not take the name for a type. Its walk up the
// syntax tree misses three type places:
//
//   - a type switch's case list (case Charge:): the parent is an
//     *ast.CaseClause, which falls to "default: return false";
//   - a type argument of an instantiation with two or more arguments
//     (Do[int, Charge]() and a conversion Fn[int, Charge](nil)):
//     *ast.IndexListExpr is passed through as if it were the wrapper
//     being instantiated, and the *ast.CallExpr above returns false,
//     while the one-argument *ast.IndexExpr returns true for its index;
//   - a conversion to a pointer type ((*Charge)(nil), the
//     `var _ I = (*T)(nil)` idiom): *ast.StarExpr and *ast.ParenExpr are
//     passed through and the CallExpr returns false.
//
// And inTypePosition (gen/gen.go:706) matches the error's file name
// against the files' names, so in a file with a //line directive (goyacc,
// templates) the error's position (gen.y:10) names no file, the name is
// taken for an expression, and `var v Charge` is forgiven again.
//
// Each is forgiven, leasegen exits 0, and go build fails in the user's
// file:
//
//	typeswitch/p.go:27:12: Charge (function) is not a type
//	indexlist/p.go:27:22: Charge (function) is not a type
//	starconv/p.go:25:23: invalid operation: cannot indirect Charge (...)
//
// Broken promises: README "Directives": only "calls to wrappers ... are
// left to the build" (none of these is a call of Charge); DESIGN §3
// "All errors are collected and printed sorted; exit 1; no file is written
// or changed when any error exists"; STYLE 2 "refuse to generate from
// broken code". (The comment on forgiven, gen/gen.go:598, says "A name in
// a type's place is forgiven only as a type this run generates".)
//
// Fixed when each package is refused with the compiler's error at the
// line that uses Charge as a type. (A use under a //line directive,
// whose position names another file, is still forgiven: README.)
func TestAdversary65b_BrokenTypeUseForgiven(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	cases := []adv65bCase{
		{"typeswitch", "func Use(x any) {\n\tswitch x.(type) {\n\tcase int, Charge:\n\t}\n}\n", "case int, Charge"},
		{"indexlist", "func Do[A, B any]() {}\n\nfunc Use() { Do[int, Charge]() }\n", "Do[int, Charge]"},
		{"indexlistconv", "type Fn[A, B any] func()\n\nvar Q = Fn[int, Charge](nil)\n", "Fn[int, Charge]"},
		{"starconv", "var _ OrderServer = (*Charge)(nil)\n", "(*Charge)"},
	}
	files := map[string]string{}
	for _, c := range cases {
		files[c.pkg+"/p.go"] = fmt.Sprintf(adv65bHead, c.pkg) + c.src
	}
	adv46Write(t, mod, files)
	adv65bWantRefused(t, mod, files, cases)
}

// Round 64b forgives "(missing method ChargeOrder)" and "has no field or
// method ChargeOrder" only for a type the run generates ChargeOrder on,
// or a struct embedding it (hasWrapperMethod, gen/gen.go:675). It looks
// at the type's name only (namedType, gen/gen.go:644, strips every "*"
// and resolves the bare name in the package scope), so a type that will
// still lack the method once the output exists is forgiven:
//
//   - a value where the wrapper has a pointer receiver (Service{} as
//     OrderServer; an embedding struct by value; Service{}.ChargeOrder()
//     on an unaddressable value);
//   - a pointer to a pointer (**Service has no methods);
//   - a function-local type Other (no methods) resolved as the
//     package-level Other, which embeds *Service;
//
// leasegen exits 0 and go build fails in the user's file:
//
//	valuerecv/p.go:25:21: ... Service does not implement OrderServer (method ChargeOrder has pointer receiver)
//	valuecall/p.go:25:56: cannot call pointer method ChargeOrder on Service
//	ptrptr/p.go:25:71: pp.ChargeOrder undefined (type **Service has no field or method ChargeOrder)
//	shadowlocal/p.go:29:11: ... *Other does not implement OrderServer (missing method ChargeOrder)
//
// Broken promises: README "Directives": left to the build is "a type that
// lacks a wrapper as a method, where an interface asks for it, as a
// service registered with its wrappers does" — none of these types has
// the wrapper as the method asked for; DESIGN §3 "no file is written or
// changed when any error exists"; STYLE 2 "refuse to generate from broken
// code". (Two embedded types given the method at the same depth, and an
// interface asking for another signature than the wrapper's, are left to
// the build: README.)
//
// Fixed when each package is refused with the compiler's error at the
// line named, nothing written.
func TestAdversary65b_BrokenMethodUseForgiven(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	cases := []adv65bCase{
		{"valuerecv", "var _ OrderServer = Service{}\n", "Service{}"},
		{"valueembed", "type Outer struct{ Service }\n\nvar _ OrderServer = Outer{}\n", "Outer{}"},
		{"valuecall", "func Use(ctx context.Context) error { return Service{}.ChargeOrder(ctx, \"x\") }\n", "ChargeOrder(ctx"},
		{"ptrptr", "func Use(ctx context.Context, s *Service) error { pp := &s; return pp.ChargeOrder(ctx, \"x\") }\n", "pp.ChargeOrder"},
		{"shadowlocal", "type Other struct{ *Service }\n\nfunc Setup() {\n\ttype Other struct{}\n\tRegister(&Other{})\n}\n", "Register(&Other{})"},
	}
	files := map[string]string{}
	for _, c := range cases {
		files[c.pkg+"/p.go"] = fmt.Sprintf(adv65bHead, c.pkg) + c.src
	}
	adv46Write(t, mod, files)
	adv65bWantRefused(t, mod, files, cases)
}
