package gen_test

// Adversary round 64b (generator): "missing method X" forgiven for a type
// that never gets the wrapper X.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Round 63c forgave a type error "(missing method X)" so that a service
// registered with its own wrappers can be generated. The forgiveness
// matches on the method's name only: forgiven (gen/gen.go:564) takes any
// wrapper of the package whose name ends in X (a method wrapper of
// another receiver, or a plain function wrapper), or any wrapper named X
// of any package the file imports, whatever type the error is about. So
// code that is broken with or without the output, where no wrapper can
// ever be the missing method, is let through: leasegen exits 0, writes
// lease_gen.go, and go build then fails in the user's own file:
//
//	svc/p.go:…: *Other does not implement OrderServer (missing method ChargeOrder)
//	fn/p.go:…: *strings.Builder does not implement io.Reader (missing method Read)
//
// Broken promises: README "Directives": wrappers are left to the build
// where "a type that lacks a wrapper as a method, where an interface asks
// for it, as a service registered with its wrappers does" — *Other,
// *strings.Builder and *svc.Other never have the wrapper as a method;
// DESIGN §3 "All errors are collected and printed sorted; exit 1; no
// file is written or changed when any error exists" and STYLE 2 "refuse
// to generate from broken code" (gen.CompileError: "leasegen refuses to
// generate from broken code"). Cause: gen/gen.go:566-571 (d.method: any
// own name's last element) and :590 (d.method: any import generating
// the bare name), with missingRE (gen/gen.go:603) capturing only the
// method name, not the type that lacks it.
//
// Fixed when each package is refused with the compiler's error at the
// line named (and nothing written). The "call" row predates 63c (a call
// on a receiver that never gets the wrapper, "has no field or method"):
// same cause.
func TestAdversary64b_MissingMethodOtherReceiver(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		// A wrapper (*Service).ChargeOrder; *Other is registered.
		"svc/p.go": `package svc

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type OrderServer interface {
	ChargeOrder(ctx context.Context, id string) error
}

func Register(s OrderServer) {}

type Service struct{ leases *lease.Client }

type Other struct{}

//lease:lock orders:{id} deadline=1s
func (s *Service) chargeOrder(ctx context.Context, id string) error { return nil }

func Setup() { Register(&Other{}) }
`,
		// A function wrapper Read; a standard type lacks Read.
		"fn/p.go": `package fn

import (
	"context"
	"io"
	"strings"
)

//lease:lock r:{id} deadline=1s
func read(ctx context.Context, id string) error { return nil }

var _ io.Reader = &strings.Builder{}
`,
		// A call of a method *Other never has.
		"call/p.go": `package call

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type Service struct{ leases *lease.Client }

type Other struct{}

//lease:lock orders:{id} deadline=1s
func (s *Service) chargeOrder(ctx context.Context, id string) error { return nil }

func Use(ctx context.Context) error { return Other{}.ChargeOrder(ctx, "x") }
`,
		// A clean dependency with wrappers ChargeOrder and Read.
		"dep/p.go": `package dep

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type OrderServer interface {
	ChargeOrder(ctx context.Context, id string) error
}

type Service struct{ leases *lease.Client }

type Other struct{}

//lease:lock orders:{id} deadline=1s
func (s *Service) chargeOrder(ctx context.Context, id string) error { return nil }

//lease:lock r:{id} deadline=1s
func read(ctx context.Context, id string) error { return nil }
`,
		// Importers: dep.Other never gets ChargeOrder; strings.Builder
		// has nothing to do with dep.
		"imp/p.go": `package imp

import "example.com/golden/dep"

var _ dep.OrderServer = (*dep.Other)(nil)
`,
		"unrel/p.go": `package unrel

import (
	"io"
	"strings"

	_ "example.com/golden/dep"
)

var _ io.Reader = &strings.Builder{}
`,
	})
	if errs := adv46Generate(t, filepath.Join(mod, "dep")); errs != nil {
		t.Fatalf("dep: %q", errs)
	}
	for _, c := range []struct{ pkg, at, msg string }{
		{"svc", "p.go:22:", "missing method ChargeOrder"},
		{"fn", "p.go:12:", "missing method Read"},
		{"call", "p.go:16:", "has no field or method ChargeOrder"},
		{"imp", "p.go:5:", "missing method ChargeOrder"},
		{"unrel", "p.go:10:", "missing method Read"},
	} {
		t.Run(c.pkg, func(t *testing.T) {
			errs := adv46Generate(t, filepath.Join(mod, c.pkg))
			for _, e := range errs {
				if strings.HasPrefix(e, c.at) && strings.Contains(e, c.msg) {
					return
				}
			}
			var out []byte
			if errs == nil {
				cmd := exec.Command("go", "build", "-o", os.DevNull, "./"+c.pkg)
				cmd.Dir = mod
				out, _ = cmd.CombinedOutput()
			}
			t.Errorf("want the compiler's error %s ...%s..., nothing written; leasegen reported %q (go build after it: %s)", c.at, c.msg, errs, out)
		})
	}
}
