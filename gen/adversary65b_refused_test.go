package gen_test

// Adversary round 65b (generator): valid code, generated and built before
// round 64b, that its narrowed forgiveness now refuses.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// adv65bWantGenerated runs leasegen on each package and wants it to
// generate, and the packages to build and vet (one go build and one go
// vet for all: each go command loads the module anew).
func adv65bWantGenerated(t *testing.T, mod string, pkgs []string) {
	t.Helper()
	var built []string
	for _, pkg := range pkgs {
		if errs := adv46Generate(t, filepath.Join(mod, pkg)); errs != nil {
			t.Errorf("%s: valid code refused:\n%s", pkg, strings.Join(errs, "\n"))
			continue
		}
		built = append(built, "./"+pkg)
	}
	if len(built) == 0 {
		return
	}
	for _, args := range [][]string{append([]string{"build", "-o", os.DevNull}, built...), append([]string{"vet"}, built...)} {
		cmd := exec.Command("go", args...)
		cmd.Dir = mod
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("go %s: %v\n%s", args[0], err, out)
		}
	}
}

// Round 64b forgives a missing wrapper method only where namedType
// (gen/gen.go:644) can resolve the type the message writes, by name, in
// the package scope (or a direct import's), and an undefined wrapper
// only where typePosition (gen/gen.go:731) does not take it for a type.
// Both misjudge valid code that generated and built before (checked at
// 3966d5f), which is now refused with the compiler's own error:
//
//   - a function-local type embedding *Service, or a local alias of
//     Service, registered or called (`*Local does not implement
//     OrderServer (missing method ChargeOrder)`): the local TypeName is
//     not in the package scope;
//   - an anonymous struct embedding *Service (`struct{*Service} does not
//     implement ...`, `type struct{*Service; n int} has no field or
//     method ...`): not a name at all, and with a space the message no
//     longer matches noMethodRE's \S+ (gen/gen.go:780), so it is not even
//     set aside;
//   - a wrapper passed to a function or variable that shadows make or new
//     (`make := func(f any) int`; a package-level `func new(f any) int`):
//     typePosition takes any call of an identifier spelled new or make
//     for the builtin (gen/gen.go:766).
//
// Broken promise: README "Directives": "calls to wrappers, from the
// package or another, are left to the build when the package they name
// generates them ... so is a type that lacks a wrapper as a method, where
// an interface asks for it, as a service registered with its wrappers
// does". Each of these types has the wrapper as a method once the output
// exists (promoted from *Service), and Charge is passed as a value.
//
// Fixed when each package generates, builds and vets.
func TestAdversary65b_ValidWrapperUseRefused(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	cases := []struct{ pkg, src string }{
		{"localtype", "func Setup() {\n\ttype Local struct{ *Service }\n\tRegister(&Local{})\n}\n"},
		{"localcall", "func Use(ctx context.Context) error {\n\ttype Local struct{ *Service }\n\treturn (&Local{&Service{}}).ChargeOrder(ctx, \"x\")\n}\n"},
		{"localalias", "func Setup() {\n\ttype S = Service\n\tRegister(&S{})\n}\n"},
		{"anonstruct", "var _ OrderServer = struct{ *Service }{}\n"},
		{"anonfield", "func Use(ctx context.Context) error {\n\ts := struct {\n\t\t*Service\n\t\tn int\n\t}{&Service{}, 1}\n\t_ = s.n\n\treturn s.ChargeOrder(ctx, \"x\")\n}\n"},
		{"makelike", "func Use() int {\n\tmake := func(f any) int { return 0 }\n\treturn make(Charge)\n}\n"},
		{"newlike", "func new(f any) int { return 0 }\n\nvar N = new(Charge)\n"},
	}
	files := map[string]string{}
	var pkgs []string
	for _, c := range cases {
		files[c.pkg+"/p.go"] = fmt.Sprintf(adv65bHead, c.pkg) + c.src
		pkgs = append(pkgs, c.pkg)
	}
	adv46Write(t, mod, files)
	adv65bWantGenerated(t, mod, pkgs)
}

// The same for an importer of a package generated before (outside the
// run), whose wrapper methods come from depWrapperNames:
//
//   - samename: another imported package is also named dep (here only
//     through util), so go/types writes the type with its quoted path,
//     `*"example.com/golden/a/dep".Service`; namedType cuts at the last
//     "." (inside the path), compares `"example.com/golden/a/dep"` (with
//     quotes) to the imports' paths and names, finds none, and refuses;
//     generated and built at 3966d5f.
//   - aliasrecv: dep declares its method on an alias receiver
//     (`type S = Service2; func (s *S) chargeOrder`). wrapperNames keys it
//     by the receiver as written (recvTypeName, gen/gen.go:340: "S"), but
//     hasWrapperMethod looks up the aliased type's name
//     (Service2.ChargeOrder), as the run's own names do (naming.go:124,
//     recv.Obj().Name()): `*dep.Service2 does not implement
//     dep.OrderServer (missing method ChargeOrder)`. Generated and built
//     at 3966d5f; generated in a ./... run that includes dep.
//
// Same promise: "calls to wrappers, from the package or another, are
// left to the build when the package they name generates them".
//
// Fixed when each importer generates, builds and vets.
func TestAdversary65b_ImportWrapperMethodRefused(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"a/dep/p.go": `package dep

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type OrderServer interface {
	ChargeOrder(ctx context.Context, id string) error
}

type Service struct{ leases *lease.Client }

//lease:lock orders:{id} deadline=1s
func (s *Service) chargeOrder(ctx context.Context, id string) error { return nil }

type S = Service2

type Service2 struct{ leases *lease.Client }

//lease:lock orders2:{id} deadline=1s
func (s *S) chargeOrder(ctx context.Context, id string) error { return nil }
`,
		"b/dep/p.go": "package dep\n\ntype T int\n",
		"util/u.go":  "package util\n\nimport \"example.com/golden/b/dep\"\n\nvar X dep.T\n",
		"wire/w.go":  "package wire\n\nimport \"example.com/golden/a/dep\"\n\nfunc Svc() *dep.Service { return &dep.Service{} }\n",
		"samename/p.go": `package samename

import (
	"context"

	"example.com/golden/a/dep"
	"example.com/golden/util"
)

var _ = util.X

var _ dep.OrderServer = &dep.Service{}

func Use(ctx context.Context, s *dep.Service) error { return s.ChargeOrder(ctx, "x") }
`,
		"aliasrecv/p.go": `package aliasrecv

import (
	"context"

	"example.com/golden/a/dep"
)

var _ dep.OrderServer = &dep.Service2{}

func Use(ctx context.Context, s *dep.S) error { return s.ChargeOrder(ctx, "x") }
`,
	})
	if errs := adv46Generate(t, filepath.Join(mod, "a/dep")); errs != nil {
		t.Fatalf("dep: %q", errs)
	}
	adv65bWantGenerated(t, mod, []string{"samename", "aliasrecv"})
}
