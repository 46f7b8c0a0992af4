// Package gentest helps tests build throwaway modules that use this
// repository.
package gentest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// RepoRoot returns the root of this module.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// WriteModule writes go.mod and go.sum for a module example.com/golden at
// dir that uses this repository by replace, with this repository's
// requirements and go.sum. Callers should run go with GOFLAGS=-mod=mod (Env
// does).
func WriteModule(t testing.TB, dir string) {
	t.Helper()
	if err := Module(RepoRoot(), "example.com/golden", dir); err != nil {
		t.Fatal(err)
	}
}

// Module writes go.mod and go.sum at dir for a module named path that
// uses the leasegen repository at root by replace, with the repository's
// requirements and go.sum.
func Module(root, path, dir string) error {
	own, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return err
	}
	var reqs []string
	in := false
	for _, line := range strings.Split(string(own), "\n") {
		switch {
		case strings.HasPrefix(line, "require ("):
			in = true
		case in && line == ")":
			in = false
		case in:
			reqs = append(reqs, line)
		case strings.HasPrefix(line, "require "):
			reqs = append(reqs, "\t"+strings.TrimPrefix(line, "require "))
		}
	}
	gomod := fmt.Sprintf("module %s\n\ngo 1.26\n\nrequire (\n\tgithub.com/leasegen/leasegen v0.0.0\n%s\n)\n\nreplace github.com/leasegen/leasegen => %s\n", path, strings.Join(reqs, "\n"), root)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644)
}

// Env sets the environment for running go in such a module: -mod=mod,
// because the module's go.mod is written by hand, not by go mod tidy.
//
// The module proxy stays whatever the environment says. The go.sum copied
// from this repository pins every module version the graph can reach, but
// building this repository downloads only the modules it compiles: the
// go.mod files of the rest of the graph (testify, required by pgpassfile's
// pre-modules go.mod) are fetched on first use. With GOPROXY=off that
// worked only on a module cache that something else had warmed.
func Env(t testing.TB) {
	t.Setenv("GOFLAGS", "-mod=mod")
}
