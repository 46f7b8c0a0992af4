package gen_test

// Adversary round 59 (generator, on 0427270; held): nil checks of embedded
// values a key part's String/MarshalText is promoted through, written by
// the selector this package can write.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasegen/leasegen/internal/gentest"
)

const adv59Other = `package other

import "fmt"

type Name struct{ S string }

func (n *Name) String() string { return n.S }

// generic, through an unexported generic struct
type GName[T any] struct{ V T }

func (n *GName[T]) String() string { return fmt.Sprint(n.V) }

type gInner[T any] struct{ *GName[T] }
type GOuter[T any] struct{ gInner[T] }

func MakeG(v int) GOuter[int] { return GOuter[int]{gInner[int]{&GName[int]{v}}} }

// interface through an unexported struct
type sInner struct{ fmt.Stringer }
type SOuter struct{ sInner }

func MakeS(s fmt.Stringer) SOuter { return SOuter{sInner{s}} }

// MarshalText through an unexported struct
type MName struct{ S string }

func (m *MName) MarshalText() ([]byte, error) { return []byte(m.S), nil }

type mInner struct{ *MName }
type MOuter struct{ mInner }

func MakeM(s string) MOuter { return MOuter{mInner{&MName{s}}} }

// two unexported levels
type l2 struct{ *Name }
type l1 struct{ l2 }
type Deep struct{ l1 }

func MakeDeep(s string) Deep { return Deep{l1{l2{&Name{s}}}} }

// exported pointer, unexported value, exported pointer
type y2 struct{ *Name }
type Y struct{ y2 }
type X struct{ *Y }

func MakeX(y bool, s string) X {
	if !y {
		return X{}
	}
	if s == "" {
		return X{&Y{}}
	}
	return X{&Y{y2{&Name{s}}}}
}

type Outer struct{ inner }
type inner struct{ *Name }

func MakeOuter(s string) Outer { return Outer{inner{&Name{s}}} }
`

func TestAdversary59_PromotedShapesRun(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"other/other.go": adv59Other,
		"p/p.go": `package p

import (
	"context"

	"example.com/golden/other"
)

type OuterAlias = other.Outer

type H struct{ o other.Outer }

func (h H) Get() other.Outer { return h.o }

func NewH(o other.Outer) H { return H{o} }

//lease:lock g:{o} deadline=1s
func fg(ctx context.Context, o other.GOuter[int]) error { return nil }

//lease:lock gc:{o.String()} deadline=1s
func fgc(ctx context.Context, o other.GOuter[int]) error { return nil }

//lease:lock s:{o} deadline=1s
func fs(ctx context.Context, o other.SOuter) error { return nil }

//lease:lock m:{o} deadline=1s
func fm(ctx context.Context, o other.MOuter) error { return nil }

//lease:lock d:{o} deadline=1s
func fd(ctx context.Context, o other.Deep) error { return nil }

//lease:lock x:{o}:{o.String()} deadline=1s
func fx(ctx context.Context, o other.X) error { return nil }

//lease:lock h:{h.Get()}:{h.Get().String()} deadline=1s
func fh(ctx context.Context, h H) error { return nil }

//lease:lock pa:{o} deadline=1s
func fpa(ctx context.Context, o *OuterAlias) error { return nil }

//lease:lock gen:{o} deadline=1s
func fgen[T any](ctx context.Context, o other.GOuter[int], _ T) error { return nil }
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

type str string

func (s str) String() string { return string(s) }

var bad bool

func want(name string, err error, badKey bool) {
	if errors.Is(err, lease.ErrBadKey) != badKey || err == nil {
		fmt.Printf("%s: %v (want bad key %v)\n", name, err, badKey)
		bad = true
	}
}

func call(name string, badKey bool, f func() error) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Printf("%s: panic %v\n", name, r)
			bad = true
		}
	}()
	want(name, f(), badKey)
}

func main() {
	ctx := context.Background()
	call("g nil", true, func() error { return p.Fg(ctx, nil, other.GOuter[int]{}) })
	call("g set", false, func() error { return p.Fg(ctx, nil, other.MakeG(1)) })
	call("gc nil", true, func() error { return p.Fgc(ctx, nil, other.GOuter[int]{}) })
	call("gc set", false, func() error { return p.Fgc(ctx, nil, other.MakeG(1)) })
	call("s nil", true, func() error { return p.Fs(ctx, nil, other.SOuter{}) })
	call("s set", false, func() error { return p.Fs(ctx, nil, other.MakeS(str("x"))) })
	call("m nil", true, func() error { return p.Fm(ctx, nil, other.MOuter{}) })
	call("m set", false, func() error { return p.Fm(ctx, nil, other.MakeM("x")) })
	call("d nil", true, func() error { return p.Fd(ctx, nil, other.Deep{}) })
	call("d set", false, func() error { return p.Fd(ctx, nil, other.MakeDeep("x")) })
	call("x nil Y", true, func() error { return p.Fx(ctx, nil, other.MakeX(false, "")) })
	call("x nil Name", true, func() error { return p.Fx(ctx, nil, other.MakeX(true, "")) })
	call("x set", false, func() error { return p.Fx(ctx, nil, other.MakeX(true, "x")) })
	call("h nil", true, func() error { return p.Fh(ctx, nil, p.NewH(other.Outer{})) })
	call("h set", false, func() error { return p.Fh(ctx, nil, p.NewH(other.MakeOuter("x"))) })
	call("pa nil ptr", true, func() error { return p.Fpa(ctx, nil, nil) })
	call("pa nil Name", true, func() error { return p.Fpa(ctx, nil, &p.OuterAlias{}) })
	o := other.MakeOuter("x")
	call("pa set", false, func() error { return p.Fpa(ctx, nil, &o) })
	call("gen nil", true, func() error { return p.Fgen(ctx, nil, other.GOuter[int]{}, 0) })
	call("gen set", false, func() error { return p.Fgen(ctx, nil, other.MakeG(1), 0) })
	if bad {
		os.Exit(1)
	}
}
`,
	})
	errs := adv46Generate(t, filepath.Join(mod, "p"))
	gen, _ := os.ReadFile(filepath.Join(mod, "p", "lease_gen.go"))
	if errs != nil {
		t.Fatalf("generate refused:\n%s", strings.Join(errs, "\n"))
	}
	cmd := exec.Command("go", "run", "./main")
	cmd.Dir, cmd.Env = mod, gentest.GoEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s\n--- lease_gen.go\n%s", err, out, gen)
	}
	t.Logf("--- lease_gen.go\n%s", gen)
}

// Refusals expected: a nilable field the package cannot select (shadowed
// by a shallower field of the same name, ambiguous at one depth, or an
// unexported pointer of another package).
func TestAdversary59_PromotedShapesRefused(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"other/other.go": adv59Other + `
type Plain struct{}

// String through inner.Name; o.Name is the shallower named field.
type shInner struct{ *Name }
type Shadow struct {
	shInner
	Name *Plain
}

// Name at one depth twice: shInner.Name and amb.Name (an int).
type amb struct{ Name int }
type Ambig struct {
	shInner
	amb
}

// an unexported pointer on the path
type Ptr struct{ *inner }
`,
		"p/p.go": `package p

import (
	"context"

	"example.com/golden/other"
)

//lease:lock a:{o} deadline=1s
func fa(ctx context.Context, o other.Shadow) error { return nil }

//lease:lock b:{o.String()} deadline=1s
func fb(ctx context.Context, o other.Shadow) error { return nil }

//lease:lock c:{o} deadline=1s
func fc(ctx context.Context, o other.Ambig) error { return nil }

//lease:lock d:{o} deadline=1s
func fd(ctx context.Context, o other.Ptr) error { return nil }
`,
	})
	errs := adv46Generate(t, filepath.Join(mod, "p"))
	t.Logf("errors:\n%s", strings.Join(errs, "\n"))
	for _, w := range []string{"p.go:9:", "p.go:12:", "p.go:15:", "p.go:18:"} {
		found := false
		for _, e := range errs {
			found = found || strings.Contains(e, w)
		}
		if !found {
			gen, _ := os.ReadFile(filepath.Join(mod, "p", "lease_gen.go"))
			t.Errorf("no error at %s\n--- lease_gen.go\n%s", w, gen)
		}
	}
}
