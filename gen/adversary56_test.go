package gen_test

// Round 56: findings of an adversary round on the generator (a helper
// attacking it from the README's claims), each failing before its fix.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasegen/leasegen/internal/gentest"
)

// A key part whose String (or MarshalText) is promoted through an
// embedded interface or pointer, written {r} rather than {r.String()}:
// README "Directives": "pointers and interfaces on a path, and the
// embedded ones a promoted method is reached through, are nil-checked
// (nil gives an error wrapping lease.ErrBadKey and the function is not
// called)". The wrapper called r.String() on a nil embedded value and
// panicked: only the explicit {r.String()} walked the embedded path.
func TestAdversary56_ImplicitPromotedKeyMethodIsNilChecked(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"p/p.go": `package p

import (
	"context"
	"fmt"
	"net/url"
)

type R struct{ fmt.Stringer }

type U struct{ *url.URL }

type N struct{ *Name }

type Name struct{ s string }

func (n *Name) MarshalText() ([]byte, error) { return []byte(n.s), nil }

type Holder struct{ In R }

//lease:lock a:{r} deadline=1s
func viaIface(ctx context.Context, r R) error { return nil }

//lease:lock b:{u} deadline=1s
func viaPtr(ctx context.Context, u *U) error { return nil }

//lease:lock c:{n} deadline=1s
func viaMarshal(ctx context.Context, n N) error { return nil }

//lease:lock d:{h.In} deadline=1s
func viaField(ctx context.Context, h Holder) error { return nil }
`,
		"main/main.go": `package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"

	"example.com/golden/p"
	"github.com/leasegen/leasegen/runtime/lease"
)

func try(name string, f func() error) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Printf("%s: panic: %v\n", name, r)
			ok = false
		}
	}()
	if err := f(); !errors.Is(err, lease.ErrBadKey) {
		fmt.Printf("%s: %v, want an error wrapping lease.ErrBadKey\n", name, err)
		return false
	}
	return true
}

func main() {
	ctx := context.Background()
	ok := try("ViaIface(R{})", func() error { return p.ViaIface(ctx, nil, p.R{}) })
	ok = try("ViaPtr(&U{})", func() error { return p.ViaPtr(ctx, nil, &p.U{}) }) && ok
	ok = try("ViaPtr(nil)", func() error { return p.ViaPtr(ctx, nil, nil) }) && ok
	ok = try("ViaMarshal(N{})", func() error { return p.ViaMarshal(ctx, nil, p.N{}) }) && ok
	ok = try("ViaField(Holder{})", func() error { return p.ViaField(ctx, nil, p.Holder{}) }) && ok
	// Set values pass the checks and reach the (nil) Client.
	err := p.ViaPtr(ctx, nil, &p.U{URL: &url.URL{Host: "h"}})
	if err == nil || errors.Is(err, lease.ErrBadKey) {
		fmt.Printf("ViaPtr(&U{URL: set}): %v, want past the key\n", err)
		ok = false
	}
	if !ok {
		os.Exit(1)
	}
}
`,
	})
	if errs := adv46Generate(t, filepath.Join(mod, "p")); errs != nil {
		t.Fatalf("generate: %s", strings.Join(errs, "\n"))
	}
	cmd := exec.Command("go", "run", "./main")
	cmd.Dir, cmd.Env = mod, gentest.GoEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		gen, _ := os.ReadFile(filepath.Join(mod, "p", "lease_gen.go"))
		t.Fatalf("a nil embedded value a key part's method is promoted through: %v\n%s\n--- lease_gen.go\n%s", err, out, gen)
	}
}

// A static key that reads as an option ("region=eu", "fence") is written
// quoted, and generates a wrapper that builds; unquoted it was refused
// even so ("needs a key first"), as the check read the unquoted value.
func TestAdversary56_QuotedKeyThatReadsAsAnOption(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"p/p.go": "package p\n\nimport \"context\"\n\n" +
			"//lease:lock \"region=eu\" deadline=1s\nfunc a(ctx context.Context) error { return nil }\n\n" +
			"//lease:lock `fence` deadline=1s fence\nfunc b(ctx context.Context) error { return nil }\n",
	})
	adv46GenerateBuilds(t, mod, "p")
	gen, err := os.ReadFile(filepath.Join(mod, "p", "lease_gen.go"))
	if err != nil {
		t.Fatalf("no wrapper generated: %v", err)
	}
	for _, key := range []string{`"region=eu"`, `"fence"`} {
		if !strings.Contains(string(gen), key) {
			t.Errorf("lease_gen.go does not use the key %s:\n%s", key, gen)
		}
	}
}

// A decorator's names (NewLeased<Iface>, leased<Iface>) come from its
// interface, and name= does not apply to interface methods: a clash says
// to rename the interface or the other declaration, not "choose another
// with name=", and names a clash with another decorator as one.
func TestAdversary56_DecoratorNameClashNamesItsFix(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"a/p.go": `package a

import "context"

type Store interface {
	//lease:lock a:{id} deadline=1s
	Save(ctx context.Context, id string) error
}

type leasedStore struct{}
`,
		"b/p.go": `package b

import "context"

type Store interface {
	//lease:lock a:{id} deadline=1s
	Save(ctx context.Context, id string) error
}

type store interface {
	//lease:lock b:{id} deadline=1s
	Save(ctx context.Context, id string) error
}
`,
	})
	for pkg, want := range map[string]string{
		"a": "p.go:5:6: lease: wrapper name leasedStore is already declared at p.go:10:6; rename the interface Store (its decorator is named after it) or the other declaration",
		"b": "is also generated for the decorator of interface Store at p.go:5:6; rename the interface store (its decorator is named after it) or the other declaration",
	} {
		errs := adv46Generate(t, filepath.Join(mod, pkg))
		if got := strings.Join(errs, "\n"); !strings.Contains(got, want) {
			t.Errorf("%s: got\n%s\nwant an error containing\n%s", pkg, got, want)
		}
	}
}

// identity= a package-level constant: its value is known at generate time,
// so a name the runtime refuses (over 200 bytes) is refused there, with
// the runtime's reason (runtime/lease Spec.Check: "a directive that the
// runtime would refuse is refused there too"); every campaign of the
// wrapper failed at run time before.
func TestAdversary56_ConstIdentityTheRuntimeRefuses(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"p/p.go": `package p

import "context"

const node = "` + strings.Repeat("n", 201) + `"

//lease:leader jobs:settle ttl=3s identity=node
func settle(ctx context.Context) error { return nil }
`,
	})
	errs := adv46Generate(t, filepath.Join(mod, "p"))
	want := "p.go:7:35: lease: identity=node: the runtime would refuse this candidate: LeadSpec.Owner is 201 bytes long, at most 200 are stored"
	if got := strings.Join(errs, "\n"); !strings.Contains(got, want) {
		t.Errorf("got\n%s\nwant an error containing\n%s", got, want)
	}
}
