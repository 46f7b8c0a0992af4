package gen

import (
	"bufio"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/scanner"
	"go/token"
	"go/types"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/tools/go/gcexportdata"
	"golang.org/x/tools/go/packages"

	"github.com/leasegen/leasegen/gen/directive"
)

// load returns the packages matching patterns, type-checked from source.
//
// It runs two packages.Load calls at once, each one go list, and asks each
// for no more than it needs, because leasegen runs on every go generate and
// is to be no slower than go vet:
//
//   - the matched packages, NeedName|NeedFiles: their files (go list
//     -find). Their syntax and types come from parsing and checking those
//     files here: NeedTypes would make go list compile them to export data
//     that is thrown away, and NeedImports would list every dependency;
//   - the packages they import, NeedName|NeedExportFile: the export data
//     (go list -export), read with gcexportdata into one map, so that types
//     are identical across packages. (NeedTypes would add -deps, listing and
//     decoding every dependency, and a go list for the sizes.)
//
// When every pattern names a directory (".", the go generate case), the
// imports are read from the files themselves, so both loads and the parsing
// of the files run at once. The imports of the files go list chose are
// checked against that guess; anything missed is loaded after. (In module
// mode an import path as written is the package's path, so no ImportMap is
// needed.)
//
// Cost, measured by alternating loads of a 1,000-function package in one
// process (7 runs of 10–20 loads each): 0.95–1.01× the time of the same two
// go list commands run directly (each packages.Load adds a short go list
// for the Go version; the two run at the same time). Two loads in sequence
// (files and imports, then the imports' types) take 1.29–1.46×, and one
// load with NeedTypes|NeedSyntax|NeedTypesInfo 8.6–9.4×: go list then
// compiles the matched package.
//
// The imported packages are returned too (by path, with their files), so
// that calls into their wrappers can be recognised (see depWrapperNames).
//
// tags are the build tags GOFLAGS sets (goflagsTags), read once per run.
func load(dir string, fset *token.FileSet, patterns []string, tags []string) ([]*packages.Package, map[string]*packages.Package, error) {
	if slices.Contains(tags, BuildTag) {
		// go build with it leaves the generated files out (they are
		// //go:build !leasegen), so the calls to wrappers that leasegen
		// forgives would not compile (TestAdversary76_GOFLAGSWithLeasegenTag).
		return nil, nil, fmt.Errorf("GOFLAGS sets the build tag %q, leasegen's own: a build with it leaves the generated files out; take it out of GOFLAGS (go env GOFLAGS)", BuildTag)
	}
	var (
		guess  map[string]bool // imports read from the files, or nil
		parsed sync.Map        // file name -> *parsedFile, parsed ahead
		wg     sync.WaitGroup
	)
	if dirs, ok := patternDirs(dir, patterns); ok {
		guess = map[string]bool{}
		for _, d := range dirs {
			for _, name := range buildFiles(d, tags) {
				wg.Go(func() { parsed.Store(name, parseFile(fset, name)) })
				if f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly); err == nil {
					for _, imp := range f.Imports {
						if p, err := strconv.Unquote(imp.Path.Value); err == nil {
							guess[p] = true
						}
					}
				}
			}
		}
	}
	var (
		deps    map[string]*packages.Package
		depsErr error
		depsWG  sync.WaitGroup
	)
	if len(guess) > 0 {
		depsWG.Go(func() { deps, depsErr = loadExports(dir, slices.Collect(maps.Keys(guess)), tags) })
	}
	roots, err := packages.Load(&packages.Config{
		Mode:       packages.NeedName | packages.NeedFiles,
		Dir:        dir,
		BuildFlags: tagFlags(tags),
	}, patterns...)
	depsWG.Wait()
	wg.Wait()
	if err != nil {
		return nil, nil, err
	}
	if depsErr != nil {
		return nil, nil, depsErr
	}

	// The files go list chose, parsed (most of them already are).
	syntax := map[*packages.Package][]*ast.File{}
	var missed []string                     // imports the guess missed
	cgoOnly := map[*packages.Package]bool{} // cgo packages without directives
	for _, r := range roots {
		r.Fset = fset
		if len(r.Errors) > 0 {
			continue // list errors are reported as they are
		}
		var cgo []string
		cgoPos := "-" // the first import "C", where the refusal is reported
		for _, name := range r.GoFiles {
			var pf *parsedFile
			if v, ok := parsed.Load(name); ok {
				pf = v.(*parsedFile)
			} else {
				pf = parseFile(fset, name)
			}
			if pf.err != nil {
				var el scanner.ErrorList
				if !errors.As(pf.err, &el) {
					el = scanner.ErrorList{{Msg: pf.err.Error()}}
				}
				for _, e := range el {
					r.Errors = append(r.Errors, packages.Error{Pos: e.Pos.String(), Msg: e.Msg, Kind: packages.ParseError})
				}
				continue
			}
			syntax[r] = append(syntax[r], pf.f)
			for _, imp := range pf.f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				switch {
				case path == "C":
					if len(cgo) == 0 {
						cgoPos = fset.Position(imp.Path.Pos()).String() // as refuseCgo's
					}
					cgo = append(cgo, filepath.Base(name))
				case path != "unsafe" && deps[path] == nil && !slices.Contains(missed, path):
					missed = append(missed, path)
				}
			}
		}
		switch {
		case len(cgo) > 0 && !hasDirectives(syntax[r]):
			// Nothing to generate: left unchecked, with no Types (see
			// Generate), so that ./... passes over it.
			cgoOnly[r] = true
		case len(cgo) > 0:
			r.Errors = append(r.Errors, packages.Error{Pos: cgoPos, Kind: packages.ListError,
				Msg: fmt.Sprintf("lease: package %s uses cgo (%s): leasegen reads packages without cgo; move the leased functions to a package without cgo", r.PkgPath, strings.Join(cgo, ", "))})
		}
	}
	if len(missed) > 0 {
		more, err := loadExports(dir, missed, tags)
		if err != nil {
			return nil, nil, err
		}
		if deps == nil {
			deps = map[string]*packages.Package{}
		}
		maps.Copy(deps, more)
	}

	sizes := types.SizesFor("gc", goarch())
	imported := map[string]*types.Package{} // shared, so types are identical across roots
	if err := sourceDeps(dir, fset, sizes, deps, imported, tags); err != nil {
		return nil, nil, err
	}
	for _, r := range roots {
		if len(r.Errors) > 0 || cgoOnly[r] {
			continue
		}
		// An import go list could not provide is reported at the import,
		// with go list's message, as go build reports it.
		for _, f := range syntax[r] {
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if d := deps[path]; d != nil && len(d.Errors) > 0 {
					r.Errors = append(r.Errors, packages.Error{Pos: fset.Position(imp.Path.Pos()).String(), Msg: d.Errors[0].Msg, Kind: packages.ListError})
				}
			}
		}
		if len(r.Errors) > 0 {
			continue
		}
		conf := types.Config{
			Sizes: sizes,
			Importer: importerFunc(func(path string) (*types.Package, error) {
				if path == "unsafe" {
					return types.Unsafe, nil
				}
				d := deps[path]
				if d == nil {
					return nil, fmt.Errorf("package %s not listed among the imports of %s", path, r.PkgPath)
				}
				if tp := imported[path]; tp != nil && tp.Complete() {
					return tp, nil
				}
				return readExport(fset, imported, path, d.ExportFile)
			}),
			Error: func(err error) {
				te, ok := err.(types.Error)
				if !ok {
					r.Errors = append(r.Errors, packages.Error{Pos: "-", Msg: err.Error(), Kind: packages.TypeError})
					return
				}
				r.Errors = append(r.Errors, packages.Error{Pos: fset.Position(te.Pos).String(), Msg: te.Msg, Kind: packages.TypeError})
			},
		}
		info := &types.Info{
			Types:      map[ast.Expr]types.TypeAndValue{},
			Defs:       map[*ast.Ident]types.Object{},
			Uses:       map[*ast.Ident]types.Object{},
			Selections: map[*ast.SelectorExpr]*types.Selection{},
			Implicits:  map[ast.Node]types.Object{},
		}
		tpkg, _ := conf.Check(r.PkgPath, fset, syntax[r], info)
		r.Syntax, r.Types, r.TypesInfo = syntax[r], tpkg, info
	}
	return roots, deps, nil
}

// hasDirectives reports whether a comment of files is a //lease:
// directive (well formed or not) other than //lease:ignore.
func hasDirectives(files []*ast.File) bool {
	for _, f := range files {
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if d, es := directive.Parse(c.Slash, c.Text); len(es) > 0 || d != nil && d.Name != directive.Ignore {
					return true
				}
			}
		}
	}
	return false
}

// loadExports lists the export data of packages (import paths), by path,
// and their files.
func loadExports(dir string, paths []string, tags []string) (map[string]*packages.Package, error) {
	paths = slices.DeleteFunc(paths, func(p string) bool { return p == "unsafe" || p == "C" })
	out := map[string]*packages.Package{}
	if len(paths) == 0 {
		return out, nil
	}
	slices.Sort(paths)
	pkgs, err := packages.Load(&packages.Config{
		Mode:       packages.NeedName | packages.NeedExportFile | packages.NeedFiles,
		Dir:        dir,
		BuildFlags: tagFlags(tags),
	}, paths...)
	if err != nil {
		return nil, err
	}
	for _, p := range pkgs {
		out[p.PkgPath] = p
	}
	return out, nil
}

// readExport reads a package's export data into imported (which it shares
// with every other package read, so that types are identical).
func readExport(fset *token.FileSet, imported map[string]*types.Package, path, file string) (*types.Package, error) {
	if file == "" {
		return nil, fmt.Errorf("no export data for %s", path)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := gcexportdata.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("reading export data of %s: %v", path, err)
	}
	return gcexportdata.Read(r, fset, imported, path)
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

type parsedFile struct {
	f   *ast.File
	err error
}

func parseFile(fset *token.FileSet, name string) *parsedFile {
	f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
	return &parsedFile{f, err}
}

// patternDirs returns the directories patterns name when each is a
// directory path ("." or "./x", not "./..." or an import path).
func patternDirs(dir string, patterns []string) ([]string, bool) {
	var dirs []string
	for _, p := range patterns {
		if strings.Contains(p, "...") || !(p == "." || p == ".." || filepath.IsAbs(p) || strings.HasPrefix(p, "./") || strings.HasPrefix(p, "../")) {
			return nil, false
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		dirs = append(dirs, p)
	}
	return dirs, true
}

// buildFiles returns the non-test Go files of dir that the build (with
// GOFLAGS' tags and leasegen) would use, as far as go/build can tell.
func buildFiles(dir string, tags []string) []string {
	ctx := buildContext(tags, true)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		if ok, err := ctx.MatchFile(dir, name); err == nil && ok {
			out = append(out, filepath.Join(dir, name))
		}
	}
	return out
}

// buildContext returns the go/build context of the current GOOS and
// GOARCH and GOFLAGS' tags, with -tags leasegen when withTag (leasegen's
// own load) and without (the build of go build and go test).
func buildContext(tags []string, withTag bool) build.Context {
	ctx := build.Default
	ctx.BuildTags = append(slices.Clone(ctx.BuildTags), tags...)
	if withTag {
		ctx.BuildTags = append(ctx.BuildTags, BuildTag)
	}
	ctx.GOARCH = goarch()
	ctx.GOOS = targetGOOS()
	return ctx
}

// tagFlags are the build flags of leasegen's go list calls: GOFLAGS' tags
// and leasegen. A -tags on go list's command line replaces GOFLAGS' -tags
// instead of adding to it, so GOFLAGS' are repeated in it: with
// GOFLAGS=-tags=prod (a service's CI, or go env -w) the package is read as
// go build, go vet and go test read it there
// (TestAdversary75b_GOFLAGSTagsHonoured).
func tagFlags(tags []string) []string {
	return []string{"-tags=" + strings.Join(append(slices.Clip(tags), BuildTag), ",")}
}

// goflagsTags returns the build tags that GOFLAGS sets (its last -tags, as
// the go command reads it), from the environment or, when that is unset
// or empty, from the go command's environment files (go env -w).
func goflagsTags() []string {
	var tags []string
	for _, f := range splitQuoted(goEnv("GOFLAGS")) {
		name, value, ok := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(f, "-"), "-"), "=")
		if !ok || name != "tags" {
			continue
		}
		if strings.ContainsAny(value, " '") {
			// The go command's form of Go 1.12 and before, -tags='a b'
			// (TestAdversary77_GOFLAGSQuotedForms).
			tags = splitQuoted(value)
			continue
		}
		tags = strings.FieldsFunc(value, func(r rune) bool { return r == ',' })
	}
	return tags
}

// splitQuoted splits s into fields as the go command splits GOFLAGS:
// separated by spaces, a field may be quoted with ' or " (the quotes
// removed; no escapes), so that "-tags=a b" is one
// (TestAdversary76_GOFLAGSTagForms).
func splitQuoted(s string) []string {
	var out []string
	for {
		s = strings.TrimLeft(s, " \t\n\r")
		if s == "" {
			return out
		}
		if q := s[0]; q == '\'' || q == '"' {
			end := strings.IndexByte(s[1:], q)
			if end < 0 { // unterminated: the go command refuses it
				return append(out, s[1:])
			}
			out = append(out, s[1:1+end])
			s = s[2+end:]
			continue
		}
		end := strings.IndexAny(s, " \t\n\r")
		if end < 0 {
			return append(out, s)
		}
		out = append(out, s[:end])
		s = s[end:]
	}
}

// goEnv returns the go command's setting of key: the environment's when
// it is set and not empty, as the go command reads it, else the one go env
// -w wrote to the environment file ($GOENV, or go/env under the user's
// configuration directory; GOENV=off: none), else $GOROOT/go.env's.
func goEnv(key string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	file := os.Getenv("GOENV")
	if file == "" {
		if dir, err := os.UserConfigDir(); err == nil {
			file = filepath.Join(dir, "go", "env")
		}
	}
	if file != "off" && file != "" {
		if v, ok := envFileValue(file, key); ok {
			return v
		}
	}
	root := os.Getenv("GOROOT")
	if root == "" {
		root = build.Default.GOROOT
	}
	v, _ := envFileValue(filepath.Join(root, "go.env"), key)
	return v
}

// envFileValue reads key from a go command environment file as the go
// command does: lines KEY=VALUE, a line that does not begin with a capital
// letter ignored, the last line of a key winning.
func envFileValue(file, key string) (string, bool) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", false
	}
	var v string
	found := false
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" || line[0] < 'A' || line[0] > 'Z' {
			continue
		}
		if k, val, ok := strings.Cut(line, "="); ok && k == key {
			v, found = val, true
		}
	}
	return v, found
}

// targetGOOS is the GOOS of the build: $GOOS, else go/build's default.
func targetGOOS() string {
	if o := os.Getenv("GOOS"); o != "" {
		return o
	}
	return build.Default.GOOS
}

func goarch() string {
	if a := os.Getenv("GOARCH"); a != "" {
		return a
	}
	return runtime.GOARCH
}

// sourceDeps type-checks from source the imports go list could not compile
// (to export data) with -tags leasegen: a package that calls its own
// wrappers, or an import's, does not compile without the generated files
// (and one importing such a package gets no export data, with no error).
// Errors naming a wrapper that the package's or its imports' directives
// generate are forgiven, as they are in the matched packages; a package
// with any other error keeps go list's error, reported at the import. The
// packages read here are put in imported. Their own imports missing from
// deps are listed in one more go list (per level of such packages).
func sourceDeps(dir string, fset *token.FileSet, sizes types.Sizes, deps map[string]*packages.Package, imported map[string]*types.Package, tags []string) error {
	files := map[string][]*ast.File{} // failed imports, parsed (empty: unparsable)
	for {
		var missing []string
		for _, path := range slices.Sorted(maps.Keys(deps)) {
			d := deps[path]
			if (len(d.Errors) == 0 && d.ExportFile != "") || len(d.GoFiles) == 0 || files[path] != nil {
				continue
			}
			fs := []*ast.File{}
			for _, name := range d.GoFiles {
				f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
				if err != nil {
					fs = []*ast.File{}
					break
				}
				fs = append(fs, f)
			}
			files[path] = fs
			for _, f := range fs {
				for _, imp := range f.Imports {
					p, _ := strconv.Unquote(imp.Path.Value)
					if p != "unsafe" && p != "C" && deps[p] == nil && !slices.Contains(missing, p) {
						missing = append(missing, p)
					}
				}
			}
		}
		if len(missing) == 0 {
			break
		}
		more, err := loadExports(dir, missing, tags)
		if err != nil {
			return err
		}
		maps.Copy(deps, more)
	}
	done := map[string]bool{}
	var check func(path string)
	check = func(path string) {
		if done[path] {
			return
		}
		done[path] = true
		fs := files[path]
		if len(fs) == 0 {
			return
		}
		forgiven := map[string]bool{}
		imports := map[string]*packages.Package{}
		for _, f := range fs {
			for _, n := range wrapperNames(f) {
				forgiven[n] = true
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if files[p] != nil {
					check(p)
				}
				if d := deps[p]; d != nil {
					imports[p] = d
				}
			}
		}
		for _, names := range depWrapperNames(imports) {
			for _, n := range names {
				forgiven[n] = true
			}
		}
		ok := true
		conf := types.Config{
			Sizes: sizes,
			Importer: importerFunc(func(p string) (*types.Package, error) {
				if p == "unsafe" {
					return types.Unsafe, nil
				}
				if tp := imported[p]; tp != nil && tp.Complete() {
					return tp, nil
				}
				d := deps[p]
				if d == nil || len(d.Errors) > 0 {
					return nil, fmt.Errorf("no export data for %s", p)
				}
				return readExport(fset, imported, p, d.ExportFile)
			}),
			Error: func(err error) {
				if te, isType := err.(types.Error); isType && forgiven[undefinedName(te)] {
					return
				}
				ok = false
			},
		}
		tpkg, _ := conf.Check(path, fset, fs, nil)
		if ok {
			imported[path] = tpkg
			deps[path].Errors = nil
		}
	}
	for _, path := range slices.Sorted(maps.Keys(files)) {
		check(path)
	}
	return nil
}
