package gen_test

// Adversary round 64b (generator): inputs that held against round 63c's
// fixes. One module generated with ./..., built and vetted, and a second
// run must change nothing. Covered: imports of the output named like the
// fixed imports (context, fmt, strconv, time) and like predeclared
// identifiers round 63c did not test (any, clear, min, comparable, nil,
// iota, true), with a package-level context1 forcing context2; packages
// error and error1 both used (error1, error11); a parameter named error1
// used as a key part. A service that satisfies an interface only through
// its wrappers, in its package (through an embedding struct too) and in
// an importer (as a type argument's constraint: "does not satisfy ...
// (missing method ...)"), with a leased signature of the importer using
// the service's types, an interface literal and a constraint: none of
// these is refused by the new invalid-type check.

import (
	"errors"
	"fmt"
	"go/scanner"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/leasegen/leasegen/gen"
)

func TestAdversary64bHeld(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	files := map[string]string{
		"dep/p.go": `package dep

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type OrderServer interface {
	ChargeOrder(ctx context.Context, id string) error
}

func Register(s OrderServer) {}

type Req struct{ ID string }

type Service struct{ leases *lease.Client }

//lease:lock orders:{id} deadline=1s
func (s *Service) chargeOrder(ctx context.Context, id string) error { return nil }

type Embeds struct{ *Service }

var _ OrderServer = Embeds{}

func Setup(l *lease.Client) { Register(&Service{leases: l}) }
`,
		"use/p.go": `package use

import (
	"context"

	"example.com/golden/dep"
)

func Use[T dep.OrderServer](t T) {}

func init() { Use(&dep.Service{}) }

//lease:lock r:{id} deadline=1s
func refund(ctx context.Context, id string, r dep.Req, s *dep.Service, h interface{ M(dep.Req) }) error { return nil }

//lease:lock g:{id} deadline=1s
func gen[T interface{ dep.OrderServer; M(dep.Req) }](ctx context.Context, id string, t T) error { return nil }
`,
		"named/p.go": `package named

import (
	"context"

	a "example.com/golden/pk/any"
	cl "example.com/golden/pk/clear"
	cm "example.com/golden/pk/comparable"
	c "example.com/golden/pk/context"
	e "example.com/golden/pk/error"
	e1 "example.com/golden/pk/error1"
	f "example.com/golden/pk/fmt"
	io "example.com/golden/pk/iota"
	mi "example.com/golden/pk/min"
	ni "example.com/golden/pk/nil"
	sc "example.com/golden/pk/strconv"
	ti "example.com/golden/pk/time"
	tr "example.com/golden/pk/true"
)

var context1 = 0

//lease:lock k:{id}:{error1} deadline=1s
func f1(ctx context.Context, id string, error1 e.T, error11 e1.T, x a.T, y cl.T, z cm.T) (c.T, error) {
	return 0, nil
}

//lease:lock k:{id} deadline=1s
func f2(ctx context.Context, id f.T, x io.T, y mi.T, z ni.T, w sc.T, v ti.T, u tr.T) error {
	return nil
}
`,
	}
	for _, n := range []string{"any", "clear", "comparable", "context", "error", "error1", "fmt", "iota", "min", "nil", "strconv", "time", "true"} {
		files["pk/"+n+"/p.go"] = fmt.Sprintf("package %s\n\ntype T int\n", n)
	}
	adv46Write(t, mod, files)
	run := func() map[string]string {
		out, err := gen.Generate(gen.Config{Dir: mod, Patterns: []string{"./..."}})
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
		got := map[string]string{}
		for _, f := range out {
			if f.Data != nil {
				if err := os.WriteFile(f.Path, f.Data, 0o644); err != nil {
					t.Fatal(err)
				}
				got[f.Path] = string(f.Data)
			}
		}
		return got
	}
	first := run()
	if first == nil {
		return
	}
	for _, args := range [][]string{{"build", "./..."}, {"vet", "./..."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir = mod
		if out, err := cmd.CombinedOutput(); err != nil {
			b, _ := os.ReadFile(filepath.Join(mod, "named", "lease_gen.go"))
			t.Fatalf("go %s: %v\n%s\n--- named/lease_gen.go\n%s", args[0], err, out, b)
		}
	}
	second := run()
	for p, b := range second {
		if first[p] != b {
			t.Errorf("second run changed %s", p)
		}
	}
}
