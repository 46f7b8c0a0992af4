package gen

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"go/types"
	"runtime"
	"sort"

	"golang.org/x/tools/go/packages"
)

// load returns the packages matching patterns, type-checked from source.
//
// It does what packages.Load with NeedTypes|NeedSyntax does, minus one
// cost: that mode asks go list for export data of the matched packages
// too, which compiles them only to be thrown away (1.4s of 1.9s on a
// 1,000-function package). Here the roots are listed cheaply, export data
// is loaded for their imports only, and the roots are checked by go/types.
func load(dir string, fset *token.FileSet, patterns []string) ([]*packages.Package, error) {
	flags := []string{"-tags=" + BuildTag}
	roots, err := packages.Load(&packages.Config{
		Mode:       packages.NeedName | packages.NeedFiles | packages.NeedImports,
		Dir:        dir,
		BuildFlags: flags,
	}, patterns...)
	if err != nil {
		return nil, err
	}
	idSet := map[string]bool{}
	for _, r := range roots {
		for _, imp := range r.Imports {
			if imp.ID != "unsafe" && imp.ID != "C" {
				idSet[imp.ID] = true
			}
		}
	}
	byID := map[string]*packages.Package{}
	if len(idSet) > 0 {
		ids := make([]string, 0, len(idSet))
		for id := range idSet {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		deps, err := packages.Load(&packages.Config{
			Mode:       packages.NeedName | packages.NeedTypes,
			Dir:        dir,
			Fset:       fset,
			BuildFlags: flags,
		}, ids...)
		if err != nil {
			return nil, err
		}
		for _, d := range deps {
			byID[d.ID] = d
		}
	}
	sizes := types.SizesFor("gc", runtime.GOARCH)
	for _, r := range roots {
		if len(r.Errors) > 0 {
			continue // list or parse errors: reported as they are
		}
		var files []*ast.File
		for _, name := range r.GoFiles {
			f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				var el scanner.ErrorList
				if !errors.As(err, &el) {
					el = scanner.ErrorList{{Msg: err.Error()}}
				}
				for _, e := range el {
					r.Errors = append(r.Errors, packages.Error{Pos: e.Pos.String(), Msg: e.Msg, Kind: packages.ParseError})
				}
				continue
			}
			files = append(files, f)
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
				imp, ok := r.Imports[path]
				if !ok {
					return nil, fmt.Errorf("package %s not listed among the imports of %s", path, r.PkgPath)
				}
				d := byID[imp.ID]
				if d == nil || d.Types == nil {
					return nil, fmt.Errorf("no type information for %s", path)
				}
				for _, e := range d.Errors {
					return nil, fmt.Errorf("%s: %s", path, e.Msg)
				}
				return d.Types, nil
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
		tpkg, _ := conf.Check(r.PkgPath, fset, files, info)
		r.Syntax, r.Types, r.TypesInfo, r.Fset = files, tpkg, info, fset
	}
	return roots, nil
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }
