package gen_test

// Adversary round 63c (generator): imports of the output named like a
// predeclared identifier the wrapper body uses.

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A package may be named like a predeclared identifier (package error,
// package len, package string: legal names, which their importers rename
// or use unrenamed where they do not need the builtin). When a leased
// signature uses a type of such a package, the generated file imports it
// under its own name, which then shadows the builtin in the whole file:
// the wrapper's `error` result, its `len(text)` emptiness check and its
// `string(...)` conversions and `string` parameters stop compiling.
//
//	pe/lease_gen.go:18:49: error (package name) is not a type
//	pl/lease_gen.go:31:5: use of package len not in selector
//	ps/lease_gen.go:18:29: string (package name) is not a type
//
// leasegen exits 0 each time. Broken promises: DESIGN §3 "Key parts ...
// Anything else is a generate-time error" with §3's "Generated files ...
// are gofmt'd and deterministic" (what is generated builds:
// TestAdversary46's "a run that exits 0 must leave a package that
// compiles"), and README "Directives": "An import of the output is
// numbered (`time1`) where any of those files declares its name" — the
// numbering exists for exactly this shadowing, but importName
// (gen/typecode.go:22, its taken func) looks only at the package scope,
// the run's wrapper names and unseen files, never at the universe scope,
// though the body uses predeclared names (the namer reserves them for
// parameters: gen/naming.go newNamer, types.Universe.Names()).
//
// Fixed when each package either generates code that builds and vets (the
// import numbered, e.g. error1) or is refused with file:line:col errors.
func TestAdversary63c_ImportNamedLikePredeclared(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"error/e.go":  "package error\n\ntype Code int\n",
		"len/l.go":    "package len\n\ntype N string\n",
		"string/s.go": "package string\n\ntype S struct{}\n",
		// error: the wrapper's result type and the tie's.
		"pe/p.go": `package pe

import (
	"context"

	ep "example.com/golden/error"
)

//lease:lock k:{id} deadline=1s
func f(ctx context.Context, id string, c ep.Code) error { return nil }
`,
		// len: the emptiness check of a MarshalText part.
		"pl/p.go": `package pl

import (
	"context"

	lp "example.com/golden/len"
)

type T struct{}

func (T) MarshalText() ([]byte, error) { return []byte("t"), nil }

//lease:lock k:{id}:{t} deadline=1s
func f(ctx context.Context, id lp.N, t T) error { return nil }
`,
		// string: a string parameter, and the conversion of a named one.
		"ps/p.go": `package ps

import (
	"context"

	sp "example.com/golden/string"
)

type Name string

//lease:lock k:{id}:{n} deadline=1s
func f(ctx context.Context, id string, n Name, s sp.S) error { return nil }
`,
	})
	pos := regexp.MustCompile(`^[^:\s]+\.go:\d+:\d+: `)
	var built []string
	for _, pkg := range []string{"pe", "pl", "ps"} {
		if errs := adv46Generate(t, filepath.Join(mod, pkg)); errs != nil {
			for _, e := range errs {
				if !pos.MatchString(e) {
					t.Errorf("%s: refusal without file:line:col: %s", pkg, e)
				}
			}
			continue
		}
		built = append(built, "./"+pkg)
	}
	if len(built) == 0 {
		return
	}
	for _, tool := range []string{"build", "vet"} {
		args := append([]string{tool}, built...)
		if tool == "build" {
			args = append([]string{tool, "-o", os.DevNull}, built...)
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = mod
		if out, err := cmd.CombinedOutput(); err != nil {
			var gens []string
			for _, p := range built {
				b, _ := os.ReadFile(filepath.Join(mod, p, "lease_gen.go"))
				gens = append(gens, "--- "+p+"/lease_gen.go\n"+string(b))
			}
			t.Errorf("leasegen exited 0 but go %s fails: %v\n%s\n%s", tool, err, out, strings.Join(gens, "\n"))
		}
	}
}
