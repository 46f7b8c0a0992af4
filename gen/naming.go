package gen

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/scanner"
	"go/token"
	"go/types"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/leasegen/leasegen/templates"
)

// Naming: wrapper names, their clashes, and the identifiers a wrapper declares.

func exportName(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}

func recvName(fd *ast.FuncDecl) string {
	if len(fd.Recv.List) > 0 && len(fd.Recv.List[0].Names) > 0 {
		return fd.Recv.List[0].Names[0].Name
	}
	return ""
}

// members returns the fields and methods, promoted ones included, that a
// selector on *recv can reach, by name, computed once per type: looking
// each wrapper name up on its own (types.LookupFieldOrMethod) scans every
// method each time, quadratic in a type with thousands of methods.
func (g *pkgGen) members(recv *types.Named) map[string]types.Object {
	if m, ok := g.memberCache[recv]; ok {
		return m
	}
	m := map[string]types.Object{}
	ms := types.NewMethodSet(types.NewPointer(recv))
	for i := range ms.Len() {
		if obj := ms.At(i).Obj(); m[obj.Name()] == nil {
			m[obj.Name()] = obj
		}
	}
	seen := map[types.Type]bool{}
	var fields func(t types.Type)
	fields = func(t types.Type) {
		if p, ok := t.Underlying().(*types.Pointer); ok {
			t = p.Elem()
		}
		st, ok := t.Underlying().(*types.Struct)
		if !ok || seen[t] {
			return
		}
		seen[t] = true
		for i := range st.NumFields() {
			f := st.Field(i)
			if m[f.Name()] == nil {
				m[f.Name()] = f
			}
			if f.Embedded() {
				fields(f.Type())
			}
		}
	}
	fields(recv)
	if g.memberCache == nil {
		g.memberCache = map[*types.Named]map[string]types.Object{}
	}
	g.memberCache[recv] = m
	return m
}

// declare records a wrapper name and reports a clash with an existing
// declaration in its scope (the package, or the receiver's method set).
// iface names the interface whose decorator the name is for ("" for a
// directive's wrapper): its names come from the interface, as name= does
// not apply to interface methods, so a clash says to rename one side.
func (g *pkgGen) declare(pos token.Pos, name string, recv *types.Named, iface string) bool {
	if !g.declareAs(pos, name, recv, iface) {
		return false
	}
	if iface != "" {
		if g.decorators == nil {
			g.decorators = map[token.Pos]string{}
		}
		g.decorators[pos] = iface
	}
	return true
}

// declareAs is declare without the record of decorators.
func (g *pkgGen) declareAs(pos token.Pos, name string, recv *types.Named, iface string) bool {
	fix := "choose another with name="
	if iface != "" {
		fix = fmt.Sprintf("rename the interface %s (its decorator is named after it) or the other declaration", iface)
	}
	// errorf reports the clash that format says, and fix.
	errorf := func(format string, args ...any) {
		g.errorf(pos, "%s; %s", fmt.Sprintf(format, args...), fix)
	}
	// Names Go reserves at package level, which the package scope does
	// not list (TestAdversary46_ReservedWrapperNames).
	if recv == nil && (name == "init" || name == "main" && g.pkg.Types.Name() == "main") {
		errorf("wrapper name %s is reserved at package level (func %s takes no parameters and returns nothing)", name, name)
		return false
	}
	if recv == nil && types.Universe.Lookup(name) != nil {
		// A package-level declaration shadows the predeclared name in
		// every file of the package, the output's own uses and the
		// package's included (TestAdversary50_WrapperNamedPredeclared).
		errorf("wrapper name %s is predeclared in Go: declared at package level it would shadow the predeclared %s in the whole package", name, name)
		return false
	}
	scopeKey := name
	var existing types.Object
	if recv != nil {
		scopeKey = recv.Obj().Name() + "." + name
		existing = g.members(recv)[name]
	} else {
		existing = g.pkg.Types.Scope().Lookup(name)
	}
	if existing != nil && g.generated[g.fset.Position(existing.Pos()).Filename] {
		existing = nil // our own earlier output (when checked without -tags leasegen)
	}
	if existing != nil {
		errorf("wrapper name %s is already declared at %s", name, g.errs.where(existing.Pos()))
		return false
	}
	if msg := g.testClash(name, recv); msg != "" {
		errorf("%s", msg)
		return false
	}
	if recv == nil {
		// A package-level name must not be an import name of any file of
		// the package, the generated one included (go build: "already
		// declared through import of package").
		if path, ok := g.importPaths[name]; ok {
			errorf("wrapper name %s is the name the generated file imports package %s under", name, path)
			return false
		}
		if pn := g.fileImport(name); pn != nil {
			file := ShortPath(g.errs.dir, g.fset.Position(pn.Pos()).Filename)
			errorf("wrapper name %s is the name %s imports package %s under (%s)", name, file, pn.Imported().Path(), g.errs.where(pn.Pos()))
			return false
		}
		if spec, path := g.dotImport(name); spec != nil {
			file := ShortPath(g.errs.dir, g.fset.Position(spec.Pos()).Filename)
			errorf("wrapper name %s is a name %s dot-imports from package %s (%s)", name, file, path, g.errs.where(spec.Pos()))
			return false
		}
	}
	if prev, ok := g.names[scopeKey]; ok {
		prevIface, prevDec := g.decorators[prev]
		switch {
		case prevDec:
			errorf("wrapper name %s is also generated for the decorator of interface %s at %s", name, prevIface, g.errs.where(prev))
		case iface != "":
			// The other is a directive's wrapper: name= there, or the
			// interface renamed.
			g.errorf(pos, "wrapper name %s is also generated for the directive at %s; choose another for it with name=, or rename the interface %s (its decorator is named after it)", name, g.errs.where(prev), iface)
		default:
			errorf("wrapper name %s is also generated for the directive at %s", name, g.errs.where(prev))
		}
		return false
	}
	g.names[scopeKey] = pos
	return true
}

// testClash reports a clash of a wrapper name with an internal test file
// of the package (package p, not p_test), which go test compiles with the
// wrappers but leasegen does not type-check, or with a file of the
// package that leasegen's build leaves out (g.others): a package-level declaration,
// an import name or a name a dot import declares (recv nil), or a method
// of recv declared there, or a field of recv's type as declared there. It
// returns the message, or "". A dot import of a package the type-checked
// files do not import is resolved from that package's source files (see
// exportedNames).
func (g *pkgGen) testClash(name string, recv *types.Named) string {
	const (
		testTail  = " (a test file of the package: go test compiles it with the wrappers)"
		otherTail = " (a file of the package that this build leaves out, for another platform or build tag: the build that takes it compiles it with the wrappers)"
	)
	tail := testTail
	declared := func(id *ast.Ident) string {
		return fmt.Sprintf("wrapper name %s is already declared at %s", name, g.errs.where(id.Pos())) + tail
	}
	unseen := append(slices.Clip(g.internalTests), g.others...)
	// The receiver's type under other names there: aliases (type A = T)
	// declare methods of T; a definition on another type (type T base)
	// takes base's fields.
	recvNames := map[string]bool{}
	var bases []string
	if recv != nil {
		recvNames[recv.Obj().Name()] = true
		for _, f := range unseen {
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok {
					continue
				}
				for _, spec := range gd.Specs {
					ts, ok := spec.(*ast.TypeSpec)
					if !ok {
						continue
					}
					id, ok := ts.Type.(*ast.Ident)
					switch {
					case !ok:
					case ts.Assign.IsValid() && id.Name == recv.Obj().Name():
						recvNames[ts.Name.Name] = true
					case !ts.Assign.IsValid() && ts.Name.Name == recv.Obj().Name():
						bases = append(bases, id.Name)
					}
				}
			}
		}
	}
	for i, f := range unseen {
		if i == len(g.internalTests) {
			tail = otherTail
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Name.Name != name {
					continue
				}
				if recv == nil && decl.Recv == nil {
					return declared(decl.Name)
				}
				if recv != nil && decl.Recv != nil && len(decl.Recv.List) == 1 && recvNames[recvBase(decl.Recv.List[0].Type)] {
					return declared(decl.Name)
				}
			case *ast.GenDecl:
				if recv != nil {
					// The receiver's type as that file declares it (one
					// declaration per platform): a field of the method's
					// name (TestAdversary50_ReceiverFieldInOtherPlatformType).
					if id := fieldNamed(decl, recv.Obj().Name(), name); id != nil {
						return fmt.Sprintf("wrapper name %s is a field of %s declared at %s", name, recv.Obj().Name(), g.errs.where(id.Pos())) + tail
					}
					for _, b := range bases {
						if id := fieldNamed(decl, b, name); id != nil {
							return fmt.Sprintf("wrapper name %s is a field of %s (declared as %s there) at %s", name, recv.Obj().Name(), b, g.errs.where(id.Pos())) + tail
						}
					}
					continue
				}
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						if spec.Name.Name == name {
							return declared(spec.Name)
						}
					case *ast.ValueSpec:
						for _, id := range spec.Names {
							if id.Name == name {
								return declared(id)
							}
						}
					}
				}
			}
		}
		if recv != nil {
			continue
		}
		file := ShortPath(g.errs.dir, g.fset.Position(f.Pos()).Filename)
		for _, spec := range f.Imports {
			path, _ := strconv.Unquote(spec.Path.Value)
			var known *types.Package
			for _, imp := range g.pkg.Types.Imports() {
				if imp.Path() == path {
					known = imp
				}
			}
			local := ""
			switch {
			case spec.Name != nil && spec.Name.Name == ".":
				if !token.IsExported(name) {
					continue
				}
				// The package as leasegen loaded it is this platform's:
				// for a file of another platform (named _GOOS), or a
				// package only unseen files import, its source is read.
				goos := fileGOOS(g.fset.PositionFor(f.Pos(), false).Filename)
				if known != nil && (goos == "" || goos == targetGOOS()) && known.Scope().Lookup(name) != nil ||
					(known == nil || goos != "" && goos != targetGOOS()) && g.exportedNames(path, goos)[name] {
					return fmt.Sprintf("wrapper name %s is a name %s dot-imports from package %s (%s)", name, file, path, g.errs.where(spec.Pos())) + tail
				}
				continue
			case spec.Name != nil:
				local = spec.Name.Name
			case known != nil:
				local = known.Name()
			default:
				local = defaultImportName(path)
			}
			if local == name {
				return fmt.Sprintf("wrapper name %s is the name %s imports package %s under (%s)", name, file, path, g.errs.where(spec.Pos())) + tail
			}
		}
	}
	return ""
}

// exportedNames returns the exported package-level names of the package
// at import path, read from its source files: for a package that only
// unseen files import (a platform-only package), or one loaded for this
// platform that a file of another (goos) dot-imports. Its directory is
// found with go list -e -find (without loading its imports; a package
// whose files are all for another platform has no build here). Its files
// are read as that platform's build takes them (goos "": any platform's),
// passing over test files, files no build takes and files of another
// package (a //go:build ignore program). nil when it cannot be found.
func (g *pkgGen) exportedNames(path, goos string) map[string]bool {
	key := goos + " " + path
	if names, ok := g.exported[key]; ok {
		return names
	}
	if g.exported == nil {
		g.exported = map[string]map[string]bool{}
	}
	var names map[string]bool
	cmd := exec.Command("go", "list", "-e", "-find", "-f", "{{.Dir}}", "--", path)
	if len(g.pkg.Syntax) > 0 {
		// Where the file is, not where a //line comment says it is.
		cmd.Dir = filepath.Dir(g.fset.PositionFor(g.pkg.Syntax[0].Pos(), false).Filename)
	}
	if out, err := cmd.Output(); err == nil && strings.TrimSpace(string(out)) != "" {
		dir := strings.TrimSpace(string(out))
		ctx := build.Default
		ctx.GOOS, ctx.CgoEnabled = goos, true
		var files []*ast.File
		count := map[string]int{}
		for _, name := range goSources(dir) {
			if isTestFile(name) {
				continue
			}
			if goos != "" {
				if ok, err := ctx.MatchFile(dir, filepath.Base(name)); err != nil || !ok {
					continue
				}
			}
			if f, _ := parser.ParseFile(token.NewFileSet(), name, nil, parser.ParseComments|parser.SkipObjectResolution); f != nil && !neverBuilt(f) {
				files = append(files, f)
				count[f.Name.Name]++
			}
		}
		// The package's name is its files' most common one.
		pkgName := ""
		for n, c := range count {
			if c > count[pkgName] || c == count[pkgName] && n < pkgName {
				pkgName = n
			}
		}
		files = slices.DeleteFunc(files, func(f *ast.File) bool { return f.Name.Name != pkgName })
		names = map[string]bool{}
		for n := range declNames(files) {
			if token.IsExported(n) {
				names[n] = true
			}
		}
	}
	g.exported[key] = names
	return names
}

// knownGOOS are the GOOS values a file name may end in (go tool dist list).
var knownGOOS = []string{"aix", "android", "darwin", "dragonfly", "freebsd", "hurd", "illumos", "ios", "js", "linux", "netbsd", "openbsd", "plan9", "solaris", "wasip1", "windows", "zos"}

// fileGOOS returns the GOOS a file's name restricts it to (x_windows.go,
// x_windows_amd64.go, x_windows_test.go), or "".
func fileGOOS(name string) string {
	base := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(name), ".go"), "_test")
	parts := strings.Split(base, "_")
	for i := len(parts) - 1; i >= 1 && i >= len(parts)-2; i-- {
		if slices.Contains(knownGOOS, parts[i]) {
			return parts[i]
		}
	}
	return ""
}

// fieldNamed returns the field (or embedded field) called name of the
// struct type typeName that decl declares, or nil.
func fieldNamed(decl *ast.GenDecl, typeName, name string) *ast.Ident {
	for _, spec := range decl.Specs {
		ts, ok := spec.(*ast.TypeSpec)
		if !ok || ts.Name.Name != typeName {
			continue
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			continue
		}
		for _, f := range st.Fields.List {
			for _, id := range f.Names {
				if id.Name == name {
					return id
				}
			}
			if len(f.Names) == 0 {
				x := f.Type
				if star, ok := x.(*ast.StarExpr); ok {
					x = star.X
				}
				if ix, ok := x.(*ast.IndexExpr); ok {
					x = ix.X
				}
				if ix, ok := x.(*ast.IndexListExpr); ok {
					x = ix.X
				}
				switch e := x.(type) {
				case *ast.Ident:
					if e.Name == name {
						return e
					}
				case *ast.SelectorExpr:
					if e.Sel.Name == name {
						return e.Sel
					}
				}
			}
		}
	}
	return nil
}

// recvBase returns the name of a receiver's base type (T in T, *T, T[P]).
func recvBase(x ast.Expr) string {
	for {
		switch e := x.(type) {
		case *ast.StarExpr:
			x = e.X
		case *ast.ParenExpr:
			x = e.X
		case *ast.IndexExpr:
			x = e.X
		case *ast.IndexListExpr:
			x = e.X
		case *ast.Ident:
			return e.Name
		default:
			return ""
		}
	}
}

// defaultImportName guesses the name of a package leasegen did not load
// from its path: the last element, skipping a major version (/v2).
func defaultImportName(path string) string {
	elems := strings.Split(path, "/")
	last := elems[len(elems)-1]
	if len(elems) > 1 && len(last) > 1 && last[0] == 'v' && strings.Trim(last[1:], "0123456789") == "" {
		last = elems[len(elems)-2]
	}
	return last
}

// fileImport returns the import that a file of the package (not
// leasegen's output) names name, or nil.
func (g *pkgGen) fileImport(name string) *types.PkgName {
	scope := g.pkg.Types.Scope()
	for i := range scope.NumChildren() {
		pn, ok := scope.Child(i).Lookup(name).(*types.PkgName)
		if ok && !g.generated[g.fset.Position(pn.Pos()).Filename] {
			return pn
		}
	}
	return nil
}

// dotImport returns the import (import . "path") through which a file of
// the package (not leasegen's output) declares name in its file block, or
// nil: go build refuses a package-level declaration of that name
// ("already declared through dot-import of package").
func (g *pkgGen) dotImport(name string) (*ast.ImportSpec, string) {
	for _, f := range g.files() {
		for _, spec := range f.Imports {
			if spec.Name == nil || spec.Name.Name != "." {
				continue
			}
			path, _ := strconv.Unquote(spec.Path.Value)
			for _, imp := range g.pkg.Types.Imports() {
				if imp.Path() == path && imp.Scope().Lookup(name) != nil && token.IsExported(name) {
					return spec, path
				}
			}
		}
	}
	return nil, ""
}

// locals allocates the wrapper's local names.
func (g *pkgGen) locals(w *templates.Wrapper, n *namer) {
	w.KeyVar = n.alloc("key", "key")
	w.ErrVar = n.alloc("err", "err")
	for i := range len(w.Results) - 1 {
		w.ResultVars = append(w.ResultVars, n.alloc("r"+strconv.Itoa(i), "r"))
	}
	for _, p := range w.Key {
		if p.Marshal != "" {
			w.ScratchVars = append(w.ScratchVars, n.alloc("text", "text"))
			if w.KeyErrVar == "" {
				w.KeyErrVar = n.alloc("keyErr", "keyErr")
			}
		}
	}
}

// namer allocates identifiers that collide with nothing reserved.
type namer struct{ used map[string]bool }

func newNamer() *namer { return &namer{used: map[string]bool{"_": true}} }

func (n *namer) reserve(names ...string) {
	for _, s := range names {
		n.used[s] = true
	}
}

// alloc returns want if free (def if want is empty), else the first free
// want1, want2, ...
func (n *namer) alloc(want, def string) string {
	if want == "" || want == "_" {
		want = def
	}
	name := want
	for i := 1; n.used[name]; i++ {
		name = want + strconv.Itoa(i)
	}
	n.used[name] = true
	return name
}

// newNamer returns a namer for one wrapper with every name its body may
// refer to reserved, so that no parameter shadows it there: the import
// names its text refers to and those of the packages the templates use,
// the predeclared identifiers (string, int64, nil, len, error, ...), and
// the package's own names in typeTexts (the types of its parameters and
// results, which the body repeats, as in var r0 Res). An identifier in
// typeTexts named in shadowed (a generic function's type parameters, which
// shadow the package's names in its signature) is not the package's.
func (g *pkgGen) newNamer(q *qual, shadowed map[string]bool, typeTexts ...[]string) *namer {
	n := newNamer()
	for _, path := range fixedImports {
		n.reserve(g.imports[path])
	}
	for path := range q.uses {
		n.reserve(g.imports[path])
	}
	n.reserve(types.Universe.Names()...)
	if g.pkg.Types != nil {
		for _, texts := range typeTexts {
			for _, text := range texts {
				for _, id := range identRE.FindAllString(text, -1) {
					if shadowed[id] {
						continue
					}
					// Declared by the package's files, whichever of them
					// the caller type-checked (leasegen -tags leasegen,
					// the analyzer another set, with tests or for another
					// GOOS): those files' scope, less leasegen's own
					// output, and the names of the files it only parsed
					// are the same union for both, so that both render the
					// same file.
					if obj := g.pkg.Types.Scope().Lookup(id); obj != nil && !g.generated[g.fset.Position(obj.Pos()).Filename] {
						n.reserve(id)
					} else if _, ok := g.unseenNames[id]; ok {
						n.reserve(id)
					}
				}
			}
		}
	}
	return n
}

var identRE = regexp.MustCompile(`[\pL_][\pL\pN_]*`)

// shadowedPredeclared reports, at its declaration, every package-level
// name that shadows a predeclared identifier the output itself uses
// (int64 in a key's conversion, nil, len, true, error, ...): in the
// package block, the output's use would be the package's declaration,
// and the package would not build, or would mean something else. What
// the output copies from the package's own signatures (parameter, result,
// receiver and interface types, type parameters' constraints) means there
// what it means in the package, and is not counted: the model is rendered
// again with those texts masked, and that rendering is scanned.
// Declarations of the files leasegen type-checks count, and those of the
// files it only parses (internal tests, other platforms). It returns
// whether it found any.
func (g *pkgGen) shadowedPredeclared(m *templates.File) bool {
	// Where it is, if the package declares a predeclared name at all:
	// most declare none, and pay nothing more.
	shadows := map[string]token.Pos{}
	for _, name := range types.Universe.Names() {
		if obj := g.pkg.Types.Scope().Lookup(name); obj != nil && !g.generated[g.fset.Position(obj.Pos()).Filename] {
			shadows[name] = obj.Pos()
		} else if p, ok := g.unseenNames[name]; ok {
			shadows[name] = p
		}
	}
	if len(shadows) == 0 {
		return false
	}
	out, err := templates.Render(maskTypes(m))
	if err != nil {
		return false // the real rendering succeeded; nothing to add
	}
	var s scanner.Scanner
	s.Init(token.NewFileSet().AddFile("", -1, len(out)), out, nil, 0)
	used := map[string]bool{}
	prev := token.ILLEGAL
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok == token.IDENT && prev != token.PERIOD && types.Universe.Lookup(lit) != nil {
			used[lit] = true
		}
		prev = tok
	}
	names := make([]string, 0, len(used))
	for name := range used {
		names = append(names, name)
	}
	slices.Sort(names)
	found := false
	for _, name := range names {
		if pos, ok := shadows[name]; ok {
			g.errorf(pos, "package-level %s shadows the predeclared %s, which the generated wrappers use; rename it", name, name)
			found = true
		}
	}
	return found
}

// maskedType stands for a type text of the package's own in maskTypes.
const maskedType = "leasegenMasked"

// maskTypes returns a copy of m with every type text that comes from the
// package's signatures replaced by one identifier that is not predeclared.
func maskTypes(m *templates.File) *templates.File {
	cp := *m
	params := func(ps []templates.Param) []templates.Param {
		out := slices.Clone(ps)
		for i := range out {
			out[i].Type = maskedType
		}
		return out
	}
	texts := func(ts []string) []string {
		out := slices.Clone(ts)
		for i := range out {
			out[i] = maskedType
		}
		return out
	}
	wrapper := func(w *templates.Wrapper) *templates.Wrapper {
		x := *w
		x.TypeParams, x.Params, x.Results = params(w.TypeParams), params(w.Params), texts(w.Results)
		if x.RecvType != "" {
			x.RecvType = maskedType
		}
		if x.TieType != "" {
			x.TieType, x.Tie = maskedType, maskedType
		}
		return &x
	}
	cp.Wrappers = nil
	for _, w := range m.Wrappers {
		cp.Wrappers = append(cp.Wrappers, wrapper(w))
	}
	cp.Decorators = nil
	for _, d := range m.Decorators {
		x := *d
		x.IfaceTyp = maskedType
		x.Methods, x.Passthrough = nil, nil
		for _, w := range d.Methods {
			x.Methods = append(x.Methods, wrapper(w))
		}
		for _, w := range d.Passthrough {
			x.Passthrough = append(x.Passthrough, wrapper(w))
		}
		cp.Decorators = append(cp.Decorators, &x)
	}
	return &cp
}
