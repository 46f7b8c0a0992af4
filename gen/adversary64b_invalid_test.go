package gen_test

// Adversary round 64b (generator): types the checker could not resolve,
// where round 63c's hasInvalid does not look, and outside leased
// signatures.

import (
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// adv64bCharge is the head of every package below: a wrapper Charge, so
// that "undefined: Charge" is forgiven wherever the package uses Charge.
const adv64bCharge = `package %s

import "context"

//lease:lock a:{id} deadline=1s
func charge(ctx context.Context, id string) error { return nil }

`

// Round 63c made a leased signature whose type the checker could not
// resolve (undefined: Charge, forgiven because the run generates a
// wrapper Charge, which is a function) an error at the parameter.
// hasInvalid (gen/signature.go:65) walks pointers, slices, arrays, chans,
// maps, signatures, structs and type arguments, but not interface
// literals; checkShape (gen/signature.go:37) looks at parameters and
// results, but not at type parameters' constraints; and a decorator's
// pass-through methods (no directive) are never shape-checked
// (gen/decorator.go:217 checks only leased ones). Each of these still
// writes "invalid type" into the wrapper: leasegen exits 0 with a file
// that does not parse, or reports gofmt's errors on its own unparsable
// text with no file name ("2:58: missing ',' in parameter list"). A
// method on a receiver of that type is refused as if its type were
// generic.
//
//	tparam/lease_gen.go:38:18: missing ',' in parameter list
//	passthru/lease_gen.go:71:37: missing ',' in parameter list
//
// Broken promises: DESIGN §3 "Generate-time errors look like the
// compiler's: `orders.go:12:4: lease: ...`" and "Generated files ... are
// gofmt'd and deterministic" (these do not parse); STYLE 6 "attach the
// position at the deepest point that knows it ... name the thing and the
// fix"; README "Directives": "methods of generic types are refused" (the
// receiver's type is not generic).
//
// Fixed when each package is refused with an error at the line of the
// unresolved type in p.go, none without a file position, nothing written
// that does not parse, and no error calling the receiver generic.
func TestAdversary64b_InvalidTypeUnwalked(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	cases := []struct{ pkg, src, notWant string }{
		// An interface literal parameter.
		{"iface", "//lease:lock b:{id} deadline=1s\nfunc refund(ctx context.Context, id string, h interface{ M(Charge) }) error { return nil }\n", ""},
		// An interface literal result.
		{"ifres", "//lease:lock b:{id} deadline=1s\nfunc refund(ctx context.Context, id string) (interface{ M() Charge }, error) { return nil, nil }\n", ""},
		// A type parameter's constraint, an interface literal.
		{"tparam", "//lease:lock b:{id} deadline=1s\nfunc refund[T interface{ M(Charge) }](ctx context.Context, id string, h T) error { return nil }\n", ""},
		// A type parameter's constraint, the name itself.
		{"tconstr", "//lease:lock b:{id} deadline=1s\nfunc refund[T Charge](ctx context.Context, id string, h T) error { return nil }\n", ""},
		// A decorator's pass-through method.
		{"passthru", "type Store interface {\n\t//lease:lock b:{id} deadline=1s\n\tSave(ctx context.Context, id string) error\n\tGet(h Charge) error\n}\n", ""},
		// A receiver.
		{"recv", "//lease:lock b:{id} deadline=1s\nfunc (s Charge) refund(ctx context.Context, id string) error { return nil }\n", "generic"},
	}
	files := map[string]string{}
	for _, c := range cases {
		files[c.pkg+"/p.go"] = fmt.Sprintf(adv64bCharge, c.pkg) + c.src
	}
	adv46Write(t, mod, files)
	for _, c := range cases {
		t.Run(c.pkg, func(t *testing.T) {
			// The line of the unresolved type: the last line of the source.
			line := strings.Count(files[c.pkg+"/p.go"], "\n")
			if c.pkg == "passthru" {
				line--
			}
			errs := adv46Generate(t, filepath.Join(mod, c.pkg))
			out, _ := os.ReadFile(filepath.Join(mod, c.pkg, "lease_gen.go"))
			if out != nil {
				if _, err := parser.ParseFile(token.NewFileSet(), "lease_gen.go", out, parser.ParseComments); err != nil {
					t.Errorf("leasegen exited 0 and wrote a file that does not parse: %v", err)
				}
			}
			pos := regexp.MustCompile(`^[^:\s]+\.go:\d+:\d+: `)
			found := false
			for _, e := range errs {
				if !pos.MatchString(e) {
					t.Errorf("error without file:line:col: %q", e)
				}
				if c.notWant != "" && strings.Contains(e, c.notWant) {
					t.Errorf("error says %q, but the receiver's type is undefined, not generic: %q", c.notWant, e)
				}
				found = found || strings.HasPrefix(e, fmt.Sprintf("p.go:%d:", line))
			}
			if !found {
				t.Errorf("want an error at p.go:%d (Charge is not a type); got %q", line, errs)
			}
		})
	}
}

// The same forgiveness outside a leased signature: "undefined: Charge"
// where Charge is used as a type (a variable's type, a defined type's
// underlying type, an embedded interface, a composite literal's type) is forgiven because the run
// generates a wrapper Charge (gen/gen.go:572, which looks only at the
// name). leasegen exits 0 and writes lease_gen.go; go build then fails in
// the user's own file, with or without the output:
//
//	plainvar/p.go:8:7: Charge (function) is not a type
//
// Round 63c's own analysis of the leased case holds here: "The code is
// broken with or without the output (Charge is a function), so the right
// answer is the compiler's error ..., and nothing written." Broken
// promises: README "Directives": only "calls to wrappers ... are left to
// the build" (a type is no call); DESIGN §3 "no file is written or changed
// when any error exists"; STYLE 2 "refuse to generate from broken code".
//
// Fixed when each package is refused with the compiler's error at the
// line that uses Charge as a type.
func TestAdversary64b_ForgivenUndefinedAsTypeOutsideSignature(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	cases := []struct{ pkg, src string }{
		{"plainvar", "var v Charge\n"},
		{"deftype", "type H Charge\n\n//lease:lock b:{id} deadline=1s\nfunc refund(ctx context.Context, id string, h H) error { return nil }\n"},
		{"embed", "type Store interface {\n\t//lease:lock b:{id} deadline=1s\n\tSave(ctx context.Context, id string) error\n\tCharge\n}\n"},
		{"complit", "var w = []Charge{}\n"},
	}
	files := map[string]string{}
	for _, c := range cases {
		files[c.pkg+"/p.go"] = fmt.Sprintf(adv64bCharge, c.pkg) + c.src
	}
	adv46Write(t, mod, files)
	for _, c := range cases {
		t.Run(c.pkg, func(t *testing.T) {
			line := 8 // the first line after the head
			switch c.pkg {
			case "embed":
				line = 11
			}
			errs := adv46Generate(t, filepath.Join(mod, c.pkg))
			for _, e := range errs {
				if strings.HasPrefix(e, fmt.Sprintf("p.go:%d:", line)) {
					return
				}
			}
			var out []byte
			if errs == nil {
				cmd := exec.Command("go", "build", "-o", os.DevNull, "./"+c.pkg)
				cmd.Dir = mod
				out, _ = cmd.CombinedOutput()
			}
			t.Errorf("want the compiler's error at p.go:%d (Charge is not a type), nothing written; leasegen reported %q (go build after it: %s)", line, errs, out)
		})
	}
}
