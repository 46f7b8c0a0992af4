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

// Env sets the environment for running go in such a module: GOFLAGS is
// Flags (-mod=mod, because the module's go.mod is written by hand, not by
// go mod tidy, and -race when the test binary was built with it).
//
// The module proxy stays whatever the environment says. The go.sum copied
// from this repository pins every module version the graph can reach, but
// building this repository downloads only the modules it compiles: the
// go.mod files of the rest of the graph (testify, required by pgpassfile's
// pre-modules go.mod) are fetched on first use. With GOPROXY=off that
// worked only on a module cache that something else had warmed.
//
// Where the process's GOFLAGS is Flags already (Main set it, so that tests
// may run in parallel: a test that calls t.Setenv cannot), Env leaves it.
func Env(t testing.TB) {
	if os.Getenv("GOFLAGS") == Flags {
		return
	}
	t.Setenv("GOFLAGS", Flags)
}

// Main is a TestMain's body for a package whose tests run go commands in
// parallel: it sets GOFLAGS to Flags for the whole process (see Env), then
// runs the tests. A test that sets the environment itself (t.Setenv) stays
// sequential; parallel tests start only after every sequential one ended.
func Main(m *testing.M) int {
	os.Setenv("GOFLAGS", Flags)
	return m.Run()
}

// Flags is the GOFLAGS that Env sets: -mod=mod, and -race when this test
// binary was built with -race. The go commands a test runs for this
// platform (go build, go vet, go run, and the go list -export of the
// generator's loader) then build the configuration go test already built,
// and find the standard library and every dependency in the build cache.
// Without it, a cold cache (CI's) compiles all of them once more for the
// configuration without -race: about a minute on two cores.
const Flags = CrossFlags + raceFlag

// RaceFlag is what Flags adds to CrossFlags: " -race" in a test binary
// built with -race, else "". A test that sets GOFLAGS of its own appends
// it, so that its go commands build the configuration go test built.
const RaceFlag = raceFlag

// ToolBuild is the flag for a go build or go run of a tool the test runs
// (cmd/leasecheck, by itself or as go vet's -vettool): -race=false, which
// overrides Flags' -race for the tool alone. The race detector slows an
// analysis several times (go vet runs the tool on every dependency), far
// more than compiling the tool's packages once without it costs; the
// packages the tool loads still build as Flags says.
const ToolBuild = "-race=false"

// CrossFlags is the GOFLAGS for a go command that builds for another
// platform, with CGO_ENABLED=0 or with no C compiler: Flags without -race,
// which needs cgo.
const CrossFlags = "-mod=mod"

// GoEnv returns os.Environ() with env appended, for a go command run in a
// module that WriteModule wrote. When env asks for another platform or for
// no cgo (GOOS, GOARCH or CGO_ENABLED=0), -race is taken out of GOFLAGS
// (it needs cgo); the rest of GOFLAGS stays.
func GoEnv(env ...string) []string {
	cross := false
	goflags := os.Getenv("GOFLAGS")
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		switch {
		case k == "GOOS" && v != runtime.GOOS, k == "GOARCH" && v != runtime.GOARCH, k == "CGO_ENABLED" && v == "0":
			cross = true
		case k == "GOFLAGS":
			goflags = v
		}
	}
	out := append(os.Environ(), env...)
	if cross {
		var keep []string
		for _, f := range strings.Fields(goflags) {
			if f != "-race" && f != "-race=true" {
				keep = append(keep, f)
			}
		}
		out = append(out, "GOFLAGS="+strings.Join(keep, " "))
	}
	return out
}
