package gen_test

// Adversary round 63c (generator): wrappers that satisfy an interface.

import (
	"errors"
	"go/scanner"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/leasegen/leasegen/gen"
)

// A method wrapper is how a service exposes a leased method: the README's
// own example ("`go generate` writes `lease_gen.go` with the exported
// `ChargeOrder`; call that, never `chargeOrder`"), and with a receiver
// field of type *lease.Client the wrapper has the wrapped method's
// parameters, so it is what implements the service's interface (a gRPC
// or HTTP handler interface, registered with Register(&Service{...})).
//
// leasegen loads with -tags leasegen, so the package (and any importer it
// loads, ./...) is type-checked without lease_gen.go: the *Service that
// implements the interface only through its generated ChargeOrder does
// not implement it, and leasegen refuses the package with that type error:
//
//	svc/p.go:20:40: cannot use &Service{…} (value of type *Service) as OrderServer value in argument to Register: *Service does not implement OrderServer (missing method ChargeOrder)
//	app/app.go:9:15: cannot use &svc.Service{} ... (missing method ChargeOrder)
//
// though go build compiles both packages with the output. The output can
// then never be produced (first run) nor refreshed (every later run): the
// user must delete the registration to run go generate.
//
// Broken promise: README "Directives": "Generated files carry
// `//go:build !leasegen` (the generator loads with `-tags leasegen`, so
// stale output, the package's own or an imported package's, never blocks
// regeneration; calls to wrappers, from the package or another, are left
// to the build when the package they name generates them ...)", and
// DESIGN §3 ("the generator loads with `-tags leasegen`, so stale output
// never breaks regeneration"). A call s.ChargeOrder(...) is forgiven
// (gen/gen.go missingRE matches "undefined: X" and "has no field or method
// X"); the same wrapper used to satisfy an interface ("does not implement
// ... (missing method ChargeOrder)") is not (gen/gen.go:600 missingRE,
// gen/gen.go:564 forgiven).
func TestAdversary63c_WrapperSatisfiesInterface(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
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

//lease:lock orders:{id} deadline=1s
func (s *Service) chargeOrder(ctx context.Context, id string) error { return nil }

func Setup(l *lease.Client) { Register(&Service{leases: l}) }
`,
		"app/app.go": `package app

import "example.com/golden/svc"

// App has no directives; it registers the service in another package.
var _ svc.OrderServer = (*svc.Service)(nil)

func Run() { svc.Register(&svc.Service{}) }
`,
	})
	run := func() []byte {
		files, err := gen.Generate(gen.Config{Dir: mod, Patterns: []string{"./..."}})
		if err != nil {
			var list scanner.ErrorList
			if errors.As(err, &list) {
				for _, e := range list {
					t.Errorf("leasegen refused: %s", e)
				}
			} else {
				t.Errorf("leasegen refused: %v", err)
			}
			return nil
		}
		for _, f := range files {
			if f.Data != nil {
				if err := os.WriteFile(f.Path, f.Data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		b, _ := os.ReadFile(filepath.Join(mod, "svc", "lease_gen.go"))
		return b
	}
	first := run()
	if first == nil {
		return
	}
	cmd := exec.Command("go", "vet", "./...")
	cmd.Dir = mod
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go vet: %v\n%s\n--- lease_gen.go\n%s", err, out, first)
	}
	// And again, with the output in place: nothing changes.
	if second := run(); second != nil && string(second) != string(first) {
		t.Errorf("second run changed the output:\n%s\n---\n%s", first, second)
	}
}
