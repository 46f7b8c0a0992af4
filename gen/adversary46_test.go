package gen_test

// Adversary round 46 (generator). Each test runs the real generator
// (gen.Generate) on a small package in a throwaway module and, when it
// generates without errors, builds the package with the output: DESIGN §3
// promises that anything leasegen does not support "is a generate-time
// error", so a run that exits 0 must leave a package that compiles.
// Fixed and kept here: the decorator's receiver shadowing a result
// type's package or type, a decorator for methods that use another
// package's unexported names, a receiver shadowing what client= or
// identity= names, name=_, name=init and name=main; in testdata:
// adv46_iface_shape_position (an interface method's shape error at its
// name) and adv46_struct_tag_gofmt (one tagged field is gofmt'd). The
// four findings left open at first (package-level declarations named like
// predeclared identifiers the wrapper uses; leasecheck calling the output
// stale when a type text names a wrapper; clashes with declarations or
// imports in files of another platform; a //lease:defaults conflict
// reported at the defaults) are fixed, and tested in adversary46b_test.go.

import (
	"errors"
	"go/scanner"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasegen/leasegen/gen"
	"github.com/leasegen/leasegen/internal/gentest"
)

// adv46Module writes a module example.com/golden using this repository
// and returns its directory.
func adv46Module(t *testing.T) string {
	t.Helper()
	gentest.Env(t)
	mod := t.TempDir()
	gentest.WriteModule(t, mod)
	return mod
}

// adv46Write writes files (path -> content) under dir.
func adv46Write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, src := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// adv46Generate runs the generator in dir (package "."), writes what it
// returns, and returns the diagnostics (nil when it generated).
func adv46Generate(t *testing.T, dir string) []string {
	t.Helper()
	files, err := gen.Generate(gen.Config{Dir: dir})
	if err != nil {
		var list scanner.ErrorList
		if errors.As(err, &list) {
			var out []string
			for _, e := range list {
				out = append(out, e.Error())
			}
			return out
		}
		return []string{err.Error()}
	}
	for _, f := range files {
		if f.Data == nil {
			os.Remove(f.Path)
			continue
		}
		if err := os.WriteFile(f.Path, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return nil
}

// adv46GenerateBuilds checks the promise "generate-time error or code that
// compiles": it generates for the package in dir and, when leasegen
// reported no error, runs go build and go vet on it.
func adv46GenerateBuilds(t *testing.T, mod, pkg string) {
	t.Helper()
	dir := filepath.Join(mod, pkg)
	if errs := adv46Generate(t, dir); errs != nil {
		t.Logf("leasegen reported errors (acceptable):\n%s", strings.Join(errs, "\n"))
		return
	}
	for _, tool := range []string{"build", "vet"} {
		args := []string{tool, "./" + pkg}
		if tool == "build" {
			args = []string{tool, "-o", os.DevNull, "./" + pkg} // a main package too
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = mod
		if out, err := cmd.CombinedOutput(); err != nil {
			gen, _ := os.ReadFile(filepath.Join(dir, "lease_gen.go"))
			t.Fatalf("leasegen exited 0 but go %s of the package fails: %v\n%s\n--- lease_gen.go\n%s", tool, err, out, gen)
		}
	}
}

// Finding 1. A decorator's methods use the fixed receiver name "x"
// (gen/decorator.go:113, Recv: "x"), reserved only against the method's
// parameter names (decorator.go:159 n.reserve(dec.Recv)), never against the
// names the body repeats: the result types, which the body declares as
// `var r0 <type>`. An interface method returning a type of an imported
// package named x (x.Thing), or a package type named x, gives
//
//	func (x *leasedStore) Put(ctx context.Context, id string) (x.Thing, error) {
//		var r0 x.Thing   // x is the receiver here: "x.Thing is not a type"
//
// leasegen exits 0 and writes a file that does not compile. Function and
// method wrappers allocate their receiver name with the namer
// (build.go: n.alloc(recvName(fd), "r")), which reserves those names; the
// decorator does not.
//
// Breaks DESIGN §3 "Supported targets: ... interface methods: directives on
// an interface's methods generate a decorator NewLeased<Iface>" and
// "anything else is a generate-time error".
func TestAdversary46_DecoratorReceiverShadowsResultType(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		// An imported package named x.
		"decimp/x/x.go": "package x\n\ntype Thing struct{ N int }\n",
		"decimp/p.go": `package decimp

import (
	"context"

	"example.com/golden/decimp/x"
)

type Store interface {
	//lease:lock k:{id} deadline=5s
	Put(ctx context.Context, id string) (x.Thing, error)
}
`,
		// A package type named x.
		"dectype/p.go": `package dectype

import "context"

type x int

type Store interface {
	//lease:lock k:{id} deadline=5s
	Put(ctx context.Context, id string) ([]x, error)
}
`,
	})
	for _, pkg := range []string{"decimp", "dectype"} {
		t.Run(pkg, func(t *testing.T) { adv46GenerateBuilds(t, mod, pkg) })
	}
}

// Finding 3. A decorator passes the methods of an interface embedded from
// another package straight through, writing their signatures in the
// generated file. When such a signature names an unexported type (or
// unexported alias) of that package, the file cannot name it:
//
//	func (x *leasedStore) Get() y.t {   // "name t not exported by package y"
//
// gen/decorator.go:99-103 refuses an embedded interface with an unexported
// *method* (the err_adv22_decorator_foreign_unexported case), but not one
// whose exported methods use unexported *types*; typecode.go (qual.typ,
// case *types.Named / *types.Alias) writes pkg.name whatever the name's
// export status. Real-world instance: protoreflect.Message has
// ProtoMethods() *methods, methods an unexported alias. leasegen exits 0
// with a file that does not compile.
//
// Breaks DESIGN §3: supported targets are interface methods with a
// decorator; "anything else is a generate-time error".
func TestAdversary46_DecoratorForeignUnexportedType(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"decunexp/y/y.go": `package y

type t struct{ N int }

type priv = int

// I and J are exported interfaces with exported methods whose
// signatures use names other packages cannot write.
type I interface{ Get() t }

type J interface{ Count() priv }
`,
		"decunexp/p.go": `package decunexp

import (
	"context"

	"example.com/golden/decunexp/y"
)

type Store interface {
	y.I
	y.J
	//lease:lock k:{id} deadline=5s
	Save(ctx context.Context, id string) error
}
`,
	})
	adv46GenerateBuilds(t, mod, "decunexp")
}

// Finding 5. A method's receiver name shadows the package-level variable
// or constant that client= or identity= names. funcWrapper allocates the
// wrapper's receiver name first (gen/build.go:382, w.RecvName =
// n.alloc(recvName(fd), "r")), and only then does client()
// (gen/client.go:54-56) or identity() (gen/identity.go:104-107) reserve
// the package-level name, too late to rename the receiver. The wrapper then
// reads the receiver where it means the package's variable:
//
//	func (leases Node) Settle(...) error { ... return leases.Do(...) }
//	                                       // leases.Do undefined (type Node ...)
//	func (region *Jobs) SettleAsLeader(...) { ... Owner: region, ... }
//	                                       // cannot use region (*Jobs) as string
//
// With a receiver of a string type and identity= naming a constant of that
// type, it compiles and campaigns under the receiver's value instead of the
// constant. Type parameters get exactly this check (build.go:393-401:
// "type parameter %s shadows the package-level %s that %s=%s names"),
// receivers do not. leasegen exits 0 either way.
//
// Breaks DESIGN §3 "client= ... a receiver field or a package-level
// variable" (the package variable is not what the wrapper uses) and
// "anything else is a generate-time error".
func TestAdversary46_ReceiverShadowsClientOrIdentity(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"recvclient/p.go": `package recvclient

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

// leases is the process's lease client.
var leases *lease.Client

// Node is a node's name.
type Node string

//lease:lock jobs:{id} deadline=5s client=leases
func (leases Node) settle(ctx context.Context, id string) error { return nil }
`,
		"recvidentity/p.go": `package recvidentity

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

const region = "eu-1"

type Jobs struct{ lc *lease.Client }

//lease:leader jobs:settle identity=region
func (region *Jobs) settle(ctx context.Context) error { return nil }
`,
	})
	for _, pkg := range []string{"recvclient", "recvidentity"} {
		t.Run(pkg, func(t *testing.T) { adv46GenerateBuilds(t, mod, pkg) })
	}
}

// Finding 5, silent form, run against a real redis-server: the receiver
// is of a string type and identity= names a package constant of that
// type. The wrapper compiles, and campaigns with Owner: string(region)
// where region is the *receiver*, so the leader is recorded under the
// receiver's value ("node-7"), not the constant identity= names ("eu-1").
// Same root cause as above (gen/build.go:382 allocates the receiver name
// before gen/identity.go:106 reserves the constant's name).
func TestAdversary46_ReceiverShadowsIdentityRuntime(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"silentowner/p.go": `package silentowner

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

// Region names a region.
type Region string

// region is the candidate name identity= asks for.
const region Region = "eu-1"

// Leases is the lease client.
var Leases *lease.Client

// Owner is the leader's owner as Redis records it, read during the term.
var Owner string

// Stop ends the campaign after the first term.
var Stop context.CancelFunc

//lease:leader jobs:settle identity=region client=Leases
func (region Region) settle(ctx context.Context) error {
	l, err := Leases.Leader(ctx, "jobs:settle")
	Owner = l.Owner
	Stop()
	return err
}
`,
		"silentowner/p_test.go": `package silentowner

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

var srv *leasetest.Server

func TestMain(m *testing.M) { os.Exit(leasetest.RunTests(m, &srv)) }

func TestOwnerIsTheIdentityConstant(t *testing.T) {
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	Leases = c
	ctx, cancel := context.WithCancel(context.Background())
	Stop = cancel
	if err := Region("node-7").SettleAsLeader(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if Owner != string(region) {
		t.Fatalf("leader recorded with owner %q; identity=region names the constant %q", Owner, region)
	}
}
`,
	})
	dir := filepath.Join(mod, "silentowner")
	if errs := adv46Generate(t, dir); errs != nil {
		t.Logf("leasegen reported errors (acceptable): %s", strings.Join(errs, "\n"))
		return
	}
	cmd := exec.Command("go", "test", "-count=1", "./silentowner")
	cmd.Dir = mod
	if out, err := cmd.CombinedOutput(); err != nil {
		gen, _ := os.ReadFile(filepath.Join(dir, "lease_gen.go"))
		t.Fatalf("generated wrapper run against redis-server: %v\n%s\n--- lease_gen.go\n%s", err, out, gen)
	}
}

// Finding 10. name=_ is accepted: leasegen writes a blank wrapper,
// func _(ctx context.Context, c *lease.Client, id string) error (and a
// blank method for a method), which nothing can call, and exits 0; the
// function's callers are then told by leasecheck "call to f bypasses its
// lease: call _ instead". A blank *target* is refused ("a blank function
// (func _) cannot be called: the directive has nothing to wrap",
// gen/build.go:276-278), a blank wrapper name is not: the directive
// parser only checks token.IsIdentifier (gen/directive/directive.go:370),
// which "_" passes, and declare
// (gen/naming.go:77) finds nothing named _ in scope.
//
// Breaks DESIGN §3 "name=Ident the wrapper's name" / "Wrapper naming ...
// (the raw function stays callable, and leasecheck flags callers that
// bypass the wrapper)": there is no wrapper to call instead. Expected: an
// error at the name= argument (p.go:5:33).
func TestAdversary46_BlankWrapperName(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"blankname/p.go": `package blankname

import "context"

//lease:lock k:{id} deadline=5s name=_
func f(ctx context.Context, id string) error { return nil }
`,
	})
	errs := adv46Generate(t, filepath.Join(mod, "blankname"))
	for _, e := range errs {
		if strings.HasPrefix(e, "p.go:5:38: ") { // at the value, as every bad option value
			return
		}
	}
	gen, _ := os.ReadFile(filepath.Join(mod, "blankname", "lease_gen.go"))
	t.Fatalf("no error at name=_ (p.go:5:38); diagnostics: %q\n--- lease_gen.go\n%s", errs, gen)
}

// Finding 10b. Same gap for the other names Go reserves at package level:
// name=init gives func init(ctx context.Context, c *lease.Client, id
// string) error ("func init must have no arguments and no return
// values"), and name=main in package main a func main with parameters.
// declare (gen/naming.go:77) looks the name up in the package scope, where
// init functions are never entered and main is free; leasegen exits 0 and
// the package no longer compiles.
func TestAdversary46_ReservedWrapperNames(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"initname/p.go": `package initname

import "context"

//lease:lock k:{id} deadline=5s name=init
func f(ctx context.Context, id string) error { return nil }
`,
		"mainname/p.go": `package main

import "context"

//lease:lock k:{id} deadline=5s name=main
func f(ctx context.Context, id string) error { return nil }
`,
	})
	for _, pkg := range []string{"initname", "mainname"} {
		t.Run(pkg, func(t *testing.T) { adv46GenerateBuilds(t, mod, pkg) })
	}
}
