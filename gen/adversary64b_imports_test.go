package gen_test

// Adversary round 64b (generator): an import of the output named init.

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// Round 63c numbered an import of the output whose name is a predeclared
// identifier (package error → error1). A package may also be named init:
// `package init` is a legal package clause (the spec forbids only the
// blank identifier), and its importers must rename it, since Go refuses
// an import under the name init ("cannot import package as init - init
// must be a func"). importName (gen/typecode.go:23, its taken func) asks
// the import paths, the run's wrapper names, the unseen files, the
// universe and the package scope; init is none of those (func init is not
// in the package scope), so the generated file imports the package
// unrenamed and leasegen exits 0 with a file that does not compile:
//
//	pinit/lease_gen.go:13:2: cannot import package as init - init must be a func
//
// Broken promises: README "Directives": "An import of the output is
// numbered (`time1`) where any of those files declares its name, and
// where its name is a predeclared identifier (a package named `error` is
// imported as `error1`)" — init is the one other name no import may have;
// DESIGN §3 "Generated files ... are gofmt'd and deterministic" with the
// rule TestAdversary46 states: "a run that exits 0 must leave a package
// that compiles".
//
// Fixed when the package is generated with the import numbered (init1)
// and builds and vets, or is refused with file:line:col errors.
func TestAdversary64b_ImportNamedInit(t *testing.T) {
	t.Parallel()
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"init/i.go": "package init\n\ntype T int\n",
		"pinit/p.go": `package pinit

import (
	"context"

	ip "example.com/golden/init"
)

//lease:lock k:{id} deadline=1s
func f(ctx context.Context, id string, x ip.T) (ip.T, error) { return x, nil }
`,
	})
	if errs := adv46Generate(t, filepath.Join(mod, "pinit")); errs != nil {
		pos := regexp.MustCompile(`^[^:\s]+\.go:\d+:\d+: `)
		for _, e := range errs {
			if !pos.MatchString(e) {
				t.Errorf("refusal without file:line:col: %s", e)
			}
		}
		return
	}
	for _, args := range [][]string{{"build", "-o", os.DevNull, "./pinit"}, {"vet", "./pinit"}} {
		cmd := exec.Command("go", args...)
		cmd.Dir = mod
		if out, err := cmd.CombinedOutput(); err != nil {
			b, _ := os.ReadFile(filepath.Join(mod, "pinit", "lease_gen.go"))
			t.Errorf("leasegen exited 0 but go %s fails: %v\n%s\n--- lease_gen.go\n%s", args[0], err, out, b)
		}
	}
}
