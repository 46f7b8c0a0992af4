// Package gen loads Go packages, checks their //lease: directives against
// the functions they annotate, and returns the generated wrapper files as
// bytes. It never writes files: cmd/leasegen does.
package gen

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/build"
	"go/build/constraint"
	"go/parser"
	"go/scanner"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/tools/go/ast/astutil"
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
	tags := goflagsTags()
	pkgs, deps, err := load(dir, fset, cfg.Patterns, tags)
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
	compiled := false // an error beyond loading: the code itself is broken
	var files []File
	orphaned := map[*packages.Package]bool{}
	for _, p := range pkgs {
		if out := orphanOutput(p, cfg.Output); out != "" {
			orphaned[p] = true
			files = append(files, File{Path: out})
			continue
		}
		hasTypeErrors := false
		for _, e := range p.Errors {
			hasTypeErrors = hasTypeErrors || e.Kind == packages.TypeError
		}
		prevDeferred := false
		for _, e := range p.Errors {
			if e.Kind == packages.ListError && strings.HasPrefix(e.Msg, "# ") && hasTypeErrors {
				continue // the compiler's copy of the type errors below
			}
			if isContinuation(e) && prevDeferred {
				continue // a further line of a set-aside error
			}
			if qual, name, method, typ := missing(e); name != "" {
				deferred = append(deferred, deferredErr{e, p, qual, name, method, typ})
				prevDeferred = true
				continue
			}
			prevDeferred = false
			compiled = compiled || e.Kind != packages.ListError
			el.addPackageError(e)
		}
	}
	if len(el.list) > 0 {
		el.list.Sort()
		return nil, &CompileError{List: el.list, Load: !compiled}
	}
	own := map[string]map[string]bool{}      // package path -> names its directives generate
	ownTypes := map[string]map[string]bool{} // and of those, the types
	ownPtr := map[string]map[string]bool{}   // and the methods with a pointer receiver
	for _, p := range pkgs {
		if cfg.Logf != nil {
			cfg.Logf("leasegen: %s", p.PkgPath)
		}
		if orphaned[p] || p.Types == nil || len(p.GoFiles) == 0 && len(p.IgnoredFiles) == 0 {
			if !orphaned[p] && len(p.GoFiles) == 0 && len(p.IgnoredFiles) == 0 && p.Dir != "" {
				// A directory of tests only: their directives are errors,
				// as next to non-test files
				// (TestAdversary51_TestOnlyDirectorySilent).
				tests, _ := parseTests(fset, p.Dir, p.Name)
				reportTestDirectives(el, tests)
			}
			continue // (no Types: a cgo package without directives, see load)
		}
		g := newPkgGen(p, fset, el)
		g.tests, g.internalTests = parseTests(fset, filepath.Dir(firstFile(p)), p.Name)
		g.others = parseOthers(fset, filepath.Dir(firstFile(p)), p.Name, func(path string) bool {
			return slices.Contains(p.GoFiles, path) || slices.Contains(p.CompiledGoFiles, path)
		})
		g.unseenNames = declNames(append(slices.Clip(g.internalTests), g.others...))
		m := g.build()
		own[p.PkgPath] = map[string]bool{}
		for n := range g.names {
			own[p.PkgPath][n] = true // Name, or Recv.Name for a method
		}
		ownTypes[p.PkgPath], ownPtr[p.PkgPath] = g.typeNames, g.ptrMethods
		out := filepath.Join(filepath.Dir(firstFile(p)), cfg.Output)
		if other := otherOutput(p, out, tags); other != "" {
			el.add(token.NoPos, fmt.Sprintf("%s was generated by leasegen and declares the same wrappers as %s: remove it (was -o changed?)", ShortPath(base, other), filepath.Base(out)))
			continue
		}
		if len(m.Wrappers) == 0 && len(m.Decorators) == 0 {
			// Nothing to write: a file of that name is removed if it is
			// leasegen's, and left alone (another tool's) if not.
			if isGenerated(out) {
				files = append(files, File{Path: out})
			}
			continue
		}
		if err := checkOutput(p, out, base); err != nil {
			el.add(token.NoPos, err.Error())
			continue
		}
		if len(el.list) > 0 {
			continue
		}
		data, err := templates.Render(m)
		if err != nil {
			return nil, fmt.Errorf("leasegen: %s: render: %w", p.PkgPath, err)
		}
		if g.shadowedPredeclared(m) {
			continue
		}
		files = append(files, File{Path: out, Data: data})
	}
	var unresolved errList = errList{dir: base, fset: fset}
	if len(deferred) > 0 {
		// Calls into an imported package's wrappers: its generated file is
		// left out as this package's is (-tags leasegen), so that a stale
		// one never blocks regeneration.
		depNames := map[string]map[string]bool{}
		for path, names := range depWrapperNames(deps) {
			depNames[path] = map[string]bool{}
			for _, n := range names {
				depNames[path][n] = true
			}
		}
		for _, d := range deferred {
			if !d.forgiven(own, ownTypes, ownPtr, depNames, deps) {
				unresolved.addPackageError(d.err)
			}
		}
	}
	if len(unresolved.list) > 0 && len(el.list) == 0 {
		unresolved.list.Sort()
		return nil, &CompileError{List: unresolved.list}
	}
	if len(el.list) > 0 {
		el.list.Sort()
		return nil, el.list
	}
	for _, out := range orphansBelow(dir, cfg.Patterns, cfg.Output) {
		if !slices.ContainsFunc(files, func(f File) bool { return f.Path == out }) {
			files = append(files, File{Path: out})
		}
	}
	return files, nil
}

// noGoFiles starts go list's error for a directory that the build
// constraints (here -tags leasegen) leave without Go files.
const noGoFiles = "build constraints exclude all Go files in "

// orphanOutput returns p's output file when it is all that is left of p:
// the package's source files were removed (moved to another package),
// and leasegen's outputs, which -tags leasegen leaves out, are its only
// Go files. The package has no directives left, so the file is to
// be removed: alone, it does not compile. "" otherwise.
func orphanOutput(p *packages.Package, output string) string {
	if len(p.Errors) != 1 || !strings.HasPrefix(p.Errors[0].Msg, noGoFiles) {
		return ""
	}
	for _, f := range p.IgnoredFiles {
		if filepath.Base(f) == output && onlyOutputs(filepath.Dir(f)) {
			return f
		}
	}
	return ""
}

// onlyOutputs reports whether every Go file of dir other than its tests,
// whatever its build constraints, is one leasegen generated: the sources
// are gone, not merely for another platform or tag (generating there
// would write the output back).
func onlyOutputs(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	found := false
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		if !isGenerated(filepath.Join(dir, name)) {
			return false
		}
		found = true
	}
	return found
}

// orphansBelow finds such outputs (see orphanOutput) in the directories a
// "dir/..." pattern reaches: go list passes over a directory without Go
// files, so a named one reports it but "./..." does not. Directories are
// walked as go list walks them: not those starting with "." or "_",
// testdata, vendor, or another module's.
func orphansBelow(dir string, patterns []string, output string) []string {
	var out []string
	for _, p := range patterns {
		root, ok := strings.CutSuffix(p, "/...")
		if !ok || strings.Contains(root, "...") {
			continue
		}
		if dirs, ok := patternDirs(dir, []string{root}); ok {
			root = dirs[0]
		} else {
			continue // an import path pattern
		}
		filepath.WalkDir(root, func(path string, e os.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return nil
			}
			if path != root {
				name := e.Name()
				if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			f := filepath.Join(path, output)
			if isGenerated(f) && onlyOutputs(path) && !slices.Contains(out, f) {
				out = append(out, f)
			}
			return nil
		})
	}
	return out
}

// depWrapperNames returns the names of the wrappers and decorator
// constructors that the directives of the imported packages (outside the
// standard library) generate, read from their files' comments: the
// exported names other packages can call. A name that would be an error
// there (an exported target without name=) is left out.
func depWrapperNames(deps map[string]*packages.Package) map[string][]string {
	names := map[string][]string{}
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
			names[d.PkgPath] = append(names[d.PkgPath], wrapperNames(f)...)
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
				name := ""
				switch {
				case d.Name != directive.Lock && d.Name != directive.Leader:
				case d.WrapperName.Set():
					name = d.WrapperName.V
				case d.Name == directive.Leader:
					name = exportName(decl.Name.Name) + leaderSuffix
				case !token.IsExported(decl.Name.Name):
					name = exportName(decl.Name.Name)
				}
				if name == "" {
					continue
				}
				names = append(names, name)
				if decl.Recv != nil && len(decl.Recv.List) > 0 {
					recv := recvBase(decl.Recv.List[0].Type)
					if recv != "" {
						names = append(names, recv+"."+name) // as own's: a method's receiver
					}
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

// parseTests parses the _test.go files in dir: those that mention
// "lease:" in any case (the rest cannot hold a directive), for their
// comments, returned in tests; and the internal ones (package pkgName, not
// pkgName_test) that go test builds, for this platform or another,
// returned in internal, for their top-level declarations and imports,
// which share the package block with the wrappers (see testClash). Files
// no build compiles (see goSources) are passed over, and files that do not
// parse are skipped: compiling tests is go test's job.
func parseTests(fset *token.FileSet, dir, pkgName string) (tests, internal []*ast.File) {
	for _, name := range goSources(dir) {
		if !isTestFile(name) {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		directives := bytes.Contains(bytes.ToLower(src), []byte("lease:"))
		isInternal := false
		if f, _ := parser.ParseFile(token.NewFileSet(), name, src, parser.PackageClauseOnly|parser.ParseComments); f != nil {
			if neverBuilt(f) {
				continue // no build takes it: neither its directives nor its names matter
			}
			isInternal = f.Name.Name == pkgName
		}
		if !directives && !isInternal {
			continue
		}
		f, _ := parser.ParseFile(fset, name, src, parser.ParseComments|parser.SkipObjectResolution)
		if f == nil {
			continue
		}
		if directives {
			tests = append(tests, f)
		}
		if isInternal {
			internal = append(internal, f)
		}
	}
	return tests, internal
}

// parseOthers parses the package's non-test files in dir that the caller
// did not type-check (seen reports those it did): files for another
// platform, or for build tags (leasegen's own -tags leasegen included).
// The generated file has no build constraint, so the build that takes
// such a file compiles it with the wrappers, and a clash with its
// declarations or imports breaks that build only (see testClash). Files
// of another package, files no build compiles (see goSources),
// leasegen's own outputs and files that do not parse are skipped.
func parseOthers(fset *token.FileSet, dir, pkgName string, seen func(path string) bool) []*ast.File {
	var out []*ast.File
	for _, name := range goSources(dir) {
		if isTestFile(name) || seen(name) {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil || bytes.HasPrefix(src, []byte("// "+templates.Header)) {
			continue
		}
		if f, _ := parser.ParseFile(token.NewFileSet(), name, src, parser.PackageClauseOnly|parser.ParseComments); f == nil || f.Name.Name != pkgName || neverBuilt(f) {
			continue
		}
		if f, _ := parser.ParseFile(fset, name, src, parser.SkipObjectResolution); f != nil {
			out = append(out, f)
		}
	}
	return out
}

// goSources lists the .go files in dir that a build may take: not those
// whose names start with "_" or "." (go build passes over them whatever
// their content). Read with os.ReadDir: dir may hold glob metacharacters.
func goSources(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasPrefix(n, "_") || strings.HasPrefix(n, ".") {
			continue
		}
		out = append(out, filepath.Join(dir, n))
	}
	return out
}

// neverBuilt reports whether f's //go:build line needs the "ignore" tag
// (the convention for a file no build takes, such as a //go:build ignore
// program run with go run): no assignment of its other tags satisfies it
// without. A constraint with more than 12 tags is taken as buildable.
func neverBuilt(f *ast.File) bool { return needsTag(f, "ignore") }

// needsTag reports whether f's build constraint needs tag: no assignment
// of its other tags satisfies it without. A constraint with more than 12
// tags is taken as not needing it.
func needsTag(f *ast.File, tag0 string) bool {
	var expr, plus constraint.Expr
	for _, cg := range f.Comments {
		if cg.Pos() >= f.Package {
			break
		}
		for _, c := range cg.List {
			// //go:build, or (without one) the // +build lines it
			// replaced, which the go command still honours.
			switch {
			case constraint.IsGoBuild(c.Text):
				expr, _ = constraint.Parse(c.Text)
				plus = nil
			case constraint.IsPlusBuild(c.Text) && (expr == nil || plus != nil):
				if x, err := constraint.Parse(c.Text); err == nil {
					if plus == nil {
						plus = x
					} else {
						plus = &constraint.AndExpr{X: plus, Y: x}
					}
					expr = plus
				}
			}
		}
	}
	if expr == nil {
		return false
	}
	var tags []string
	expr.Eval(func(tag string) bool {
		if tag != tag0 && !slices.Contains(tags, tag) {
			tags = append(tags, tag)
		}
		return false
	})
	if len(tags) > 12 {
		return false
	}
	for bits := range 1 << len(tags) {
		if expr.Eval(func(tag string) bool {
			i := slices.Index(tags, tag)
			return i >= 0 && bits&(1<<i) != 0
		}) {
			return false
		}
	}
	return true
}

// CompileError is Generate's error when the packages do not compile, or
// cannot be loaded at all (a pattern that names no package, a missing
// module): leasegen refuses to generate from broken code. Its text lists
// every error, one per line, as go build prints them.
type CompileError struct {
	List scanner.ErrorList // sorted
	Load bool              // every error is go list's: no package's code was read
}

func (e *CompileError) Error() string {
	var b strings.Builder
	if e.Load {
		b.WriteString("leasegen: cannot load the packages:")
	} else {
		b.WriteString("leasegen: the packages do not compile; fix these first:")
	}
	for _, x := range e.List {
		b.WriteString("\n" + x.Error())
	}
	return b.String()
}

// Unwrap returns the list, so that errors.As finds it.
func (e *CompileError) Unwrap() error { return e.List }

type deferredErr struct {
	err    packages.Error
	pkg    *packages.Package
	qual   string // the import name of undefined: qual.Name
	name   string
	method bool   // has no field or method Name, or missing method Name
	typ    string // for a method: the type that lacks it, as the message writes it
}

// forgiven reports whether the package d's name refers to generates it:
// for undefined: Name, the package's own directives (own, by package
// path, holding Name and Recv.Name) or those of a package the file
// dot-imports; for undefined: q.Name, those of the package the file
// imports as q (depNames, by path, or own when it is generated in this
// run). A name in a type's place is forgiven only as a type this run
// generates (ownTypes: a decorator's struct): a wrapper is a function,
// and the code is broken with or without it
// (TestAdversary64b_ForgivenUndefinedAsTypeOutsideSignature). A missing
// method is forgiven where the run generates it for the type that lacks
// it, or for a type that type embeds, in its method set (a pointer
// receiver's method is not a value's: ownPtr)
// (TestAdversary64b_MissingMethodOtherReceiver); where the type cannot
// be named (a struct literal's type), by the method's name, as any
// wrapper method of the package or of the file's imports.
func (d deferredErr) forgiven(own, ownTypes, ownPtr, depNames map[string]map[string]bool, deps map[string]*packages.Package) bool {
	pos, file := d.position()
	if d.method {
		if n, ptr, ok := d.namedType(pos); ok {
			return n != nil && hasWrapperMethod(n, d.name, ptr, own, ownPtr, depNames, 0)
		}
		for n := range own[d.pkg.PkgPath] {
			if n[strings.LastIndex(n, ".")+1:] == d.name {
				return true
			}
		}
	} else if file != nil && typePosition(d.pkg.TypesInfo, pathTo(file, pos)) {
		return d.qual == "" && ownTypes[d.pkg.PkgPath][d.name]
	}
	gen := func(path string) bool { return depNames[path][d.name] || own[path][d.name] }
	if !d.method && d.qual == "" && own[d.pkg.PkgPath][d.name] {
		return true
	}
	name, _, _ := strings.Cut(d.err.Pos, ":")
	for _, f := range d.pkg.Syntax {
		if d.pkg.Fset.Position(f.Pos()).Filename != name {
			continue
		}
		for _, spec := range f.Imports {
			path, _ := strconv.Unquote(spec.Path.Value)
			local := ""
			switch {
			case spec.Name != nil:
				local = spec.Name.Name
			case deps[path] != nil:
				local = deps[path].Name
			}
			switch {
			case d.method, d.qual == "" && local == ".", d.qual != "" && local == d.qual:
				if gen(path) {
					return true
				}
			}
		}
	}
	return false
}

// position returns the position d's error names, and its file; NoPos
// and nil where the error's file is not one of the package's (a //line
// directive names another).
func (d deferredErr) position() (token.Pos, *ast.File) {
	name, rest, _ := strings.Cut(d.err.Pos, ":")
	var line, col int
	if l, c, ok := strings.Cut(rest, ":"); ok {
		line, _ = strconv.Atoi(l)
		col, _ = strconv.Atoi(c)
	}
	for _, f := range d.pkg.Syntax {
		tf := d.pkg.Fset.File(f.Pos())
		if tf == nil || tf.Name() != name {
			continue
		}
		if line < 1 || line > tf.LineCount() || col < 1 {
			return token.NoPos, nil
		}
		return tf.LineStart(line) + token.Pos(col-1), f
	}
	return token.NoPos, nil
}

// pathTo is the path of nodes from f down to the one at pos.
func pathTo(f *ast.File, pos token.Pos) []ast.Node {
	path, _ := astutil.PathEnclosingInterval(f, pos, pos)
	return path
}

// namedType resolves the type a missing-method error names ("*Other",
// "dep.Other", "*\"example.com/a/dep\".Other", "Box[int]", a type
// declared in a function) where the error is (pos), and whether it is a
// pointer to it. ok is false where the text names no type (a struct
// literal's); n is nil where a name does not resolve, or a pointer to a
// pointer (which has no methods).
func (d deferredErr) namedType(pos token.Pos) (n *types.Named, ptr, ok bool) {
	if d.pkg.Types == nil {
		return nil, false, false
	}
	text := d.typ
	stars := len(text) - len(strings.TrimLeft(text, "*"))
	text = text[stars:]
	if stars > 1 {
		return nil, false, true
	}
	qual := ""
	if strings.HasPrefix(text, `"`) {
		if i := strings.Index(text[1:], `"`); i >= 0 {
			qual, text = text[1:i+1], strings.TrimPrefix(text[i+2:], ".")
		}
	} else if i := strings.LastIndex(strings.SplitN(text, "[", 2)[0], "."); i >= 0 {
		qual, text = text[:i], text[i+1:]
	}
	text, _, _ = strings.Cut(text, "[")
	if !token.IsIdentifier(text) {
		return nil, false, false
	}
	var obj types.Object
	if qual == "" {
		scope := d.pkg.Types.Scope()
		if pos.IsValid() {
			if inner := scope.Innermost(pos); inner != nil {
				scope = inner
			}
		}
		_, obj = scope.LookupParent(text, pos)
	} else if p := findImport(d.pkg.Types, qual); p != nil {
		obj = p.Scope().Lookup(text)
	}
	tn, _ := obj.(*types.TypeName)
	if tn == nil {
		return nil, false, true
	}
	n, _ = types.Unalias(tn.Type()).(*types.Named)
	return n, stars == 1, true
}

// findImport finds the package of path or name qual among pkg's imports,
// theirs, and so on (the type of a value may come from a package the
// file does not import).
func findImport(pkg *types.Package, qual string) *types.Package {
	seen := map[*types.Package]bool{}
	queue := pkg.Imports()
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		if p.Path() == qual || p.Name() == qual {
			return p
		}
		queue = append(queue, p.Imports()...)
	}
	return nil
}

// hasWrapperMethod reports whether the run (own) or an import's
// directives (depNames) generate method m in the method set of n (of *n
// with ptr), directly or through a type n's struct embeds. A method the
// run generates with a pointer receiver (ownPtr) is not a value's; an
// import's is taken by receiver name, or by its own name where the
// receiver is written otherwise (an alias).
func hasWrapperMethod(n *types.Named, m string, ptr bool, own, ownPtr, depNames map[string]map[string]bool, depth int) bool {
	if n.Obj().Pkg() == nil || depth > 8 {
		return false
	}
	path, key := n.Obj().Pkg().Path(), n.Obj().Name()+"."+m
	if own[path][key] {
		return ptr || !ownPtr[path][key]
	}
	if depNames[path][key] || aliasReceiver(n, m, depNames[path]) {
		return true
	}
	st, ok := n.Underlying().(*types.Struct)
	if !ok {
		return false
	}
	for i := range st.NumFields() {
		f := st.Field(i)
		if !f.Embedded() {
			continue
		}
		t, fptr := types.Unalias(f.Type()), false
		if p, ok := t.(*types.Pointer); ok {
			t, fptr = types.Unalias(p.Elem()), true
		}
		if e, ok := t.(*types.Named); ok && hasWrapperMethod(e, m, ptr || fptr, own, ownPtr, depNames, depth+1) {
			return true
		}
	}
	return false
}

// aliasReceiver reports whether names (an import's, Recv.Name as its
// source writes them) hold method m on an alias of n (type S = Service;
// func (s *S) ...): the receiver is written as the alias.
func aliasReceiver(n *types.Named, m string, names map[string]bool) bool {
	for k := range names {
		recv, name, ok := strings.Cut(k, ".")
		if !ok || name != m {
			continue
		}
		if tn, _ := n.Obj().Pkg().Scope().Lookup(recv).(*types.TypeName); tn != nil && tn.IsAlias() && types.Unalias(tn.Type()) == types.Type(n) {
			return true
		}
	}
	return false
}

// typePosition reports whether path[0] (an identifier) is in a type's
// place, judged by its parents: a selector's name, a pointer, a
// parenthesis, an instantiation, a union or ~ take their parent's place.
func typePosition(info *types.Info, path []ast.Node) bool {
	if len(path) == 0 {
		return false
	}
	n := path[0]
	if _, ok := n.(*ast.Ident); !ok {
		return false
	}
	star := false // under a * (a conversion to a pointer type, (*T)(x))
	for i, parent := range path[1:] {
		switch p := parent.(type) {
		case *ast.SelectorExpr:
			if p.Sel != n {
				return false
			}
		case *ast.StarExpr:
			star = true
		case *ast.ParenExpr, *ast.UnaryExpr, *ast.BinaryExpr:
		case *ast.IndexExpr:
			if p.Index == n {
				return true // a type argument (an index of a function is nothing else)
			}
		case *ast.IndexListExpr:
			if p.X != n {
				return true // a type argument
			}
		case *ast.CaseClause:
			// A type switch's case lists types.
			if i+3 < len(path) {
				if _, ok := path[i+3].(*ast.TypeSwitchStmt); ok {
					return true
				}
			}
			return false
		case *ast.Field:
			return p.Type == n
		case *ast.ValueSpec:
			return p.Type == n
		case *ast.TypeSpec:
			return p.Type == n
		case *ast.ArrayType:
			return p.Elt == n
		case *ast.CompositeLit:
			return p.Type == n
		case *ast.TypeAssertExpr:
			return p.Type == n
		case *ast.MapType, *ast.ChanType, *ast.Ellipsis:
			return true
		case *ast.CallExpr:
			if p.Fun == n {
				return star // (*T)(x) converts; f(x) calls
			}
			id, ok := p.Fun.(*ast.Ident)
			if !ok || len(p.Args) == 0 || p.Args[0] != n || id.Name != "new" && id.Name != "make" {
				return false
			}
			_, builtin := info.Uses[id].(*types.Builtin)
			return builtin
		default:
			return false
		}
		n = parent
	}
	return false
}

// A type that lacks a wrapper as a method (missing method X) does not
// implement an interface the wrapper satisfies: a service registered
// with its wrappers (TestAdversary63c_WrapperSatisfiesInterface).
//
// An identifier is spelled as Go spells one, Unicode letters and digits
// included (\w and \b are ASCII only): leasegen generates wrappers named
// Éclair or ZahlungÜbernehmen, and a call to one must be forgiven, a call
// to ZahlungÜberweisen not taken for one to Zahlung
// (TestAdversary75b_NonASCIIWrapperCalls).
var (
	undefinedRE     = regexp.MustCompile(`^undefined: (?:(` + identPat + `)\.)?(` + identPat + `)$`)
	noMethodRE      = regexp.MustCompile(`\(type (.+) has no field or method (` + identPat + `)(?:[^\p{L}\p{Nd}_]|$)`)
	missingMethodRE = regexp.MustCompile(`(\S+) does not (?:implement|satisfy) .*\(missing method (` + identPat + `)\)`)
)

// identPat matches a Go identifier.
const identPat = `[\p{L}_][\p{L}\p{Nd}_]*`

// missing returns the undefined identifier a type error complains about
// (with the import name it is qualified by), or the method it says a
// type lacks (with that type as the message writes it), or "".
func missing(e packages.Error) (qual, name string, method bool, typ string) {
	if e.Kind != packages.TypeError {
		return "", "", false, ""
	}
	if m := undefinedRE.FindStringSubmatch(e.Msg); m != nil {
		return m[1], m[2], false, ""
	}
	if m := noMethodRE.FindStringSubmatch(e.Msg); m != nil {
		return "", m[2], true, m[1]
	}
	if m := missingMethodRE.FindStringSubmatch(e.Msg); m != nil {
		// "T (type *dep.Service) does not satisfy ..." for a type argument.
		return "", m[2], true, strings.TrimSuffix(m[1], ")")
	}
	return "", "", false, ""
}

// undefinedName returns the undefined identifier a type-checker error
// complains about, or "".
func undefinedName(te types.Error) string {
	_, name, _, _ := missing(packages.Error{Msg: te.Msg, Kind: packages.TypeError})
	return name
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

// otherOutput returns a file of p other than out that leasegen generated
// (with -o under another name) and that go build compiles, or "". Its
// //go:build !leasegen puts it among the files the load ignored; a copy
// the build never compiles (//go:build ignore) declares nothing.
func otherOutput(p *packages.Package, out string, tags []string) string {
	ctx := buildContext(tags, false)
	for _, f := range p.IgnoredFiles {
		if f == out || !strings.HasSuffix(f, ".go") || strings.HasSuffix(f, "_test.go") || !isGenerated(f) {
			continue
		}
		if ok, err := ctx.MatchFile(filepath.Dir(f), filepath.Base(f)); err == nil && ok {
			return f
		}
	}
	return ""
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
	seen  map[Problem]bool // a problem found twice (defaults inherited by many directives) is reported once
}

// warn records a warning; its message gets the "warning: " prefix
// compilers use.
func (l *errList) warn(pos token.Pos, msg string) {
	l.warns = append(l.warns, &scanner.Error{Pos: l.position(pos), Msg: "warning: " + msg})
}

func (l *errList) add(pos token.Pos, msg string) {
	if pos.IsValid() {
		if l.seen == nil {
			l.seen = map[Problem]bool{}
		}
		p := Problem{Pos: pos, Msg: msg}
		if l.seen[p] {
			return
		}
		l.seen[p] = true
	}
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

// isContinuation reports that e is a further line of the type error
// before it.
func isContinuation(e packages.Error) bool {
	return e.Kind == packages.TypeError && strings.HasPrefix(e.Msg, "\t")
}

func (l *errList) addPackageError(e packages.Error) {
	pos := token.Position{}
	msg := e.Msg
	// go/types reports the further lines of an error ("\tother
	// declaration of x") as errors of their own, right after it: print
	// them under it, as go build does, not sorted apart.
	cont := isContinuation(e) && len(l.list) > 0
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
	if cont {
		last := l.list[len(l.list)-1]
		last.Msg += "\n\t" + pos.String() + ": " + msg[1:]
		return
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
