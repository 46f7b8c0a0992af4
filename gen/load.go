package gen

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/scanner"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/tools/go/gcexportdata"
	"golang.org/x/tools/go/packages"
)

// load returns the packages matching patterns, type-checked from source,
// in the shape packages.Load with NeedTypes|NeedSyntax gives.
//
// It costs what the answer needs and no more, because leasegen runs on
// every go generate (the target is to be no slower than go vet):
//
//   - packages.Load with NeedTypes asks go list for export data of the
//     matched packages too, compiling them only to throw that away; here
//     export data is asked for their imports only, and the matched
//     packages are checked by go/types from source;
//   - go list is run directly, twice (the matched packages; the export
//     data of their imports), with nothing else: packages.Load also runs
//     go list to learn the Go version and the sizes, sequentially;
//   - when every pattern names a directory (".", the go generate case),
//     the imports are read from the files themselves, so both go list calls
//     and the parsing of the files run at once. The imports go list then
//     reports are checked against that guess, and anything missed is
//     loaded after.
func load(dir string, fset *token.FileSet, patterns []string) ([]*packages.Package, error) {
	var (
		guess  map[string]bool // imports read from the files, or nil
		parsed sync.Map        // file name -> *parsedFile, parsed ahead
		wg     sync.WaitGroup
	)
	if dirs, ok := patternDirs(dir, patterns); ok {
		guess = map[string]bool{}
		for _, d := range dirs {
			for _, name := range buildFiles(d) {
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
		deps    map[string]*listed
		depsErr error
		depsWG  sync.WaitGroup
	)
	if len(guess) > 0 {
		depsWG.Go(func() { deps, depsErr = listExports(dir, keys(guess)) })
	}
	roots, err := goList(dir, []string{"-json=ImportPath,Name,Dir,GoFiles,CgoFiles,IgnoredGoFiles,Imports,ImportMap,Error,DepsErrors"}, patterns)
	depsWG.Wait()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	if depsErr != nil {
		return nil, depsErr
	}
	// The imports the guess missed (build constraints it judged otherwise).
	var missed []string
	for _, r := range roots {
		for _, imp := range r.Imports {
			if deps[imp] == nil && imp != "unsafe" && imp != "C" && !slices.Contains(missed, imp) {
				missed = append(missed, imp)
			}
		}
	}
	if len(missed) > 0 {
		more, err := listExports(dir, missed)
		if err != nil {
			return nil, err
		}
		if deps == nil {
			deps = map[string]*listed{}
		}
		for k, v := range more {
			deps[k] = v
		}
	}

	sizes := types.SizesFor("gc", goarch())
	imported := map[string]*types.Package{} // shared, so types are identical across roots
	var out []*packages.Package
	for _, r := range roots {
		p := &packages.Package{ID: r.ImportPath, PkgPath: r.ImportPath, Name: r.Name, Fset: fset, Imports: map[string]*packages.Package{}}
		for _, name := range r.GoFiles {
			p.GoFiles = append(p.GoFiles, filepath.Join(r.Dir, name))
		}
		for _, name := range r.IgnoredGoFiles {
			p.IgnoredFiles = append(p.IgnoredFiles, filepath.Join(r.Dir, name))
		}
		for _, imp := range r.Imports {
			p.Imports[imp] = &packages.Package{ID: imp, PkgPath: imp}
		}
		if r.Error != nil {
			p.Errors = append(p.Errors, r.Error.packageError())
		}
		for _, e := range r.DepsErrors {
			p.Errors = append(p.Errors, e.packageError())
		}
		if len(r.CgoFiles) > 0 {
			p.Errors = append(p.Errors, packages.Error{Pos: "-", Kind: packages.ListError,
				Msg: fmt.Sprintf("%s uses cgo (%s): leasegen reads packages without cgo", r.ImportPath, strings.Join(r.CgoFiles, ", "))})
		}
		out = append(out, p)
		if len(p.Errors) > 0 {
			continue // list errors are reported as they are
		}
		var files []*ast.File
		for _, name := range p.GoFiles {
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
					p.Errors = append(p.Errors, packages.Error{Pos: e.Pos.String(), Msg: e.Msg, Kind: packages.ParseError})
				}
				continue
			}
			files = append(files, pf.f)
		}
		if len(p.Errors) > 0 {
			continue
		}
		conf := types.Config{
			Sizes: sizes,
			Importer: importerFunc(func(path string) (*types.Package, error) {
				if path == "unsafe" {
					return types.Unsafe, nil
				}
				if mapped, ok := r.ImportMap[path]; ok {
					path = mapped
				}
				d := deps[path]
				if d == nil {
					return nil, fmt.Errorf("package %s not listed among the imports of %s", path, r.ImportPath)
				}
				if d.Error != nil {
					return nil, fmt.Errorf("%s: %s", path, d.Error.Err)
				}
				if tp := imported[path]; tp != nil && tp.Complete() {
					return tp, nil
				}
				return readExport(fset, imported, path, d.Export)
			}),
			Error: func(err error) {
				te, ok := err.(types.Error)
				if !ok {
					p.Errors = append(p.Errors, packages.Error{Pos: "-", Msg: err.Error(), Kind: packages.TypeError})
					return
				}
				p.Errors = append(p.Errors, packages.Error{Pos: fset.Position(te.Pos).String(), Msg: te.Msg, Kind: packages.TypeError})
			},
		}
		info := &types.Info{
			Types:      map[ast.Expr]types.TypeAndValue{},
			Defs:       map[*ast.Ident]types.Object{},
			Uses:       map[*ast.Ident]types.Object{},
			Selections: map[*ast.SelectorExpr]*types.Selection{},
			Implicits:  map[ast.Node]types.Object{},
		}
		tpkg, _ := conf.Check(r.ImportPath, fset, files, info)
		p.Syntax, p.Types, p.TypesInfo = files, tpkg, info
	}
	return out, nil
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// listed is the part of go list's JSON that load reads.
type listed struct {
	ImportPath, Name, Dir, Export string
	GoFiles, CgoFiles             []string
	IgnoredGoFiles                []string
	Imports                       []string
	ImportMap                     map[string]string
	Error                         *listError
	DepsErrors                    []*listError
}

type listError struct {
	Pos string
	Err string
}

func (e *listError) packageError() packages.Error {
	pos := e.Pos
	if pos == "" {
		pos = "-"
	}
	return packages.Error{Pos: pos, Msg: e.Err, Kind: packages.ListError}
}

// goList runs go list -e with -tags=leasegen and decodes its packages.
func goList(dir string, flags, args []string) ([]*listed, error) {
	cmd := exec.Command("go", append(append([]string{"list", "-e", "-tags=" + BuildTag}, flags...), append([]string{"--"}, args...)...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var pkgs []*listed
	dec := json.NewDecoder(bufio.NewReader(stdout))
	var decodeErr error
	for {
		p := new(listed)
		if err := dec.Decode(p); err != nil {
			if err != io.EOF {
				decodeErr = err
				_, _ = io.Copy(io.Discard, stdout)
			}
			break
		}
		pkgs = append(pkgs, p)
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("go list: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	if decodeErr != nil {
		return nil, fmt.Errorf("go list: reading its output: %v", decodeErr)
	}
	return pkgs, nil
}

// listExports lists the export data of packages (import paths), by path.
func listExports(dir string, paths []string) (map[string]*listed, error) {
	var ask []string
	for _, p := range paths {
		if p != "unsafe" && p != "C" {
			ask = append(ask, p)
		}
	}
	out := map[string]*listed{}
	if len(ask) == 0 {
		return out, nil
	}
	sort.Strings(ask)
	pkgs, err := goList(dir, []string{"-export", "-json=ImportPath,Export,Error"}, ask)
	if err != nil {
		return nil, err
	}
	for _, p := range pkgs {
		out[p.ImportPath] = p
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
// -tags=leasegen) would use, as far as go/build can tell.
func buildFiles(dir string) []string {
	ctx := build.Default
	ctx.BuildTags = append(slices.Clone(ctx.BuildTags), BuildTag)
	ctx.GOARCH = goarch()
	if goos := os.Getenv("GOOS"); goos != "" {
		ctx.GOOS = goos
	}
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

func goarch() string {
	if a := os.Getenv("GOARCH"); a != "" {
		return a
	}
	return runtime.GOARCH
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
