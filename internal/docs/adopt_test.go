package docs

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/yuin/goldmark/ast"

	"github.com/leasegen/leasegen/internal/gentest"
)

const modulePath = "github.com/leasegen/leasegen"

// step is one instruction of a README recipe: a shell command, or a file
// to write (a Go block whose first line is "// path/name.go").
type step struct {
	line int    // README line of the command or of the block
	cmd  string // shell command; "" for a file
	file string // path of the file to write
	body []byte // the file's content, the whole block
}

func (s step) where() string { return fmt.Sprintf("README.md:%d", s.line) }

var fileComment = regexp.MustCompile(`^// ([\w./-]+\.go)\n`)

// recipe returns the steps of the README section under the level-2 heading
// title, in order: every line of a sh block that is not blank or a comment
// is a command; every go block is a file, named by its first line.
func (m *markdown) recipe(t *testing.T, title string) []step {
	t.Helper()
	var steps []step
	in := false
	for n := m.doc.FirstChild(); n != nil; n = n.NextSibling() {
		if h, ok := n.(*ast.Heading); ok && h.Level == 2 {
			in = string(h.Lines().Value(m.src)) == title
			continue
		}
		fc, ok := n.(*ast.FencedCodeBlock)
		if !in || !ok {
			continue
		}
		body := fc.Lines().Value(m.src)
		start := m.line(fc.Lines().At(0).Start)
		switch lang := string(fc.Language(m.src)); lang {
		case "sh":
			for i, l := range strings.Split(string(body), "\n") {
				if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
					steps = append(steps, step{line: start + i, cmd: l})
				}
			}
		case "go":
			f := fileComment.FindSubmatch(body)
			if f == nil {
				t.Fatalf("README.md:%d: a go block in %q must start with a line // name.go naming its file", start, title)
			}
			steps = append(steps, step{line: start, file: string(f[1]), body: body})
		default:
			t.Fatalf("README.md:%d: a %q block in %q: only sh and go blocks are run", start, lang, title)
		}
	}
	if len(steps) == 0 {
		t.Fatalf("README.md: no section %q with sh or go blocks", title)
	}
	return steps
}

// notPublished is a module proxy that says "not found" for this module
// (as if leasegen had no published version: the replace directive
// supplies it) and forwards every other request, checksum database
// lookups included, to the proxy the environment names.
func notPublished(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOPROXY").Output()
	if err != nil {
		t.Fatalf("go env GOPROXY: %v", err)
	}
	var upstream *url.URL
	for _, p := range strings.FieldsFunc(strings.TrimSpace(string(out)), func(r rune) bool { return r == ',' || r == '|' }) {
		if strings.HasPrefix(p, "http://") || strings.HasPrefix(p, "https://") {
			if upstream, err = url.Parse(p); err != nil {
				t.Fatalf("GOPROXY entry %q: %v", p, err)
			}
			break
		}
	}
	if upstream == nil {
		t.Fatalf("GOPROXY=%s names no proxy URL: the recipe's go get needs one to fetch leasegen's dependencies", out)
	}
	fwd := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(upstream) }}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/"+modulePath+"/") {
			http.Error(w, "not found: "+modulePath+" is supplied by replace", http.StatusNotFound)
			return
		}
		fwd.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// The README's "Adopt it in your service" section works verbatim in a new
// module: its commands run in order in an empty directory, its Go files
// are written as shown, with one addition after "go mod init": a replace
// of leasegen by this checkout. The generated wrapper must build, and each
// leasecheck command must pass on the recipe's code and fail on a planted
// call that bypasses a lease, so a command that silently checks nothing
// (go vet -vettool=$(which leasecheck) without leasecheck on PATH) fails
// the test.
func TestAdoptRecipe(t *testing.T) {
	steps := readme(t).recipe(t, "Adopt it in your service")
	if !strings.HasPrefix(steps[0].cmd, "go mod init ") {
		t.Fatalf("README.md:%d: the recipe must start with go mod init, not %q", steps[0].line, steps[0].cmd)
	}
	dir := t.TempDir()
	env := append(os.Environ(), "GOPROXY="+notPublished(t), "GOWORK=off", "GOFLAGS=")
	// where is "README.md:N" for the recipe's own commands and "test" for
	// the test's.
	run := func(where, cmd string) (string, error) {
		t.Helper()
		c := exec.Command("sh", "-c", cmd)
		c.Dir, c.Env = dir, env
		out, err := c.CombinedOutput()
		t.Logf("%s: %s\n%s", where, cmd, out)
		return string(out), err
	}
	must := func(where, cmd string) {
		t.Helper()
		if out, err := run(where, cmd); err != nil {
			t.Fatalf("%s: %s: %v\n%s", where, cmd, err, out)
		}
	}

	var checks []step // the leasecheck commands
	var pkgDir, pkgName string
	for i, s := range steps {
		if s.file != "" {
			path := filepath.Join(dir, filepath.FromSlash(s.file))
			os.MkdirAll(filepath.Dir(path), 0o755)
			if err := os.WriteFile(path, s.body, 0o644); err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(s.body, []byte("\n//lease:lock ")) {
				pkgDir = filepath.Dir(path)
				pkgName = regexp.MustCompile(`(?m)^package (\w+)`).FindStringSubmatch(string(s.body))[1]
			}
			continue
		}
		must(s.where(), s.cmd)
		if i == 0 {
			must("test", "go mod edit -replace="+modulePath+"="+gentest.RepoRoot())
		}
		if strings.Contains(s.cmd, "leasecheck") && !strings.HasPrefix(s.cmd, "go get ") {
			checks = append(checks, s)
		}
	}
	if pkgDir == "" || len(checks) == 0 {
		t.Fatalf("README.md: the recipe needs a Go file with a //lease:lock directive and a leasecheck command (found %d)", len(checks))
	}

	gen, err := os.ReadFile(filepath.Join(pkgDir, "lease_gen.go"))
	if err != nil || !bytes.HasPrefix(gen, []byte("// Code generated by leasegen. DO NOT EDIT.")) {
		t.Fatalf("the recipe's go generate wrote no lease_gen.go next to the annotated file: %v", err)
	}
	must("test", "go build ./... && go vet ./...")

	// A planted mistake: a protected function called directly.
	planted := "package " + pkgName + `

import "context"

// planted is protected ...
//
//lease:lock planted:{id} deadline=5s
func planted(ctx context.Context, id string) error { return nil }

// ... and this call bypasses its lease.
func bypass(ctx context.Context) error { return planted(ctx, "x") }
`
	if err := os.WriteFile(filepath.Join(pkgDir, "planted.go"), []byte(planted), 0o644); err != nil {
		t.Fatal(err)
	}
	must("test", "go generate ./...")
	for _, s := range checks {
		out, err := run(s.where(), s.cmd)
		if err == nil || !strings.Contains(out, "call to planted bypasses its lease") {
			t.Errorf("%s: %s did not report the planted bypass (err %v):\n%s", s.where(), s.cmd, err, out)
		}
	}
}
