package gen_test

// Adversary round 77 (generator): GOFLAGS split as the go command splits
// it, and the leasegen tag in GOFLAGS refused (c98fcc9). The go command
// splits GOFLAGS with quotes (cmd/internal/quoted), and its -tags flag
// takes the Go 1.12 form too: a value with a space or a "'" is split again
// the same way ("-tags='a'" is the tag a; work.tagsFlag.Set: "allow
// -tags='a b c' or even just -tags='a'"). It reads the go env file line by
// line: a line not starting with an upper-case letter is ignored, and a
// later line of the same key wins (cmd/go/internal/cfg.readEnvFile).

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasegen/leasegen/internal/gentest"
)

const adv77TagA = `//go:build a

package tg

import "context"

//lease:lock alpha:{id} deadline=5s
func (j *Jobs) alpha(ctx context.Context, id string) error { return nil }

func UseA(j *Jobs) error { return j.Alpha(context.Background(), "x") }
`

const adv77TagC = `//go:build c

package tg

import "context"

//lease:lock gamma:{id} deadline=5s
func (j *Jobs) gamma(ctx context.Context, id string) error { return nil }

func UseC(j *Jobs) error { return j.Gamma(context.Background(), "x") }
`

// adv77Case sets GOFLAGS (and the go env file, when envFile is not ""),
// asks go list which of ta.go (//go:build a) and tc.go (//go:build c) go
// build compiles with them, and wants leasegen to generate the wrappers of
// exactly those files (README: "the package is read for the current GOOS,
// GOARCH and build tags"), and go build and go vet to pass.
func adv77Case(t *testing.T, goflags, envFile string) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{"tg/a.go": adv76Jobs, "tg/ta.go": adv77TagA, "tg/tc.go": adv77TagC})
	// go.mod completed for the package, so that a GOFLAGS without
	// -mod=mod (an env file line the go command ignores) still builds.
	if out, err := adv75bGo(t, mod, []string{"GOFLAGS=-mod=mod", "GOENV=off"}, "list", "-deps", "-tags=a,c", "./tg"); err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	t.Setenv("GOFLAGS", goflags)
	if envFile != "" {
		p := filepath.Join(t.TempDir(), "env")
		if err := os.WriteFile(p, []byte(envFile), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Setenv("GOENV", p)
	}
	out, err := adv75bGo(t, mod, nil, "list", "-f", "{{join .GoFiles \" \"}}", "./tg")
	if err != nil {
		t.Fatalf("go list with GOFLAGS=%q env file %q: %v\n%s", goflags, envFile, err, out)
	}
	compiled := strings.Fields(out)
	has := func(f string) bool {
		for _, g := range compiled {
			if g == f {
				return true
			}
		}
		return false
	}
	files, errs, _ := adv75bGen(t, filepath.Join(mod, "tg"))
	if errs != nil {
		t.Fatalf("GOFLAGS=%q env file %q: go build compiles %v, but leasegen refused:\n%s", goflags, envFile, compiled, strings.Join(errs, "\n"))
	}
	var src string
	for _, f := range files {
		src += string(f.Data)
	}
	adv75bWrite(t, files)
	if got := strings.Contains(src, "func (j *Jobs) Alpha("); got != has("ta.go") {
		t.Errorf("GOFLAGS=%q env file %q: wrapper Alpha generated %v; go build compiles %v", goflags, envFile, got, compiled)
	}
	if got := strings.Contains(src, "func (j *Jobs) Gamma("); got != has("tc.go") {
		t.Errorf("GOFLAGS=%q env file %q: wrapper Gamma generated %v; go build compiles %v", goflags, envFile, got, compiled)
	}
	adv75bBuildVet(t, mod, nil, "./tg")
}

// Quoted forms the go command accepts: each must give the wrappers go
// build compiles.
func TestAdversary77_GOFLAGSQuotedForms(t *testing.T) {
	base := gentest.Flags
	for _, tc := range []struct{ name, goflags string }{
		{"double-quoted field, spaces inside", base + ` "-tags= a  c "`},
		{"single-quoted field", base + ` '-tags=a c'`},
		{"two quoted fields, last wins", base + ` '-tags=a' "-tags=c"`},
		{"quoted field glued to the next", base + ` "-tags=c"-trimpath`},
		{"tab inside double quotes", base + " \"-tags=a\tc\""},
		{"Go 1.12 form: -tags='a'", base + ` -tags='a'`},
		{"Go 1.12 form: -tags='a' 'c' in a quoted field", base + ` "-tags='a' 'c'"`},
	} {
		t.Run(tc.name, func(t *testing.T) { adv77Case(t, tc.goflags, "") })
	}
}

// GOFLAGS from the go env file (GOFLAGS itself empty), read as the go
// command reads it.
func TestAdversary77_GOFLAGSEnvFileForms(t *testing.T) {
	base := gentest.Flags
	for _, tc := range []struct{ name, file string }{
		{"quoted field", "GOFLAGS=" + base + ` "-tags=a c"` + "\n"},
		{"CRLF", "GOFLAGS=" + base + " -tags=c\r\n"},
		{"Go 1.12 form", "GOFLAGS=" + base + " -tags='a'\n"},
		{"two lines, the later wins", "GOFLAGS=" + base + " -tags=c\nGOFLAGS=" + base + " -tags=a\n"},
		{"indented line, ignored by go", " GOFLAGS=" + base + " -tags=a\n"},
	} {
		t.Run(tc.name, func(t *testing.T) { adv77Case(t, "", tc.file) })
	}
}

// GOFLAGS that set the leasegen tag, in each spelling the go command
// reads as that tag: leasegen refuses with its reason (c98fcc9: "GOFLAGS
// sets the build tag "leasegen" ...; take it out of GOFLAGS"), as go build
// with them leaves the generated file out.
func TestAdversary77_GOFLAGSLeasegenTagSpellings(t *testing.T) {
	base := gentest.Flags
	for _, tc := range []struct{ name, goflags string }{
		{"comma", base + " -tags=a,leasegen"},
		{"space list", base + ` "-tags=a leasegen"`},
		{"quoted whole", base + ` '-tags=leasegen'`},
		{"Go 1.12 form", base + ` -tags='leasegen'`},
		{"Go 1.12 form, two", base + ` "-tags='a' 'leasegen'"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mod := adv46Module(t)
			adv46Write(t, mod, map[string]string{
				"tl/a.go": strings.Replace(adv76Jobs, "package tg", "package tl", 1) + "\nfunc Use(j *Jobs) error { return j.Settle(nil, \"x\") }\n",
			})
			t.Setenv("GOFLAGS", tc.goflags)
			out, _ := adv75bGo(t, mod, nil, "list", "-f", "{{join .GoFiles \" \"}}", "./tl")
			t.Logf("go list: %s", strings.TrimSpace(out))
			_, errs, _ := adv75bGen(t, filepath.Join(mod, "tl"))
			if errs == nil {
				t.Fatalf("GOFLAGS=%q: leasegen generated; go build with it leaves the generated file out", tc.goflags)
			}
			msg := strings.Join(errs, "\n")
			if !strings.Contains(msg, "GOFLAGS") || !strings.Contains(msg, "leasegen") {
				t.Errorf("GOFLAGS=%q: refused without naming the cause (GOFLAGS sets the leasegen tag):\n%s", tc.goflags, msg)
			}
		})
	}
}

// An unterminated quote: the go command refuses GOFLAGS; so must leasegen,
// and it writes nothing.
func TestAdversary77_GOFLAGSUnterminatedQuote(t *testing.T) {
	for _, q := range []string{`'-tags=a`, `"-tags=a c`, `-tags=a "`} {
		t.Run(q, func(t *testing.T) {
			mod := adv46Module(t)
			adv46Write(t, mod, map[string]string{"tg/a.go": adv76Jobs, "tg/ta.go": adv77TagA})
			t.Setenv("GOFLAGS", gentest.Flags+" "+q)
			files, errs, _ := adv75bGen(t, filepath.Join(mod, "tg"))
			if errs == nil {
				t.Fatalf("GOFLAGS=%q (the go command refuses it): leasegen generated %d files", q, len(files))
			}
			t.Logf("refused: %s", strings.Join(errs, " | "))
			if _, err := os.Stat(filepath.Join(mod, "tg", "lease_gen.go")); err == nil {
				t.Errorf("a file was written")
			}
		})
	}
}
