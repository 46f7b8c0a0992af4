package gen_test

// Adversary round 63c (generator): the cgo refusal's position.

import (
	"path/filepath"
	"regexp"
	"testing"
)

// leasegen refuses a package with directives that uses cgo (README
// "Directives": "a package that uses cgo is refused when it has directives
// (by leasegen and leasecheck alike)"). leasecheck reports it at the
// import "C" (a.go:4:8, TestAdversary31b_CheckPackageRefusesCgo), but
// leasegen prints it with no position at all:
//
//	example.com/golden/cgo uses cgo (a.go): leasegen reads packages without cgo
//
// Broken promise: DESIGN §3 "Generate-time errors look like the
// compiler's: `orders.go:12:4: lease: ...`. All errors are collected and
// printed sorted" (and STYLE 6: "Errors are `file:line:col: message`,
// all of them ... attach the position at the deepest point that knows
// it"). The loader knows the import spec when it builds the message but
// files it as a packages.Error with Pos "-" (gen/load.go:147).
func TestAdversary63c_CgoRefusalPositioned(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"cgo/a.go": `package cgo

// #include <stdlib.h>
import "C"

func Free() { C.free(nil) }
`,
		"cgo/p.go": `package cgo

import "context"

//lease:lock k:{id} deadline=1s
func f(ctx context.Context, id string) error { return nil }
`,
	})
	errs := adv46Generate(t, filepath.Join(mod, "cgo"))
	if errs == nil {
		t.Fatal("leasegen generated for a package that uses cgo")
	}
	pos := regexp.MustCompile(`^(a|p)\.go:\d+:\d+: .*uses cgo`)
	for _, e := range errs {
		if !pos.MatchString(e) {
			t.Errorf("refusal without file:line:col (want a.go:4:8, where leasecheck reports it): %q", e)
		}
	}
}
