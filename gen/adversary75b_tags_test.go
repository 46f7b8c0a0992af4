package gen_test

// Adversary round 75b (generator), finding: build tags a service sets in
// GOFLAGS (GOFLAGS=-tags=prod in its CI or `go env -w GOFLAGS=-tags=prod`,
// which go generate passes on to leasegen) are dropped by leasegen's own
// loads: gen/load.go passes BuildFlags -tags=leasegen to both go list
// calls, and a -tags on the command line replaces the one in GOFLAGS
// rather than adding to it. So leasegen reads the package for the build
// without those tags, while go build, go vet and go test read it with
// them:
//
//   - a directive in a `//go:build !prod` file (a development helper) is
//     seen and wrapped; the output ties to the function and calls it, and
//     the prod build, for which leasegen was run, fails:
//     "(*Jobs).devReset undefined". Re-running go generate, as the tie's
//     comment says, writes the same file again;
//   - a directive in a `//go:build prod` file is not seen: no wrapper,
//     exit 0, and a prod caller of the wrapper fails to build;
//   - a package whose every file is `//go:build integration` is refused,
//     with GOFLAGS=-tags=integration set, with go list's "build
//     constraints exclude all Go files in <dir>": no position, and wrong
//     for the build the user asked for.
//
// README: "Limits: the package is read for the current GOOS, GOARCH and
// build tags ... one in a file the current tags exclude is not seen"; with
// GOFLAGS=-tags=prod the current tags are prod's. DESIGN §3: generate-time
// problems are positioned errors; STYLE 5: "a directive that produced
// nothing" is diagnosed, never ignored. Either leasegen reads with the
// GOFLAGS tags plus leasegen, or it refuses with a positioned error; it
// must not exit 0 with an output that the same GOFLAGS cannot build.

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasegen/leasegen/internal/gentest"
)

func TestAdversary75b_GOFLAGSTagsHonoured(t *testing.T) {
	mod := adv46Module(t)
	jobs := `package %s

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type Jobs struct{ leases *lease.Client }

//lease:lock a:{id} deadline=5s
func (j *Jobs) settle(ctx context.Context, id string) error { return nil }
`
	adv46Write(t, mod, map[string]string{
		"devonly/a.go": strings.Replace(jobs, "%s", "devonly", 1),
		"devonly/dev.go": `//go:build !prod

package devonly

import "context"

//lease:lock dev:{id} deadline=5s
func (j *Jobs) devReset(ctx context.Context, id string) error { return nil }
`,
		"prodonly/a.go": strings.Replace(jobs, "%s", "prodonly", 1),
		"prodonly/prod.go": `//go:build prod

package prodonly

import "context"

//lease:lock b:{id} deadline=5s
func (j *Jobs) refund(ctx context.Context, id string) error { return nil }

// Use calls the prod wrapper.
func Use(j *Jobs) error { return j.Refund(context.Background(), "x") }
`,
		"integ/a.go": "//go:build integration\n\n" + strings.Replace(jobs, "%s", "integ", 1),
	})
	for _, c := range []struct{ pkg, tags string }{
		{"devonly", "prod"},
		{"prodonly", "prod"},
		{"integ", "integration"},
	} {
		t.Run(c.pkg, func(t *testing.T) {
			goflags := gentest.Flags + " -tags=" + c.tags
			t.Setenv("GOFLAGS", goflags)
			files, errs, _ := adv75bGen(t, filepath.Join(mod, c.pkg))
			if errs != nil {
				for _, e := range errs {
					if !strings.HasPrefix(e, "a.go:") && !strings.HasPrefix(e, "dev.go:") && !strings.HasPrefix(e, "prod.go:") {
						t.Errorf("GOFLAGS=%q: error without a file:line:col position in the package: %s", goflags, e)
					}
				}
				t.Logf("refused (acceptable when positioned): %s", strings.Join(errs, "\n"))
				return
			}
			adv75bWrite(t, files)
			for _, args := range [][]string{{"build", "./" + c.pkg}, {"vet", "./" + c.pkg}} {
				if out, err := adv75bGo(t, mod, nil, args...); err != nil {
					t.Errorf("GOFLAGS=%q: leasegen exited 0, but go %s with the same GOFLAGS fails: %v\n%s", goflags, args[0], err, out)
				}
			}
		})
	}
}
