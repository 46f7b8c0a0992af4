package gen_test

// Adversary round 76 (generator): GOFLAGS' build tags merged with
// leasegen's (a1bea2a), and Unicode identifiers in the type errors
// forgiven for wrappers (570602a).

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasegen/leasegen/internal/gentest"
)

const adv76Jobs = `package tg

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type Jobs struct{ leases *lease.Client }

//lease:lock a:{id} deadline=5s
func (j *Jobs) settle(ctx context.Context, id string) error { return nil }
`

// The output must match what go build compiles with the same GOFLAGS:
// a wrapper for the directive of a //go:build a file exactly when a is
// set, and for one of a //go:build !b file exactly when b is not; go
// build and go vet of the package (whose tagged files call the wrappers)
// pass with those GOFLAGS.
func TestAdversary76_GOFLAGSTagForms(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"tg/a.go": adv76Jobs,
		"tg/ta.go": `//go:build a

package tg

import "context"

//lease:lock alpha:{id} deadline=5s
func (j *Jobs) alpha(ctx context.Context, id string) error { return nil }

func UseA(j *Jobs) error { return j.Alpha(context.Background(), "x") }
`,
		"tg/notb.go": `//go:build !b

package tg

import "context"

//lease:lock beta:{id} deadline=5s
func (j *Jobs) beta(ctx context.Context, id string) error { return nil }

func UseB(j *Jobs) error { return j.Beta(context.Background(), "x") }
`,
	})
	cfg := t.TempDir()
	envFile := filepath.Join(t.TempDir(), "goenv")
	// Every form also carries the test binary's -race (when it has it), so
	// that the go commands build the configuration go test built, and the
	// one -trimpath form the vendored module's (TestAdversary75b_VendoredModule):
	// on an empty build cache, without it each of their go commands compiled
	// the standard library and go-redis once more without -race.
	race := gentest.RaceFlag
	for _, tc := range []struct {
		name    string
		goflags string
		env     map[string]string
		a, b    bool   // the tags go build sees
		write   string // the go env file's GOFLAGS line (via go env -w), or ""
		xdg     string // XDG_CONFIG_HOME's go/env content, or ""
	}{
		{name: "several flags", goflags: "-mod=mod -tags=a,b -trimpath" + race, a: true, b: true},
		{name: "double dash", goflags: "-mod=mod --tags=a" + race, a: true},
		{name: "repeated, last wins", goflags: "-mod=mod -tags=b -tags=a" + race, a: true},
		{name: "repeated, last empty", goflags: "-mod=mod -tags=a -tags=" + race, a: false},
		{name: "double dash empty", goflags: "-mod=mod -tags=a,b --tags=" + race, a: false},
		{name: "quoted", goflags: `-mod=mod "-tags=a,b"` + race, a: true, b: true},
		{name: "go env -w (GOENV file)", goflags: "", env: map[string]string{"GOENV": envFile}, write: "-mod=mod -tags=a" + race, a: true},
		{name: "go env -w, env set wins", goflags: "-mod=mod -tags=b" + race, env: map[string]string{"GOENV": envFile}, write: "-mod=mod -tags=a" + race, b: true},
		{name: "user config dir", goflags: "", env: map[string]string{"XDG_CONFIG_HOME": cfg, "GOENV": ""}, xdg: "GOFLAGS=-mod=mod -tags=a,b" + race + "\n", a: true, b: true},
		{name: "GOENV=off", goflags: "-mod=mod" + race, env: map[string]string{"XDG_CONFIG_HOME": cfg, "GOENV": "off"}, xdg: "GOFLAGS=-mod=mod -tags=a,b" + race + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOFLAGS", tc.goflags)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			if tc.write != "" {
				os.Remove(envFile)
				if out, err := adv75bGo(t, mod, []string{"GOFLAGS="}, "env", "-w", "GOFLAGS="+tc.write); err != nil {
					t.Fatalf("go env -w: %v\n%s", err, out)
				}
			}
			if tc.xdg != "" {
				os.MkdirAll(filepath.Join(cfg, "go"), 0o755)
				if err := os.WriteFile(filepath.Join(cfg, "go", "env"), []byte(tc.xdg), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if out, err := adv75bGo(t, mod, nil, "list", "-f", "{{.GoFiles}}", "./tg"); err == nil {
				t.Logf("go list with these GOFLAGS: %s", strings.TrimSpace(out))
			}
			files, errs, _ := adv75bGen(t, filepath.Join(mod, "tg"))
			if errs != nil {
				t.Fatalf("GOFLAGS=%q %v: refused:\n%s", tc.goflags, tc.env, strings.Join(errs, "\n"))
			}
			adv75bWrite(t, files)
			var src string
			for _, f := range files {
				src += string(f.Data)
			}
			if got := strings.Contains(src, "func (j *Jobs) Alpha("); got != tc.a {
				t.Errorf("GOFLAGS=%q %v: wrapper Alpha generated %v; go build compiles ta.go (//go:build a): %v", tc.goflags, tc.env, got, tc.a)
			}
			if got := strings.Contains(src, "func (j *Jobs) Beta("); got != !tc.b {
				t.Errorf("GOFLAGS=%q %v: wrapper Beta generated %v; go build compiles notb.go (//go:build !b): %v", tc.goflags, tc.env, got, !tc.b)
			}
			adv75bBuildVet(t, mod, nil, "./tg")
		})
	}
}

// The user's GOFLAGS names leasegen itself: go build then leaves out the
// generated file (//go:build !leasegen) and the calls to its wrappers do
// not build. leasegen exits 0 only with output that builds with the same
// GOFLAGS; else a refusal that says why.
func TestAdversary76_GOFLAGSWithLeasegenTag(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{
		"tl/a.go": strings.Replace(adv76Jobs, "package tg", "package tl", 1) + "\nfunc Use(j *Jobs) error { return j.Settle(nil, \"x\") }\n",
	})
	t.Setenv("GOFLAGS", gentest.Flags+" -tags=leasegen")
	files, errs, _ := adv75bGen(t, filepath.Join(mod, "tl"))
	if errs != nil {
		t.Logf("refused (acceptable): %s", strings.Join(errs, "\n"))
		return
	}
	adv75bWrite(t, files)
	adv75bBuildVet(t, mod, nil, "./tl")
}
