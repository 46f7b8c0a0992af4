// Command leasegen generates lease wrappers from //lease: directives.
//
// Usage:
//
//	leasegen [flags] [packages]
//
// With no packages it generates for the package in the current directory.
// Add "//go:generate go tool leasegen" to a file of the package and run
// go generate. Exit status: 0 on success (warnings included), 1 on errors
// in the code or the directives (or, with -check, when a file would
// change), 2 on usage errors.
//
// Diagnostics go to stderr as file:line:col: message, sorted, with paths as
// go build prints them: relative to the working directory when below it;
// under go generate, which runs leasegen in each package's directory,
// relative to the module root.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/build"
	"go/scanner"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/leasegen/leasegen/gen"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("leasegen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	check := fs.Bool("check", false, "write nothing; list the files regeneration would change and exit 1 if any")
	out := fs.String("o", "lease_gen.go", "name of the generated file in each package")
	verbose := fs.Bool("v", false, "print progress")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: leasegen [-check] [-o file] [-v] [packages]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if strings.ContainsRune(*out, filepath.Separator) || !strings.HasSuffix(*out, ".go") || strings.HasSuffix(*out, "_test.go") {
		fmt.Fprintf(stderr, "leasegen: -o %q: want a file name ending in .go (not _test.go), without a directory\n", *out)
		return 2
	}
	if !everyBuild(*out) {
		fmt.Fprintf(stderr, "leasegen: -o %q: go build would not compile a file of that name on every platform (it ignores names starting with _ or ., and builds names ending in _GOOS or _GOARCH only there); choose a name such as lease_gen.go\n", *out)
		return 2
	}
	cfg := gen.Config{Patterns: fs.Args(), Output: *out, PathBase: pathBase(), Warn: func(w scanner.Error) { fmt.Fprintln(stderr, w.Error()) }}
	if *verbose {
		cfg.Logf = func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	}
	files, err := gen.Generate(cfg)
	if err != nil {
		if list, ok := err.(scanner.ErrorList); ok {
			for _, e := range list {
				fmt.Fprintln(stderr, e)
			}
		} else {
			fmt.Fprintln(stderr, err)
		}
		return 1
	}
	// Every file that changes is written in two steps, so that a failure
	// leaves every package as it was: first each new content goes to a
	// temporary file beside its target (where a full disk or a missing
	// permission shows), then, only if all of them could be written, each
	// is renamed into place (and an output with no directives left is
	// removed).
	type change struct {
		gen.File
		rel, tmp string
	}
	var todo []change
	for _, f := range files {
		old, readErr := os.ReadFile(f.Path)
		same := (f.Data == nil && os.IsNotExist(readErr)) || (f.Data != nil && readErr == nil && bytes.Equal(old, f.Data))
		if same {
			continue
		}
		rel := gen.ShortPath(cfg.PathBase, f.Path)
		if *check {
			fmt.Fprintln(stdout, rel)
		}
		todo = append(todo, change{File: f, rel: rel})
	}
	if *check {
		if len(todo) > 0 {
			fmt.Fprintf(stderr, "leasegen: %d generated file(s) out of date: run go generate\n", len(todo))
			return 1
		}
		return 0
	}
	staged := true
	for i := range todo {
		if todo[i].Data == nil {
			continue
		}
		tmp, err := stage(todo[i].Path, todo[i].Data)
		if err != nil {
			fmt.Fprintf(stderr, "leasegen: %v\n", err)
			staged = false
			continue
		}
		todo[i].tmp = tmp
	}
	if !staged {
		for _, c := range todo {
			if c.tmp != "" {
				os.Remove(c.tmp)
			}
		}
		fmt.Fprintf(stderr, "leasegen: no generated file was changed (%d were to be)\n", len(todo))
		return 1
	}
	failed := 0
	for _, c := range todo {
		var err error
		if c.Data == nil {
			err = os.Remove(c.Path)
		} else if err = os.Rename(c.tmp, c.Path); err != nil {
			os.Remove(c.tmp)
		}
		if err != nil {
			fmt.Fprintf(stderr, "leasegen: %v\n", err)
			failed++
			continue
		}
		if *verbose {
			if c.Data == nil {
				fmt.Fprintf(stderr, "leasegen: removed %s (no directives left)\n", c.rel)
			} else {
				fmt.Fprintf(stderr, "leasegen: wrote %s\n", c.rel)
			}
		}
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "leasegen: %d of %d generated file changes failed (the others were made)\n", failed, len(todo))
		return 1
	}
	return 0
}

// everyBuild reports whether go build compiles a Go file of this name on
// every platform: go/build's own name rules, asked for a platform that no
// _GOOS or _GOARCH suffix names.
func everyBuild(name string) bool {
	ctx := build.Default
	ctx.GOOS, ctx.GOARCH, ctx.BuildTags = "leasegenos", "leasegenarch", nil
	ctx.OpenFile = func(string) (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("package p\n")), nil }
	ok, err := ctx.MatchFile(".", name)
	return err == nil && ok
}

// createTemp is os.CreateTemp (a test makes it fail).
var createTemp = os.CreateTemp

// stage writes data to a new temporary file beside path, to be renamed
// into place, and returns its name; nothing is left behind on error.
func stage(path string, data []byte) (string, error) {
	tmp, err := createTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return "", err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	err = errors.Join(werr, cerr)
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return tmp.Name(), nil
}

// pathBase is the directory printed paths are relative to: the working
// directory, as go build prints them. go generate, though, starts each
// generator in its package's directory and sets PWD to it, so the
// directory the user typed "go generate ./..." in is unknowable there, and
// "m.go:24:19" would not say which package's m.go. Under go generate
// ($GOPACKAGE and $GOFILE set) paths are relative to the module root
// instead: what go build ./... prints from there, the usual place to run
// go generate ./... and CI's.
func pathBase() string {
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	if os.Getenv("GOPACKAGE") == "" || os.Getenv("GOFILE") == "" {
		return wd
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		if filepath.Dir(dir) == dir {
			return wd
		}
	}
}
