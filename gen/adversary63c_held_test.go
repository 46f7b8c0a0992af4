package gen_test

// Adversary round 63c (generator): inputs that held. One module; each
// package is generated, then all are built and vetted at once, and a
// second run must change nothing. Covered: generic functions with
// implicit, union and method constraints, generic aliases of another
// package (other.Ptr[string], other.Set[int]), generic named types over
// basic kinds and methods of generic structs as key parts; unnamed and _
// parameters (the default p1 colliding with a named p1), variadics; a
// parameter named like a package type it uses (Order Order) and like the
// body's identifiers (lease, fmt, strconv, key, err, part, v, c, r0);
// receivers named _ and ctx, unnamed receivers; a user package named
// lease imported beside the runtime; a decorator with a dot import, an
// embedded same-package interface, an unnamed-parameter method and
// pass-through parameters named next, leases, x, c; a directive in the
// middle of a doc comment; a generic leader. Refusals: directives on a
// func literal, a var and a struct field, each at its position.

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestAdversary63cHeld(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"other/o.go": `package other

type Tag string

func (t *Tag) String() string { return "tag" }

type V struct{ S string }

func (v V) String() string { return v.S }

type Set[T comparable] = map[T]struct{}

type Ptr[T any] = *T
`,
		"g/p.go": `package g

import (
	"cmp"
	"context"
	"fmt"

	"example.com/golden/other"
)

type Order struct{ ID string }

//lease:lock a:{id} deadline=1s
func a[T ~int | ~string, S ~[]E, E cmp.Ordered](ctx context.Context, id string, t T, s S) error { return nil }

//lease:lock b:{id} deadline=1s
func b[T interface{ comparable; fmt.Stringer }](ctx context.Context, id string, t T) (T, error) { return t, nil }

//lease:lock c:{Order.ID} deadline=1s
func c(ctx context.Context, Order Order) error { return nil }

//lease:lock d:{id} deadline=1s
func d(ctx context.Context, id other.Ptr[string], s other.Set[int]) error { return nil }

//lease:lock e:{t}:{v} deadline=1s
func e(ctx context.Context, t *other.Tag, v *other.V) error { return nil }

//lease:lock f deadline=1s
func f(context.Context, string, int) (int, error) { return 0, nil }

//lease:lock g:{p1}:{p2} deadline=1s
func g(_ context.Context, _ string, p1 int, p2 string) error { return nil }

//lease:lock h:{id} deadline=1s
func h(ctx context.Context, id string, ids ...string) error { return nil }

//lease:lock i:{lease}:{fmt}:{strconv}:{key}:{err}:{part}:{v}:{c}:{r0} deadline=1s
func i(ctx context.Context, lease string, fmt int, strconv bool, key *string, err fmt.Stringer, part other.V, v uint64, c *other.V, r0 int8) (int, error) { return 0, nil }

type N struct{}

//lease:lock j:{id} deadline=1s
func (_ *N) j(ctx context.Context, id string) error { return nil }

//lease:lock k:{id} deadline=1s
func (*N) k(ctx context.Context, id string) error { return nil }

//lease:lock l:{id} deadline=1s
func (ctx N) l(c context.Context, id string) error { return nil }

//lease:lock m:{ctx} deadline=1s
func m(c context.Context, ctx string) error { return nil }

//lease:lock n:{id} deadline=1s
func nn(ctx context.Context, id string, f func(lease, fmt string) error) (lease int, err error) { return 0, nil }
`,
		"lease/l.go": "package lease\n\ntype ID string\n\ntype Client struct{}\n",
		"dec/p.go": `package dec

import (
	"context"
	. "fmt"
	ul "example.com/golden/lease"
	rl "github.com/leasegen/leasegen/runtime/lease"
)

type Base interface {
	//lease:lock base:{id} deadline=1s
	Base(ctx context.Context, id ul.ID) error
}

type Store interface {
	Base
	Stringer
	//lease:lock put:{id}:{n} deadline=1s
	Put(ctx context.Context, id string, n int, vs ...string) (int, error)
	//lease:lock get deadline=1s
	Get(context.Context, string, ul.Client, rl.Token) error
	Next(next, leases, x, c string) string
}

type Svc struct {
	leases *rl.Client
}

//lease:lock s:{id} deadline=1s
func (s *Svc) put(ctx context.Context, id ul.ID, c *ul.Client) (ul.ID, error) { return id, nil }
`,
		"gg/p.go": `package gg

import (
	"context"
	"fmt"
)

type ID[T any] string

type Box[T any] struct {
	Name string
	V    T
	P    *ID[T]
}

func (b Box[T]) Key() string { return fmt.Sprint(b.V) }

func (b *Box[T]) PKey() ID[T] { return "x" }

type Num[T any] uint64

//lease:lock a:{id}:{b.Name}:{b.Key()}:{b.P}:{n} deadline=1s
func a[T any](ctx context.Context, id ID[T], b Box[T], n Num[T]) error { return nil }

//lease:lock b:{b.PKey()} deadline=1s
func bb[T any](ctx context.Context, b *Box[T]) error { return nil }
`,
		"mid/p.go": `package mid

import "context"

// f does a thing.
//lease:lock k:{id} deadline=1s
// and more text follows.
func f(ctx context.Context, id string) error { return nil }
`,
		"gen/p.go": `package gen

import "context"

//lease:leader jobs:{id}
func run[T any](ctx context.Context, id string, t T) error { return nil }
`,
		"lit/p.go": `package lit

import "context"

var g = func() {
	//lease:lock k:{id} deadline=1s
	h := func(ctx context.Context, id string) error { return nil }
	_ = h
}

//lease:lock k:{id} deadline=1s
var v = func(ctx context.Context, id string) error { return nil }

type T struct {
	//lease:lock k:{id} deadline=1s
	F func(ctx context.Context, id string) error
}
`,
	})
	pkgs := []string{"g", "dec", "gg", "mid", "gen"}
	outputs := map[string]string{}
	for _, p := range pkgs {
		if errs := adv46Generate(t, filepath.Join(mod, p)); errs != nil {
			t.Fatalf("%s: refused:\n%s", p, strings.Join(errs, "\n"))
		}
		b, _ := os.ReadFile(filepath.Join(mod, p, "lease_gen.go"))
		outputs[p] = string(b)
	}
	for _, tool := range []string{"build", "vet"} {
		args := []string{tool}
		if tool == "build" {
			args = append(args, "-o", os.DevNull)
		}
		for _, p := range pkgs {
			args = append(args, "./"+p)
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = mod
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", tool, err, out)
		}
	}
	for _, p := range pkgs {
		if errs := adv46Generate(t, filepath.Join(mod, p)); errs != nil {
			t.Errorf("%s: second run refused:\n%s", p, strings.Join(errs, "\n"))
		}
		if b, _ := os.ReadFile(filepath.Join(mod, p, "lease_gen.go")); string(b) != outputs[p] {
			t.Errorf("%s: second run changed the output", p)
		}
	}
	errs := adv46Generate(t, filepath.Join(mod, "lit"))
	for _, at := range []string{"p.go:6:2: ", "p.go:11:1: ", "p.go:15:2: "} {
		if !slices.ContainsFunc(errs, func(e string) bool { return strings.HasPrefix(e, at) }) {
			t.Errorf("lit: no error at %s; got %q", at, errs)
		}
	}
}
