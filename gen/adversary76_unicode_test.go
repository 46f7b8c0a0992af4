package gen_test

import (
	"path/filepath"
	"strings"
	"testing"
)

const adv76Uni = `package uni

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type Kasse struct{ leases *lease.Client }

//lease:lock a:{id} deadline=5s
func (k *Kasse) zahlung(ctx context.Context, id string) error { return nil }

//lease:lock b:{id} deadline=5s
func (k *Kasse) zahlung2(ctx context.Context, id string) error { return nil }

//lease:lock c:{id} deadline=5s
func (k *Kasse) do_it_٣(ctx context.Context, id string) error { return nil }

//lease:lock d:{id} deadline=5s
func größe٣(ctx context.Context, c *lease.Client, id string) error { return nil }

type Iface[T any] interface {
	Zahlung2(context.Context, T) error
	Do_it_٣(context.Context, T) error
}

func Run[T Iface[string]](t T) {}

type Outer[A, B any] struct{ *Kasse }

func use(ctx context.Context, k *Kasse, c *lease.Client) {
	_ = k.Zahlung(ctx, "x")
	_ = k.Zahlung2(ctx, "x")
	_ = k.Do_it_٣(ctx, "x")
	_ = Größe٣(ctx, c, "x")
	var _ Iface[string] = k
	Run[*Kasse](k)
	Run(k)
	var _ Iface[string] = (*Outer[int, string])(nil)
	var _ Iface[string] = &Outer[map[string]int, struct{ X, Y int }]{}
	Run[*Outer[int, string]](nil)
}

var _ = use
`

// Wrappers named with digits (ASCII and Arabic-Indic), underscores and
// non-ASCII letters; names that are prefixes of others (Zahlung,
// Zahlung2); satisfaction of a generic interface, by the type and by a
// generic type with two type arguments that embeds it; a qualified call
// from another package. All are calls to wrappers this run generates:
// forgiven, and the output builds. A call to one nothing generates
// (Zahlung_, Zahlung3: prefixed by a wrapper's name) is refused.
func TestAdversary76_UnicodeWrapperCalls(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"uni/a.go": adv76Uni,
		"uniuse/a.go": `package uniuse

import (
	"context"

	"example.com/golden/uni"
	"github.com/leasegen/leasegen/runtime/lease"
)

func use(ctx context.Context, k *uni.Kasse, c *lease.Client) {
	_ = uni.Größe٣(ctx, c, "x")
	_ = k.Do_it_٣(ctx, "x")
	var _ uni.Iface[string] = k
}

var _ = use
`,
	})
	files, errs, _ := adv75bGen(t, mod, "./uni", "./uniuse")
	if errs != nil {
		t.Fatalf("refused calls to wrappers this run generates:\n%s", strings.Join(errs, "\n"))
	}
	adv75bWrite(t, files)
	adv75bBuildVet(t, mod, nil, "./uni", "./uniuse")
	for _, bad := range []string{"k.Zahlung_(ctx, \"x\")", "k.Zahlung3(ctx, \"x\")", "k.Zahlung2٣(ctx, \"x\")", "uni.Größe(ctx, c, \"x\")"} {
		t.Run(bad, func(t *testing.T) {
			adv46Write(t, mod, map[string]string{"uniuse/b.go": `package uniuse

import (
	"context"

	"example.com/golden/uni"
	"github.com/leasegen/leasegen/runtime/lease"
)

func bad(ctx context.Context, k *uni.Kasse, c *lease.Client) { _ = ` + bad + ` }

var _ = bad
`})
			defer adv46Write(t, mod, map[string]string{"uniuse/b.go": "package uniuse\n"})
			_, errs, _ := adv75bGen(t, filepath.Join(mod, "uniuse"))
			if errs == nil {
				t.Errorf("leasegen accepted a call to %s, which nothing declares or generates", bad)
			} else {
				t.Logf("refused: %s", errs[0])
			}
		})
	}
}
