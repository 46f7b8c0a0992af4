package docs

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The README's main command, go generate ./..., runs every //go:generate
// line of the module's Go files, test files included, whatever they are in
// (a line of a raw string too): each must run leasegen, as the example's
// does. A test that builds a package's source with the directive at the
// start of a line made that command fail ("leasegen": executable file not
// found) until it was caught (bde18f1).
func TestGoGenerateRunsOnlyLeasegen(t *testing.T) {
	const want = "//go:generate go run github.com/leasegen/leasegen/cmd/leasegen"
	root := filepath.Join("..", "..")
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for line := 1; sc.Scan(); line++ {
			text := strings.TrimSuffix(sc.Text(), "\r")
			if !strings.HasPrefix(text, "//go:generate") {
				continue
			}
			n++
			if text != want && !strings.HasPrefix(text, want+" ") {
				t.Errorf("%s:%d: %q: go generate ./... would run it; only leasegen's line belongs here", path, line, text)
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no //go:generate line found: the walk missed the module")
	}
}
