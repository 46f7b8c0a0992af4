// Package gen loads Go packages, checks their //lease: directives against
// the functions they annotate, and returns the generated wrapper files as
// bytes. It never writes files: cmd/leasegen does.
package gen

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/scanner"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"

	"github.com/leasegen/leasegen/gen/directive"
	"github.com/leasegen/leasegen/templates"
)

// Config says what to generate.
type Config struct {
	Dir      string   // working directory; "" means the current one
	Patterns []string // package patterns; none means "."
	Output   string   // generated file name in each package; "" means lease_gen.go
	// Logf, when set, receives progress lines (-v).
	Logf func(format string, args ...any)
	// PathBase is the directory that printed paths are relative to when
	// below it; "" means Dir. (cmd/leasegen sets the module root when run
	// by go generate, which starts it in the package's directory.)
	PathBase string
	// Warn, when set, receives each warning (a problem that does not stop
	// generation, such as a wait that can never be used in full), sorted,
	// positioned like errors, whether or not there are errors.
	Warn func(scanner.Error)
}

// File is one generated file.
type File struct {
	Path string // absolute
	// Data is the complete new content; nil means the package has no
	// directives left and a previously generated file should be removed.
	Data []byte
}

// BuildTag is set while loading, so that generated files (which carry
// //go:build !leasegen) never take part in their own regeneration.
const BuildTag = "leasegen"

// Generate loads the packages and returns the files to write. Problems in
// the code or the directives are returned as a scanner.ErrorList, sorted,
// with paths relative to PathBase (the working directory); then no file is
// returned, so an existing generated file is never removed or changed
// because of a directive leasegen could not read. Warnings go to cfg.Warn.
func Generate(cfg Config) ([]File, error) {
	if cfg.Output == "" {
		cfg.Output = "lease_gen.go"
	}
	if len(cfg.Patterns) == 0 {
		cfg.Patterns = []string{"."}
	}
	dir := cfg.Dir
	if dir == "" {
		dir, _ = os.Getwd()
	}
	dir, _ = filepath.Abs(dir)
	fset := token.NewFileSet()
	pkgs, deps, err := load(dir, fset, cfg.Patterns)
	if err != nil {
		return nil, fmt.Errorf("leasegen: load: %w", err)
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("leasegen: no packages match %s (in %s)", strings.Join(cfg.Patterns, " "), dir)
	}
	base := cfg.PathBase
	if base == "" {
		base = dir
	}
	el := &errList{dir: base, fset: fset}
	defer func() {
		if cfg.Warn != nil {
			el.warns.Sort()
			for _, w := range el.warns {
				cfg.Warn(*w)
			}
		}
	}()
	// Loading without the generated files, calls to the wrappers do not
	// resolve. Those errors are set aside and forgiven only if this run
	// generates the missing names; any other error stops generation.
	var deferred []deferredErr
	for _, p := range pkgs {
		hasTypeErrors := false
		for _, e := range p.Errors {
			hasTypeErrors = hasTypeErrors || e.Kind == packages.TypeError
		}
		for _, e := range p.Errors {
			if e.Kind == packages.ListError && strings.HasPrefix(e.Msg, "# ") && hasTypeErrors {
				continue // the compiler's copy of the type errors below
			}
			if name := missingName(e); name != "" {
				deferred = append(deferred, deferredErr{e, name})
				continue
			}
			el.addPackageError(e)
		}
	}
	if len(el.list) > 0 {
		el.list.Sort()
		return nil, &CompileError{el.list}
	}
	var files []File
	var allNames []string
	for _, p := range pkgs {
		if cfg.Logf != nil {
			cfg.Logf("leasegen: %s", p.PkgPath)
		}
		if len(p.GoFiles) == 0 && len(p.IgnoredFiles) == 0 {
			continue
		}
		g := newPkgGen(p, fset, el)
		g.tests = parseTests(fset, filepath.Dir(firstFile(p)))
		m := g.build()
		for n := range g.names {
			allNames = append(allNames, n[strings.LastIndex(n, ".")+1:])
		}
		out := filepath.Join(filepath.Dir(firstFile(p)), cfg.Output)
		if err := checkOutput(p, out, base); err != nil {
			el.add(token.NoPos, err.Error())
			continue
		}
		if len(m.Wrappers) == 0 && len(m.Decorators) == 0 {
			if isGenerated(out) {
				files = append(files, File{Path: out})
			}
			continue
		}
		if len(el.list) > 0 {
			continue
		}
		data, err := templates.Render(m)
		if err != nil {
			return nil, fmt.Errorf("leasegen: %s: render: %w", p.PkgPath, err)
		}
		files = append(files, File{Path: out, Data: data})
	}
	generated := map[string]bool{}
	for _, gn := range allNames {
		generated[gn] = true
	}
	if len(deferred) > 0 {
		// Calls into an imported package's wrappers: its generated file is
		// left out as this package's is (-tags leasegen), so that a stale
		// one never blocks regeneration.
		for _, gn := range depWrapperNames(deps) {
			generated[gn] = true
		}
	}
	var unresolved errList = errList{dir: base, fset: fset}
	for _, d := range deferred {
		if !generated[d.name] {
			unresolved.addPackageError(d.err)
		}
	}
	if len(unresolved.list) > 0 && len(el.list) == 0 {
		unresolved.list.Sort()
		return nil, &CompileError{unresolved.list}
	}
	if len(el.list) > 0 {
		el.list.Sort()
		return nil, el.list
	}
	return files, nil
}

// depWrapperNames returns the names of the wrappers and decorator
// constructors that the directives of the imported packages (outside the
// standard library) generate, read from their files' comments: the
// exported names other packages can call. A name that would be an error
// there (an exported target without name=) is left out.
func depWrapperNames(deps map[string]*packages.Package) []string {
	var names []string
	goroot := filepath.Join(build.Default.GOROOT, "src") + string(filepath.Separator)
	for _, d := range deps {
		if len(d.Errors) > 0 || len(d.GoFiles) == 0 || strings.HasPrefix(d.GoFiles[0], goroot) {
			continue // the standard library has no directives
		}
		for _, name := range d.GoFiles {
			src, err := os.ReadFile(name)
			if err != nil || !bytes.Contains(src, []byte("//lease:")) {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				continue
			}
			names = append(names, wrapperNames(f)...)
		}
	}
	return names
}

// wrapperNames returns the wrapper names f's directives generate, as
// funcWrapper and decorator name them.
func wrapperNames(f *ast.File) []string {
	var names []string
	for _, decl := range f.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			ds, _ := directive.Find(decl.Doc)
			for _, d := range ds {
				switch {
				case d.Name != directive.Lock && d.Name != directive.Leader:
				case d.WrapperName.Set():
					names = append(names, d.WrapperName.V)
				case d.Name == directive.Leader:
					names = append(names, exportName(decl.Name.Name)+leaderSuffix)
				case !token.IsExported(decl.Name.Name):
					names = append(names, exportName(decl.Name.Name))
				}
			}
		case *ast.GenDecl:
			for _, spec := range decl.Specs {
				ts, ok := spec.(*ast.TypeSpec)
				if !ok {
					continue
				}
				it, ok := ts.Type.(*ast.InterfaceType)
				if !ok {
					continue
				}
				for _, m := range it.Methods.List {
					if ds, _ := directive.Find(m.Doc); len(ds) > 0 {
						names = append(names, "NewLeased"+exportName(ts.Name.Name))
						break
					}
				}
			}
		}
	}
	return names
}

// parseTests parses the _test.go files in dir that mention "lease:" in
// any case (the rest cannot hold a directive), for their comments only.
// Files that do not parse are skipped: compiling tests is go test's job.
func parseTests(fset *token.FileSet, dir string) []*ast.File {
	names, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
	var fs []*ast.File
	for _, name := range names {
		src, err := os.ReadFile(name)
		if err != nil || !bytes.Contains(bytes.ToLower(src), []byte("lease:")) {
			continue
		}
		if f, _ := parser.ParseFile(fset, name, src, parser.ParseComments|parser.SkipObjectResolution); f != nil {
			fs = append(fs, f)
		}
	}
	return fs
}

// CompileError is Generate's error when the packages do not compile:
// leasegen refuses to generate from broken code. Its text lists every
// error, one per line, as go build prints them.
type CompileError struct {
	List scanner.ErrorList // sorted
}

func (e *CompileError) Error() string {
	var b strings.Builder
	b.WriteString("leasegen: the packages do not compile; fix these first:")
	for _, x := range e.List {
		b.WriteString("\n" + x.Error())
	}
	return b.String()
}

// Unwrap returns the list, so that errors.As finds it.
func (e *CompileError) Unwrap() error { return e.List }

type deferredErr struct {
	err  packages.Error
	name string
}

var missingRE = regexp.MustCompile(`^(?:undefined: (?:\w+\.)?(\w+)$|.*has no field or method (\w+)\b)`)

// missingName returns the undefined identifier a type error complains
// about, or "".
func missingName(e packages.Error) string {
	if e.Kind != packages.TypeError {
		return ""
	}
	m := missingRE.FindStringSubmatch(e.Msg)
	if m == nil {
		return ""
	}
	return m[1] + m[2]
}

func firstFile(p *packages.Package) string {
	if len(p.GoFiles) > 0 {
		return p.GoFiles[0]
	}
	return p.IgnoredFiles[0]
}

// checkOutput refuses to overwrite a file leasegen did not write.
func checkOutput(p *packages.Package, out, base string) error {
	if _, err := os.Stat(out); err != nil || isGenerated(out) {
		return nil
	}
	return fmt.Errorf("%s exists and was not generated by leasegen; choose another output name with -o", ShortPath(base, out))
}

func isGenerated(path string) bool {
	b, err := os.ReadFile(path)
	return err == nil && bytes.HasPrefix(b, []byte("// "+templates.Header))
}

// ShortPath returns name relative to dir when name is below dir, as go
// build prints paths, and name unchanged otherwise. leasegen and leasecheck
// print every position through it.
func ShortPath(dir, name string) string {
	if dir == "" || !filepath.IsAbs(name) {
		return name
	}
	r, err := filepath.Rel(dir, name)
	if err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return name
	}
	return r
}

// errList collects positioned errors and warnings with paths relative to
// dir.
type errList struct {
	dir   string
	fset  *token.FileSet
	list  scanner.ErrorList
	raw   []Problem // the same problems with their token.Pos, for analyzers
	warns scanner.ErrorList
}

// warn records a warning; its message gets the "warning: " prefix
// compilers use.
func (l *errList) warn(pos token.Pos, msg string) {
	l.warns = append(l.warns, &scanner.Error{Pos: l.position(pos), Msg: "warning: " + msg})
}

func (l *errList) add(pos token.Pos, msg string) {
	l.list = append(l.list, &scanner.Error{Pos: l.position(pos), Msg: msg})
	l.raw = append(l.raw, Problem{Pos: pos, Msg: msg})
}

// position resolves pos with its file name relative to the working
// directory when below it, as go build prints paths.
func (l *errList) position(pos token.Pos) token.Position {
	p := l.fset.Position(pos)
	p.Filename = ShortPath(l.dir, p.Filename)
	return p
}

// where formats pos for a message ("p.go:5:1").
func (l *errList) where(pos token.Pos) string { return l.position(pos).String() }

func (l *errList) addAll(es []directive.Error) {
	for _, e := range es {
		l.add(e.Pos, e.Msg)
	}
}

func (l *errList) addPackageError(e packages.Error) {
	pos := token.Position{}
	msg := e.Msg
	// e.Pos is "file:line:col" (or "file:line", or "-").
	if e.Pos != "" && e.Pos != "-" {
		parts := strings.Split(e.Pos, ":")
		pos.Filename = parts[0]
		if len(parts) > 1 {
			fmt.Sscan(parts[1], &pos.Line)
		}
		if len(parts) > 2 {
			fmt.Sscan(parts[2], &pos.Column)
		}
		pos.Filename = ShortPath(l.dir, pos.Filename)
	}
	l.list = append(l.list, &scanner.Error{Pos: pos, Msg: msg})
}

// sortWrappers orders output by source position, so output is stable.
func sortByPos(fset *token.FileSet, ws []*templates.Wrapper, pos map[*templates.Wrapper]token.Pos) {
	sort.SliceStable(ws, func(i, j int) bool {
		a, b := fset.Position(pos[ws[i]]), fset.Position(pos[ws[j]])
		if a.Filename != b.Filename {
			return a.Filename < b.Filename
		}
		return a.Offset < b.Offset
	})
}
