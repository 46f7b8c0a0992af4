package gen_test

// Adversary round 63c (generator): a forgiven "undefined" in a type.

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// leasegen forgives a type error "undefined: X" when X is a wrapper the
// run generates (a call to a wrapper whose output the -tags leasegen load
// leaves out). It forgives it wherever X is used, in a type position too:
// a leased signature that names a wrapper as a type (a slip: Charge for
// ChargeReq) is type-checked with an invalid parameter type, and leasegen
// exits 0 writing a file that is not even Go:
//
//	var _ func(context.Context, string, invalid type) error = refund
//	fv/lease_gen.go:38:45: syntax error: unexpected keyword type in parameter list
//
// The code is broken with or without the output (Charge is a function),
// so the right answer is the compiler's error at p.go:9, and nothing
// written.
//
// Broken promises: DESIGN §3 "Generated files ... are gofmt'd and
// deterministic" (this one does not parse) and "All errors are collected
// and printed sorted; exit 1; no file is written or changed when any
// error exists"; README "Directives": "calls to wrappers, from the package
// or another, are left to the build" (this is no call); STYLE 2 "refuse
// to generate from broken code". Cause: gen/gen.go forgiven (and
// missingRE) looks only at the message "undefined: Charge", not at where
// the name is used; gen/typecode.go qual.typ then falls back to
// t.String() ("invalid type") for types.Typ[types.Invalid].
func TestAdversary63c_ForgivenUndefinedInType(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"fv/p.go": `package fv

import "context"

//lease:lock a:{id} deadline=1s
func charge(ctx context.Context, id string) error { return nil }

//lease:lock b:{id} deadline=1s
func refund(ctx context.Context, id string, h Charge) error { return nil }
`,
	})
	errs := adv46Generate(t, filepath.Join(mod, "fv"))
	out, _ := os.ReadFile(filepath.Join(mod, "fv", "lease_gen.go"))
	if out != nil {
		if _, err := parser.ParseFile(token.NewFileSet(), "lease_gen.go", out, parser.ParseComments); err != nil {
			t.Errorf("leasegen exited 0 and wrote a file that does not parse: %v", err)
		}
	}
	found := false
	for _, e := range errs {
		found = found || strings.HasPrefix(e, "p.go:9:")
	}
	if !found {
		t.Errorf("want an error at p.go:9 (Charge is not a type); got %q\n--- lease_gen.go\n%s", errs, out)
	}
}
