package gen_test

// Adversary round 75b (generator): module layouts and Go code that real
// services have. Claim: leasegen works, or fails clearly with
// file:line:col positions and without writing or leaving half-written or
// stale files. Every case here held when written; the finding of this
// round (GOFLAGS build tags) is in adversary75b_tags_test.go.

import (
	"bytes"
	"errors"
	"fmt"
	"go/scanner"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/leasegen/leasegen/gen"
	"github.com/leasegen/leasegen/internal/gentest"
)

// adv75bGen runs gen.Generate in dir on patterns and returns the files
// (unwritten), the errors as printed, and the warnings as printed.
func adv75bGen(t *testing.T, dir string, patterns ...string) (files []gen.File, errs, warns []string) {
	t.Helper()
	var mu sync.Mutex
	files, err := gen.Generate(gen.Config{Dir: dir, Patterns: patterns, Warn: func(w scanner.Error) {
		mu.Lock()
		defer mu.Unlock()
		warns = append(warns, w.Error())
	}})
	if err != nil {
		var list scanner.ErrorList
		if errors.As(err, &list) {
			for _, e := range list {
				errs = append(errs, e.Error())
			}
		} else {
			errs = []string{err.Error()}
		}
		return nil, errs, warns
	}
	return files, nil, warns
}

// adv75bWrite writes what Generate returned.
func adv75bWrite(t *testing.T, files []gen.File) {
	t.Helper()
	for _, f := range files {
		if f.Data == nil {
			os.Remove(f.Path)
			continue
		}
		if err := os.WriteFile(f.Path, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// adv75bGo runs go args in dir with env added and returns its output.
func adv75bGo(t *testing.T, dir string, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// adv75bBuildVet wants go build and go vet of pkgs to pass.
func adv75bBuildVet(t *testing.T, dir string, env []string, pkgs ...string) {
	t.Helper()
	for _, args := range [][]string{append([]string{"build", "-o", os.DevNull}, pkgs...), append([]string{"vet"}, pkgs...)} {
		if out, err := adv75bGo(t, dir, env, args...); err != nil {
			t.Errorf("leasegen exited 0 but go %s %v fails: %v\n%s", args[0], pkgs, err, out)
		}
	}
}

// adv75bSameBytes generates again and wants byte-identical output.
func adv75bSameBytes(t *testing.T, dir string, first []gen.File, patterns ...string) {
	t.Helper()
	again, errs, _ := adv75bGen(t, dir, patterns...)
	if errs != nil {
		t.Fatalf("second run refused what the first generated:\n%s", strings.Join(errs, "\n"))
	}
	if len(again) != len(first) {
		t.Fatalf("second run returned %d files, first %d", len(again), len(first))
	}
	for i := range first {
		if again[i].Path != first[i].Path || !bytes.Equal(again[i].Data, first[i].Data) {
			t.Errorf("%s: second run's bytes differ from the first's (not deterministic)", first[i].Path)
		}
	}
}

// adv75bLongKey is a key of 60 parts behind a 300-byte literal, and the
// parameters it names.
func adv75bLongKey() (key, params string) {
	var parts, ps []string
	for i := range 60 {
		parts = append(parts, fmt.Sprintf("{p%d}", i))
		ps = append(ps, fmt.Sprintf("p%d string", i))
	}
	return strings.Repeat("x", 300) + ":" + strings.Join(parts, ":"), strings.Join(ps, ", ")
}

// TestAdversary75b_ServiceShapesGenerate: the shapes real services have,
// generated in one run over several packages, must build, vet, and be
// byte-identical on a second run:
//
//   - svc-v2: a directory whose name is not the package's (package shop);
//     key parts of a named string type, a pointer path, a fmt.Stringer, an
//     embedded struct's field spelled out, an unsigned field, a *string;
//     a value receiver; a generic function with type parameters in the
//     other arguments and results (map[K][]T);
//   - cmd/worker: package main, client= a package variable, busy=skip;
//   - crlf: a file with a UTF-8 byte order mark and CRLF line endings
//     (what Windows editors write); the warning's column must be the
//     compiler's (line 14, column 38: wait=1s);
//   - uni: unicode identifiers (zahlungBuchen with größe Größe; 支付 with
//     name=Pay; éclair -> Éclair, not called here: calls to non-ASCII
//     wrapper names are adversary75b_unicode_test.go's finding);
//   - long: a 300-byte literal and 60 key parts.
func TestAdversary75b_ServiceShapesGenerate(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	longKey, longParams := adv75bLongKey()
	crlf := "\ufeff" + strings.ReplaceAll(`package crlf

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

// Jobs runs jobs.
type Jobs struct{ leases *lease.Client }

// settle settles.
//
//lease:lock settle:{id} deadline=5s wait=1s
func (j *Jobs) settle(ctx context.Context, id string) error { return nil }
`, "\n", "\r\n")
	adv46Write(t, mod, map[string]string{
		"svc-v2/shop.go": `package shop

import (
	"context"
	"fmt"

	"github.com/leasegen/leasegen/runtime/lease"
)

type Region string

type Cust struct {
	ID   int64
	Addr *Addr
}

type Addr struct{ Zip string }

type Sku struct{ n int }

func (s Sku) String() string { return fmt.Sprint(s.n) }

type Base struct{ Tenant string }

type Order struct {
	Base
	No uint32
}

type Shop struct{ leases *lease.Client }

//lease:lock shop:{r}:{c.ID}:{c.Addr.Zip}:{s}:{o.Base.Tenant}:{o.No}:{p} deadline=5s
func (sh Shop) sell(ctx context.Context, r Region, c *Cust, s Sku, o Order, p *string) (int, error) {
	return 0, nil
}

//lease:lock put:{id} deadline=5s
func put[T any, K comparable](ctx context.Context, c *lease.Client, id string, v T, m map[K][]T) (T, error) {
	return v, nil
}

func use(ctx context.Context, sh Shop, c *lease.Client) {
	_, _ = sh.Sell(ctx, "eu", &Cust{}, Sku{}, Order{}, nil)
	_, _ = Put[int, string](ctx, c, "id", 1, nil)
}

var _ = use
`,
		"cmd/worker/main.go": `package main

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

var leases *lease.Client

//lease:lock job:{name} deadline=5s client=leases busy=skip
func run(ctx context.Context, name string) error { return nil }

func main() { _ = Run(context.Background(), "x") }
`,
		"crlf/a.go": crlf,
		"uni/kasse.go": `package uni

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type Kasse struct{ leases *lease.Client }

type Größe int

//lease:lock kasse:{kundenNr}:{größe} deadline=5s
func (k *Kasse) zahlungBuchen(ctx context.Context, kundenNr string, größe Größe) error { return nil }

//lease:lock pay:{订单} deadline=5s name=Pay
func (k *Kasse) 支付(ctx context.Context, 订单 string) error { return nil }

//lease:lock é:{ñ} deadline=5s
func (k *Kasse) éclair(ctx context.Context, ñ string) error { return nil }

func use(ctx context.Context, k *Kasse) {
	_ = k.ZahlungBuchen(ctx, "n", 1)
	_ = k.Pay(ctx, "o")
}

var _ = use
`,
		"long/long.go": `package long

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type L struct{ leases *lease.Client }

//lease:lock ` + longKey + ` deadline=5s
func (l *L) big(ctx context.Context, ` + longParams + `) error { return nil }
`,
	})
	pkgs := []string{"./svc-v2", "./cmd/worker", "./crlf", "./uni", "./long"}
	files, errs, warns := adv75bGen(t, mod, pkgs...)
	if errs != nil {
		t.Fatalf("valid service code refused:\n%s", strings.Join(errs, "\n"))
	}
	if len(files) != len(pkgs) {
		t.Fatalf("got %d files for %d packages", len(files), len(pkgs))
	}
	adv75bWrite(t, files)
	for _, f := range files {
		if strings.Contains(f.Path, "svc-v2") && !bytes.Contains(f.Data, []byte("\npackage shop\n")) {
			t.Errorf("svc-v2/lease_gen.go is not package shop:\n%s", f.Data)
		}
	}
	wantWarn := filepath.Join("crlf", "a.go") + ":14:38: warning:"
	if !slices.ContainsFunc(warns, func(w string) bool { return strings.HasPrefix(w, wantWarn) }) {
		t.Errorf("the wait warning in the BOM+CRLF file is not at %s (the compiler's column); warnings:\n%s", wantWarn, strings.Join(warns, "\n"))
	}
	adv75bBuildVet(t, mod, nil, pkgs...)
	adv75bSameBytes(t, mod, files, pkgs...)
}

// TestAdversary75b_RefusalsArePositioned: code leasegen cannot wrap, or a
// package that does not compile for reasons of its own, gives
// compiler-style positioned errors and no file (so an existing output is
// kept: Generate returns nothing to write).
func TestAdversary75b_RefusalsArePositioned(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		// Names no upper-casing exports: Han (no case), a leading
		// underscore, ß (no single-rune upper case).
		"noexport/a.go": `package noexport

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type K struct{ leases *lease.Client }

//lease:lock pay:{id} deadline=5s
func (k *K) 支付(ctx context.Context, id string) error { return nil }

//lease:lock pay:{id} deadline=5s
func (k *K) _pay(ctx context.Context, id string) error { return nil }

//lease:lock pay:{id} deadline=5s
func (k *K) ßpay(ctx context.Context, id string) error { return nil }
`,
		"generic/a.go": `package generic

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type Store[T any] struct{ leases *lease.Client }

//lease:lock st:{id} deadline=5s
func (s *Store[T]) get(ctx context.Context, id string) error { return nil }

//lease:lock st:{v} deadline=5s
func get2[T ~string](ctx context.Context, c *lease.Client, v T) error { return nil }
`,
		"broken/a.go": `package broken

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type Jobs struct{ leases *lease.Client }

//lease:lock settle:{id} deadline=5s
func (j *Jobs) settle(ctx context.Context, id string) error { return nil }
`,
		"broken/lease_gen.go": "// Code generated by leasegen. DO NOT EDIT.\n\n//go:build !leasegen\n\npackage broken\n",
		"broken/helper.go": `package broken

func helper() int { return "x" }
`,
	})
	for _, c := range []struct{ pkg, want string }{
		{"noexport", "a.go:11:1: lease: 支付 has no exported form to name its wrapper after: give the wrapper a name with name=Ident\n" +
			"a.go:14:1: lease: _pay has no exported form to name its wrapper after: give the wrapper a name with name=Ident\n" +
			"a.go:17:1: lease: ßpay has no exported form to name its wrapper after: give the wrapper a name with name=Ident"},
		{"generic", "a.go:12:20: lease: get: methods of generic types are not supported (wrap a function instead)\n" +
			"a.go:14:17: lease: key part {v}: v has a type parameter's type; key parts must have concrete types"},
		{"broken", "helper.go:3:28: cannot use \"x\" (untyped string constant) as int value in return statement"},
	} {
		t.Run(c.pkg, func(t *testing.T) {
			files, errs, _ := adv75bGen(t, filepath.Join(mod, c.pkg))
			if files != nil {
				t.Errorf("files returned despite errors: %v", files)
			}
			if got := strings.Join(errs, "\n"); got != c.want {
				t.Errorf("errors:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}

// adv75bBinary builds cmd/leasegen once into dir and returns its path.
func adv75bBinary(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "leasegen")
	if out, err := adv75bGo(t, gentest.RepoRoot(), []string{"GOFLAGS=" + gentest.CrossFlags}, "build", "-o", bin, "./cmd/leasegen"); err != nil {
		t.Fatalf("building leasegen: %v\n%s", err, out)
	}
	return bin
}

// TestAdversary75b_CommandRuns: the command as users run it.
//
//   - go generate ./... (leasegen on PATH) over a module where one package
//     does not compile for an unrelated reason: exit 1, the error printed
//     relative to the module root (broken/helper.go:3:28), the old output
//     kept byte for byte, no temporary file left;
//   - four leasegen processes at once, three times, over two packages (two
//     on both, one on each), from a cold state: every output ends as one
//     run writes it alone, no temporary file is left.
func TestAdversary75b_CommandRuns(t *testing.T) {
	t.Parallel()
	bin := adv75bBinary(t, t.TempDir())
	mod := adv46Module(t)
	pkg := func(name string) string {
		// The directive is put together: a line of this file that begins
		// with it would be run by go generate ./... on this repository.
		return "package " + name + "\n\n//go:" + `generate leasegen

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type Jobs struct{ leases *lease.Client }

//lease:lock settle:{id} deadline=5s
func (j *Jobs) settle(ctx context.Context, id string) error { return nil }

//lease:lock refund:{id}:{n} deadline=9s fence
func (j *Jobs) refund(ctx context.Context, id string, n int) error { return nil }
`
	}
	adv46Write(t, mod, map[string]string{"one/a.go": pkg("one"), "two/a.go": pkg("two"), "broken/a.go": pkg("broken")})
	files, errs, _ := adv75bGen(t, mod, "./one", "./two", "./broken")
	if errs != nil {
		t.Fatalf("refused:\n%s", strings.Join(errs, "\n"))
	}
	want := map[string][]byte{}
	for _, f := range files {
		want[f.Path] = f.Data
	}
	env := []string{"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")}
	noTemp := func(t *testing.T) {
		t.Helper()
		for _, d := range []string{"one", "two", "broken"} {
			ents, _ := os.ReadDir(filepath.Join(mod, d))
			for _, e := range ents {
				if strings.Contains(e.Name(), ".tmp") {
					t.Errorf("temporary file left: %s/%s", d, e.Name())
				}
			}
		}
	}

	t.Run("go generate over a broken package keeps its output", func(t *testing.T) {
		out, err := adv75bGo(t, mod, env, "generate", "./broken")
		if err != nil {
			t.Fatalf("go generate on a compiling package failed: %v\n%s", err, out)
		}
		old, _ := os.ReadFile(filepath.Join(mod, "broken", "lease_gen.go"))
		adv46Write(t, mod, map[string]string{"broken/helper.go": "package broken\n\nfunc helper() int { return \"x\" }\n"})
		// A directive whose wrapper would change: the run must still
		// write nothing.
		src, _ := os.ReadFile(filepath.Join(mod, "broken", "a.go"))
		adv46Write(t, mod, map[string]string{"broken/a.go": strings.Replace(string(src), "deadline=9s", "deadline=8s", 1)})
		out, err = adv75bGo(t, mod, env, "generate", "./...")
		if err == nil {
			t.Fatalf("go generate succeeded over a package that does not compile:\n%s", out)
		}
		if !strings.Contains(out, "broken/helper.go:3:28: cannot use \"x\"") {
			t.Errorf("the unrelated error is not printed at broken/helper.go:3:28:\n%s", out)
		}
		now, _ := os.ReadFile(filepath.Join(mod, "broken", "lease_gen.go"))
		if !bytes.Equal(old, now) {
			t.Errorf("the broken package's output changed:\n%s", now)
		}
		noTemp(t)
	})

	t.Run("concurrent runs", func(t *testing.T) {
		for round := range 3 {
			for _, d := range []string{"one", "two"} {
				os.Remove(filepath.Join(mod, d, "lease_gen.go"))
			}
			runs := []struct{ dir, pkgs string }{{mod, "./one ./two"}, {mod, "./two ./one"}, {filepath.Join(mod, "one"), ""}, {filepath.Join(mod, "two"), "."}}
			var wg sync.WaitGroup
			outs := make([]string, len(runs))
			for i, r := range runs {
				wg.Go(func() {
					cmd := exec.Command(bin, strings.Fields(r.pkgs)...)
					cmd.Dir = r.dir
					out, err := cmd.CombinedOutput()
					if err != nil {
						outs[i] = fmt.Sprintf("%v: %s", err, out)
					}
				})
			}
			wg.Wait()
			for i, o := range outs {
				if o != "" {
					t.Errorf("round %d, run %d (%v): %s", round, i, runs[i], o)
				}
			}
			for _, d := range []string{"one", "two"} {
				p := filepath.Join(mod, d, "lease_gen.go")
				got, err := os.ReadFile(p)
				if err != nil || !bytes.Equal(got, want[p]) {
					t.Errorf("round %d: %s/lease_gen.go is not what one run writes (err %v):\n%s", round, d, err, got)
				}
			}
			noTemp(t)
		}
		adv75bBuildVet(t, mod, nil, "./one", "./two")
	})
}

// TestAdversary75b_WorkspaceTwoModules: a go.work workspace of modules a
// and b, neither requiring the other in go.mod. b/pay has a directive and
// calls its own wrapper (so b/pay does not compile without its output);
// a/svc imports b/pay, calls b's wrapper and its caller, and has its own
// directive. Generating a/svc first (b's output not yet written), then
// b/pay, must give modules that build and vet in workspace mode, and the
// same bytes again. (GOFLAGS without -mod=mod: a workspace refuses it.)
func TestAdversary75b_WorkspaceTwoModules(t *testing.T) {
	// The test binary's -race only (when it has it): the go commands then
	// build the configuration go test built (see gentest.Flags).
	t.Setenv("GOFLAGS", strings.TrimSpace(gentest.RaceFlag))
	ws := t.TempDir()
	for _, m := range []string{"a", "b"} {
		if err := os.MkdirAll(filepath.Join(ws, m), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := gentest.Module(gentest.RepoRoot(), "example.com/"+m, filepath.Join(ws, m)); err != nil {
			t.Fatal(err)
		}
	}
	adv46Write(t, ws, map[string]string{
		"go.work": "go 1.26\n\nuse (\n\t./a\n\t./b\n)\n",
		"b/pay/pay.go": `package pay

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

// Ledger holds the client.
type Ledger struct{ leases *lease.Client }

// OrderID names an order.
type OrderID string

//lease:lock pay:{id} deadline=5s
func (l *Ledger) charge(ctx context.Context, id OrderID) error { return nil }

// ChargeTwice calls its own wrapper.
func (l *Ledger) ChargeTwice(ctx context.Context, id OrderID) error {
	if err := l.Charge(ctx, id); err != nil {
		return err
	}
	return l.Charge(ctx, id)
}
`,
		"a/svc/svc.go": `package svc

import (
	"context"

	"example.com/b/pay"
	"github.com/leasegen/leasegen/runtime/lease"
)

// Svc uses pay.
type Svc struct {
	leases *lease.Client
	l      *pay.Ledger
}

//lease:lock svc:{id} deadline=5s
func (s *Svc) refund(ctx context.Context, id pay.OrderID) error {
	if err := s.l.ChargeTwice(ctx, id); err != nil {
		return err
	}
	return s.l.Charge(ctx, id)
}
`,
	})
	var all []gen.File
	for _, dir := range []string{"a/svc", "b/pay"} {
		files, errs, _ := adv75bGen(t, filepath.Join(ws, dir))
		if errs != nil {
			t.Fatalf("%s refused in a workspace:\n%s", dir, strings.Join(errs, "\n"))
		}
		adv75bWrite(t, files)
		all = append(all, files...)
	}
	adv75bBuildVet(t, filepath.Join(ws, "a"), nil, "./...")
	adv75bBuildVet(t, filepath.Join(ws, "b"), nil, "./...")
	for i, dir := range []string{"a/svc", "b/pay"} {
		adv75bSameBytes(t, filepath.Join(ws, dir), all[i:i+1])
	}
}

// TestAdversary75b_VendoredModule: a module built with -mod=vendor, whose
// vendored dependency example.com/lib ships a leasegen output and calls
// its own wrapper (under -tags leasegen it does not compile, and is read
// from its vendored source). app/svc calls lib's wrapper and has its own
// directive: generating under GOFLAGS=-mod=vendor must give a package that
// builds and vets with -mod=vendor. (-trimpath keeps the vendored packages'
// compilation in the build cache across temporary directories: without it
// every run compiles go-redis anew, about a minute here.)
func TestAdversary75b_VendoredModule(t *testing.T) {
	t.Setenv("GOFLAGS", "")
	root := t.TempDir()
	for _, m := range []string{"app", "lib"} {
		if err := os.MkdirAll(filepath.Join(root, m), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := gentest.Module(gentest.RepoRoot(), "example.com/"+m, filepath.Join(root, m)); err != nil {
			t.Fatal(err)
		}
	}
	libSrc := `package pay

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

// Ledger holds the client.
type Ledger struct{ leases *lease.Client }

//lease:lock pay:{id} deadline=5s
func (l *Ledger) charge(ctx context.Context, id string) error { return nil }

// ChargeTwice calls its own wrapper.
func (l *Ledger) ChargeTwice(ctx context.Context, id string) error {
	if err := l.Charge(ctx, id); err != nil {
		return err
	}
	return l.Charge(ctx, id)
}
`
	adv46Write(t, root, map[string]string{
		"lib/pay/pay.go": libSrc,
		"app/svc/svc.go": `package svc

import (
	"context"

	"example.com/lib/pay"
	"github.com/leasegen/leasegen/runtime/lease"
)

type Svc struct {
	leases *lease.Client
	l      *pay.Ledger
}

//lease:lock svc:{id} deadline=5s
func (s *Svc) refund(ctx context.Context, id string) error {
	if err := s.l.ChargeTwice(ctx, id); err != nil {
		return err
	}
	return s.l.Charge(ctx, id)
}
`,
	})
	// lib's committed output, generated as its authors would (with the
	// test binary's configuration, see gentest.Flags).
	t.Setenv("GOFLAGS", gentest.Flags)
	libFiles, errs, _ := adv75bGen(t, filepath.Join(root, "lib", "pay"))
	if errs != nil {
		t.Fatalf("lib refused:\n%s", strings.Join(errs, "\n"))
	}
	adv75bWrite(t, libFiles)
	t.Setenv("GOFLAGS", "")
	app := filepath.Join(root, "app")
	gomod, _ := os.ReadFile(filepath.Join(app, "go.mod"))
	adv46Write(t, app, map[string]string{"go.mod": string(gomod) + "\nrequire example.com/lib v0.0.0\n\nreplace example.com/lib => ../lib\n"})
	for _, args := range [][]string{{"mod", "tidy"}, {"mod", "vendor"}} {
		if out, err := adv75bGo(t, app, nil, args...); err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
	}
	if _, err := os.Stat(filepath.Join(app, "vendor", "example.com", "lib", "pay", "lease_gen.go")); err != nil {
		t.Fatalf("lib's output not vendored: %v", err)
	}
	flags := "-mod=vendor -trimpath" + gentest.RaceFlag
	t.Setenv("GOFLAGS", flags)
	files, errs, _ := adv75bGen(t, filepath.Join(app, "svc"))
	if errs != nil {
		t.Fatalf("refused under -mod=vendor:\n%s", strings.Join(errs, "\n"))
	}
	adv75bWrite(t, files)
	adv75bBuildVet(t, app, nil, "./...")
	adv75bSameBytes(t, filepath.Join(app, "svc"), files)
}
