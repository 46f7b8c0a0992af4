package gen_test

// Adversary round 75b (generator), finding: the errors leasegen sets aside
// as calls to wrappers it is about to generate are recognised by
// regular expressions over go/types' messages (gen/gen.go, undefinedRE,
// noMethodRE, missingMethodRE) that spell an identifier \w+, which in Go's
// regexp is ASCII only ([0-9A-Za-z_]), with \b an ASCII word boundary.
// Go identifiers are Unicode letters and digits, and leasegen generates
// non-ASCII wrapper names itself (éclair -> Éclair, größe -> Größe,
// zahlungÜbernehmen -> ZahlungÜbernehmen). So:
//
//  1. a call to such a wrapper, from its package or another, is refused as
//     "the packages do not compile": k.Éclair, Größe, u2.Größe, an
//     interface that asks for Éclair, and k.ZahlungÜbernehmen (whose
//     \w+\b match stops at "Zahlung"). Since leasegen always loads without
//     its output (-tags leasegen), once the code calls the wrapper the
//     package can never be regenerated: the stale-output loop DESIGN §3
//     promises away ("stale output never breaks regeneration");
//  2. the reverse: with a wrapper Zahlung generated, a call to a method
//     that nothing generates, k.ZahlungÜberweisen, is taken for a call to
//     Zahlung and forgiven: leasegen exits 0 and writes its output for a
//     package that does not compile (STYLE 2: "refuse to generate from
//     broken code"; README: calls are left to the build only "when the
//     package they name generates them").

import (
	"path/filepath"
	"strings"
	"testing"
)

const adv75bKasse = `package %s

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type Kasse struct{ leases *lease.Client }

//lease:lock a:{id} deadline=5s
func (k *Kasse) settle(ctx context.Context, id string) error { return nil }

//lease:lock b:{id} deadline=5s
func (k *Kasse) éclair(ctx context.Context, id string) error { return nil }

//lease:lock c:{id} deadline=5s
func (k *Kasse) zahlungÜbernehmen(ctx context.Context, id string) error { return nil }

//lease:lock d:{id} deadline=5s
func größe(ctx context.Context, c *lease.Client, id string) error { return nil }
`

func TestAdversary75b_NonASCIIWrapperCalls(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	kasse := func(pkg, use string) string {
		return strings.Replace(adv75bKasse, "%s", pkg, 1) + "\nfunc use(ctx context.Context, k *Kasse, c *lease.Client) {\n\t" + use + "\n}\n\nvar _ = use\n"
	}
	files := map[string]string{
		// The control: an ASCII wrapper called in its package.
		"ascii/a.go":    kasse("ascii", `_ = k.Settle(ctx, "x")`),
		"method/a.go":   kasse("method", `_ = k.Éclair(ctx, "x")`),
		"midword/a.go":  kasse("midword", `_ = k.ZahlungÜbernehmen(ctx, "x")`),
		"function/a.go": kasse("function", `_ = Größe(ctx, c, "x")`),
		"iface/a.go": kasse("iface", `var _ interface {
		Éclair(context.Context, string) error
	} = k`),
		"dep/a.go": kasse("dep", `_ = k`),
		"importer/a.go": `package importer

import (
	"context"

	"example.com/golden/dep"
	"github.com/leasegen/leasegen/runtime/lease"
)

func use(ctx context.Context, k *dep.Kasse, c *lease.Client) {
	_ = k.Éclair(ctx, "x")
	_ = dep.Größe(ctx, c, "x")
}

var _ = use
`,
	}
	adv46Write(t, mod, files)
	// dep's output exists, as in a module where dep was generated first;
	// importer's load leaves it out all the same (-tags leasegen).
	if errs := adv46Generate(t, filepath.Join(mod, "dep")); errs != nil {
		t.Fatalf("dep refused:\n%s", strings.Join(errs, "\n"))
	}
	pkgs := []string{"ascii", "method", "midword", "function", "iface", "importer"}
	var built []string
	for _, pkg := range pkgs {
		t.Run("call/"+pkg, func(t *testing.T) {
			errs := adv46Generate(t, filepath.Join(mod, pkg))
			if errs != nil {
				t.Errorf("a call to a wrapper this run generates is refused (regeneration can never succeed once the code calls it):\n%s", strings.Join(errs, "\n"))
				return
			}
			built = append(built, "./"+pkg)
		})
	}
	if len(built) > 0 {
		adv75bBuildVet(t, mod, nil, built...)
	}

	t.Run("misspelled call forgiven", func(t *testing.T) {
		adv46Write(t, mod, map[string]string{"prefix/a.go": `package prefix

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type Kasse struct{ leases *lease.Client }

//lease:lock c:{id} deadline=5s
func (k *Kasse) zahlung(ctx context.Context, id string) error { return nil }

func use(ctx context.Context, k *Kasse) {
	_ = k.ZahlungÜberweisen(ctx, "x")
}

var _ = use
`})
		errs := adv46Generate(t, filepath.Join(mod, "prefix"))
		if errs == nil {
			out, _ := adv75bGo(t, mod, nil, "build", "./prefix")
			t.Errorf("leasegen exited 0 on a package that calls k.ZahlungÜberweisen, which nothing declares or generates; go build:\n%s", out)
			return
		}
		if want := "a.go:15:8: k.ZahlungÜberweisen undefined"; !strings.HasPrefix(strings.Join(errs, "\n"), want) {
			t.Errorf("errors:\n%s\nwant first: %s", strings.Join(errs, "\n"), want)
		}
	})
}
