package templates

import (
	"go/format"
	"strings"
	"testing"
	"time"
)

func TestAssumedName(t *testing.T) {
	for path, want := range map[string]string{
		"context":                      "context",
		"github.com/redis/go-redis/v9": "redis",
		"gopkg.in/yaml.v3":             "yaml",
		"example.com/go-kit":           "kit",
		"example.com/v2":               "example", // as goimports assumes
		"net/http":                     "http",
	} {
		if got := assumedName(path); got != want {
			t.Errorf("assumedName(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestLookupUnknownTemplate(t *testing.T) {
	if _, err := Lookup("nope"); err == nil || !strings.Contains(err.Error(), "valid: decorator, func, leader, method") {
		t.Fatalf("Lookup(nope) = %v; want an error listing the templates", err)
	}
}

// The emitters write gofmt's layout themselves; a model with every kind of
// key part, results and a decorator renders to gofmt'd source.
func TestRenderNeedsNoGofmt(t *testing.T) {
	imports := map[string]string{"context": "context", "fmt": "fmt", "strconv": "strconv", "time": "time", leasePkg: "lease"}
	w := &Wrapper{
		Template: "method", Name: "Charge", Target: "charge",
		Doc:      []string{"Charge does it.", "", "Lines stay as written."},
		RecvName: "s", RecvType: "*Server",
		Params:      []Param{{Name: "ctx", Type: "context.Context"}, {Name: "req", Type: "*Req"}, {Name: "tags", Type: "string", Variadic: true}},
		ClientParam: -1, Results: []string{"int", "error"},
		Key: []KeyPart{
			{Lit: "k:"},
			{Src: "{req.ID}", Value: "strconv.FormatInt(req.ID, 10)", NilChecks: []NilCheck{{Expr: "req", Text: "req"}}},
			{Lit: ":"},
			{Src: "{req.Name()}", Str: "req.Name()", StrVar: "part", NonEmpty: true, Text: "req.Name()"},
			{Lit: ":"},
			{Src: "{req.Addr}", Marshal: "req.Addr.MarshalText()", NonEmpty: true, Text: "req.Addr"},
		},
		Spec:   Spec{TTL: 10 * time.Second, Deadline: time.Minute, Wait: 2 * time.Second, MinValidity: 5 * time.Second, HoldMin: time.Second, Keep: 30 * time.Second, Skip: true, Fence: true, Name: "p.(*Server).charge"},
		Client: "s.leases", Call: "s.charge", Tie: "(*Server).charge", TieType: "func(*Server, context.Context, *Req, ...string) (int, error)",
		KeyVar: "key", ErrVar: "err", KeyErrVar: "keyErr", ResultVars: []string{"r0"}, ScratchVars: []string{"text"},
		Uses: []string{"context", "strconv"},
	}
	d := &Decorator{Iface: "Store", IfaceTyp: "Store", Ctor: "NewLeasedStore", Struct: "leasedStore", Recv: "x", Next: "next", ClientF: "leases",
		Methods: []*Wrapper{{Template: "decorator", Name: "Put", Target: "Store.Put", Params: []Param{{Name: "ctx", Type: "context.Context"}, {Name: "id", Type: "string"}},
			ClientParam: -1, Results: []string{"error"}, Key: []KeyPart{{Lit: "s:"}, {Src: "{id}", Str: "id", NonEmpty: true, Text: "id"}},
			Spec:   Spec{TTL: 3 * time.Second, Deadline: 5 * time.Second, MinValidity: 1500 * time.Millisecond, Name: "p.Store.Put"},
			Client: "x.leases", Call: "x.next.Put", KeyVar: "key", ErrVar: "err", Uses: []string{"context"}}},
		Passthrough: []*Wrapper{{Name: "Close", Params: nil}, {Name: "Get", Params: []Param{{Name: "id", Type: "string"}}, Results: []string{"[]byte", "error"}}},
	}
	lw := &Wrapper{Template: "leader", Name: "RunAsLeader", Target: "run", Doc: []string{"RunAsLeader campaigns."},
		Params: []Param{{Name: "ctx", Type: "context.Context"}}, ClientParam: -1, Results: []string{"error"}, Key: []KeyPart{{Lit: "jobs:run"}},
		Lead:   &LeadSpec{TTL: 2 * time.Second, MinValidity: time.Second, Owner: "string(host)", Name: "p.run"},
		Client: "leases", Call: "run", Tie: "run", TieType: "func(context.Context) error", KeyVar: "key", ErrVar: "err", Uses: []string{"context"}}
	out, err := Render(&File{PkgPath: "example.com/p", PkgName: "p", Imports: imports, Wrappers: []*Wrapper{w, lw}, Decorators: []*Decorator{d}})
	if err != nil {
		t.Fatal(err)
	}
	formatted, err := format.Source(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if string(formatted) != string(out) {
		t.Fatalf("not gofmt's layout:\n--- rendered\n%s--- gofmt\n%s", out, formatted)
	}
	for _, want := range []string{"\t\tKeep:        30 * time.Second,\n\t\tBusy:", "return leases.Lead(ctx, key, lease.LeadSpec{"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("rendered file lacks %q:\n%s", want, out)
		}
	}
}

// A decorator's docs read "an Inventory", not "a Inventory".
func TestArticleBeforeTypeNames(t *testing.T) {
	for name, want := range map[string]string{"Inventory": "an", "Order": "an", "Auditor": "an", "Events": "an", "Store": "a", "User": "a", "repo": "a", "item": "an"} {
		if got := article(name); got != want {
			t.Errorf("article(%q) = %q, want %q", name, got, want)
		}
	}
	d := &Decorator{Iface: "Inventory", IfaceTyp: "Inventory", Ctor: "NewLeasedInventory", Struct: "leasedInventory", Recv: "x", Next: "next", ClientF: "leases"}
	b, err := Render(&File{PkgPath: "example.com/p", PkgName: "p", Decorators: []*Decorator{d}})
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	if !strings.Contains(out, "wraps an Inventory:") || !strings.Contains(out, "returns an Inventory that") {
		t.Errorf("decorator docs:\n%s", out)
	}
}
