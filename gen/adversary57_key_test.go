package gen_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasegen/leasegen/internal/gentest"
)

// Round 57 (an adversary round on b9be237). A String promoted to
// other.Outer through an unexported embedded struct of another package
// (inner), then an exported embedded pointer (*Name): this package cannot
// write o.inner, but it can write o.Name (a promoted field), so the nil
// check is written that way. b9be237 refused the key ({o}, and
// {o.String()} before it) as "cannot check for nil", though before it {o}
// generated and worked for every set Name.
func TestAdversary57_PromotedThroughUnexportedButFieldReachable(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"other/other.go": `package other

type Name struct{ S string }

func (n *Name) String() string { return n.S }

type inner struct{ *Name }

type Outer struct{ inner }

func Make(s string) Outer { return Outer{inner{&Name{S: s}}} }
`,
		"p/p.go": `package p

import (
	"context"

	"example.com/golden/other"
)

//lease:lock a:{o} deadline=1s
func viaUnexported(ctx context.Context, o other.Outer) error { return nil }

//lease:lock b:{o.String()} deadline=1s
func viaUnexportedCall(ctx context.Context, o other.Outer) error { return nil }

// What the nil check needs is writable here:
var _ = func(o other.Outer) bool { return o.Name == nil }
`,
		"main/main.go": `package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"example.com/golden/other"
	"example.com/golden/p"
	"github.com/leasegen/leasegen/runtime/lease"
)

func main() {
	for _, f := range []func(context.Context, *lease.Client, other.Outer) error{p.ViaUnexported, p.ViaUnexportedCall} {
		err := f(context.Background(), nil, other.Outer{})
		if !errors.Is(err, lease.ErrBadKey) {
			fmt.Println("nil Name:", err)
			os.Exit(1)
		}
		err = f(context.Background(), nil, other.Make("x"))
		if err == nil || errors.Is(err, lease.ErrBadKey) {
			fmt.Println("set Name:", err)
			os.Exit(1)
		}
	}
}
`,
	})
	if errs := adv46Generate(t, filepath.Join(mod, "p")); errs != nil {
		t.Fatalf("generate refused a key whose nil check is writable (o.Name):\n%s", strings.Join(errs, "\n"))
	}
	cmd := exec.Command("go", "run", "./main")
	cmd.Dir, cmd.Env = mod, gentest.GoEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		gen, _ := os.ReadFile(filepath.Join(mod, "p", "lease_gen.go"))
		t.Fatalf("%v\n%s\n--- lease_gen.go\n%s", err, out, gen)
	}
}

// Shapes of promoted String/MarshalText (pointer receivers through
// embedded values after a pointer, doubly embedded, generic types, type
// aliases, method results, generic functions): leasegen must either
// refuse or write a package that builds and vets; and, run, nil embedded
// values give lease.ErrBadKey while set ones get past the key.
func TestAdversary57_PromotedKeyMethodShapes(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"shapes/p.go": `package shapes

import (
	"context"
	"fmt"
	"net/url"
)

type T struct{ s string }

func (t *T) String() string { return t.s }

// *T's String through *M's value T.
type M struct{ T }
type A struct{ *M }

// Doubly embedded pointers.
type D struct{ s string }

func (d *D) String() string { return d.s }

type C struct{ *D }
type B struct{ C }
type AA struct{ *B }

// Generic.
type Inner[X any] struct{ x X }

func (i *Inner[X]) String() string { return fmt.Sprint(i.x) }

type G[X any] struct{ *Inner[X] }

// Aliases.
type URLAlias = url.URL
type SA = fmt.Stringer
type WA struct{ *URLAlias }
type WS struct{ SA }
type GA = G[int]

// A method result.
type H struct{ g AA }

func (h H) Get() AA   { return h.g }
func (h *H) GetP() *A { return nil }

// Marshal through an embedded interface.
type TM interface{ MarshalText() ([]byte, error) }
type WM struct{ TM }

//lease:lock a:{a} deadline=1s
func fa(ctx context.Context, a A) error { return nil }

//lease:lock b:{aa} deadline=1s
func fb(ctx context.Context, aa *AA) error { return nil }

//lease:lock c:{g} deadline=1s
func fc(ctx context.Context, g G[string]) error { return nil }

//lease:lock d:{w}:{s} deadline=1s
func fd(ctx context.Context, w WA, s WS) error { return nil }

//lease:lock e:{ga} deadline=1s
func fe(ctx context.Context, ga GA) error { return nil }

//lease:lock f:{h.Get()}:{h.GetP()} deadline=1s
func ff(ctx context.Context, h *H) error { return nil }

//lease:lock g:{m} deadline=1s
func fg(ctx context.Context, m WM) error { return nil }

//lease:lock h:{g} deadline=1s
func fh[X any](ctx context.Context, g G[X]) error { return nil }

//lease:lock i:{a}:{a.M}:{a.M.T.String()} deadline=1s
func fi(ctx context.Context, a A) error { return nil }
`,
	})
	adv46GenerateBuilds(t, mod, "shapes")
	gen, _ := os.ReadFile(filepath.Join(mod, "shapes", "lease_gen.go"))
	t.Logf("--- lease_gen.go\n%s", gen)
}
