package gen_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/format"
	"go/scanner"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/tools/txtar"

	"github.com/leasegen/leasegen/gen"
	"github.com/leasegen/leasegen/internal/gentest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata from the current output")

// The slow tests, each generating and building modules of its own with
// the go command, run in parallel (gentest.Main).
func TestMain(m *testing.M) { os.Exit(gentest.Main(m)) }

// Each testdata/*.txtar holds an input package (files at the top level)
// and either "want/lease_gen.go" (the wanted output) or "want.errors" (the
// wanted diagnostics, one per line), and "want.warnings" when generation
// warns (a case without it must not warn). All outputs are then built and
// vetted together in one module.
func TestGolden(t *testing.T) {
	t.Parallel()
	cases, _ := filepath.Glob("testdata/*.txtar")
	if len(cases) < 25 {
		t.Fatalf("found %d golden cases, want at least 25", len(cases))
	}
	// The temporary module may need go.mod updates (see gentest.Env).
	gentest.Env(t)
	mod := t.TempDir()
	gentest.WriteModule(t, mod)
	var (
		mu    sync.Mutex
		built []string
	)
	// The cases generate in parallel (each in its own directory; the
	// generator shares nothing between calls); the builds wait for all.
	t.Run("cases", func(t *testing.T) {
		for _, path := range cases {
			name := strings.TrimSuffix(filepath.Base(path), ".txtar")
			ar, err := txtar.ParseFile(path)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(mod, name)
			os.MkdirAll(dir, 0o755)
			var wantOut, wantErrs, wantWarns *txtar.File
			for i := range ar.Files {
				f := &ar.Files[i]
				switch f.Name {
				case "want/lease_gen.go":
					wantOut = f
				case "want.errors":
					wantErrs = f
				case "want.warnings":
					wantWarns = f
				default:
					p := filepath.Join(dir, f.Name)
					os.MkdirAll(filepath.Dir(p), 0o755)
					if err := os.WriteFile(p, f.Data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			if (wantOut == nil) == (wantErrs == nil) && !*update {
				t.Errorf("%s: need exactly one of want/lease_gen.go and want.errors", name)
				continue
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				var warns bytes.Buffer
				files, err := gen.Generate(gen.Config{Dir: dir, Warn: func(w scanner.Error) { fmt.Fprintln(&warns, w.Error()) }})
				var got []byte
				isErr := err != nil
				if isErr {
					var list scanner.ErrorList
					if errors.As(err, &list) {
						var b bytes.Buffer
						for _, e := range list {
							fmt.Fprintln(&b, e)
						}
						got = b.Bytes()
					} else {
						got = []byte(strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "") + "\n")
					}
				} else {
					for _, f := range files {
						if f.Data != nil {
							if formatted, err := format.Source(f.Data); err != nil || !bytes.Equal(formatted, f.Data) {
								t.Errorf("%s is not gofmt'd (%v)", f.Path, err)
							}
						}
						got = append(got, f.Data...)
						if f.Data != nil {
							if err := os.WriteFile(f.Path, f.Data, 0o644); err != nil {
								t.Fatal(err)
							}
							mu.Lock()
							built = append(built, "./"+name)
							mu.Unlock()
						}
					}
				}
				if *update {
					var keep []txtar.File
					for _, f := range ar.Files {
						if f.Name != "want/lease_gen.go" && f.Name != "want.errors" && f.Name != "want.warnings" {
							keep = append(keep, f)
						}
					}
					wantName := "want/lease_gen.go"
					if isErr {
						wantName = "want.errors"
					}
					ar.Files = append(keep, txtar.File{Name: wantName, Data: got})
					if warns.Len() > 0 {
						ar.Files = append(ar.Files, txtar.File{Name: "want.warnings", Data: warns.Bytes()})
					}
					if err := os.WriteFile(path, txtar.Format(ar), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				switch {
				case wantWarns == nil && warns.Len() > 0:
					t.Errorf("unexpected warnings:\n%s", warns.Bytes())
				case wantWarns != nil && !bytes.Equal(warns.Bytes(), wantWarns.Data):
					t.Errorf("warnings differ\n--- got\n%s--- want\n%s", warns.Bytes(), wantWarns.Data)
				}
				switch {
				case wantErrs != nil && !isErr:
					t.Fatalf("generated without errors; want:\n%s", wantErrs.Data)
				case wantOut != nil && isErr:
					t.Fatalf("unexpected errors:\n%s", got)
				case wantErrs != nil && !bytes.Equal(got, wantErrs.Data):
					t.Fatalf("errors differ\n--- got\n%s--- want\n%s", got, wantErrs.Data)
				case wantOut != nil && !bytes.Equal(got, wantOut.Data):
					t.Fatalf("output differs (run go test ./gen -update to accept)\n--- got\n%s--- want\n%s", got, wantOut.Data)
				}
			})
		}
	})
	if t.Failed() || len(built) == 0 {
		return
	}
	// Every golden output compiles and vets with its package.
	for _, tool := range [][]string{{"build"}, {"vet"}} {
		cmd := exec.Command("go", append(tool, built...)...)
		cmd.Dir = mod
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s of the golden outputs: %v\n%s", tool[0], err, out)
		}
	}
}
