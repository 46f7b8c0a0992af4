package gen_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/gen"
	"github.com/leasegen/leasegen/internal/gentest"
)

// synthetic writes a package of n annotated methods and functions.
func synthetic(b *testing.B, n int) string {
	b.Helper()
	gentest.Env(b)
	mod := b.TempDir()
	gentest.WriteModule(b, mod)
	dir := filepath.Join(mod, "big")
	os.MkdirAll(dir, 0o755)
	var src strings.Builder
	src.WriteString("package big\n\nimport (\n\t\"context\"\n\n\t\"github.com/leasegen/leasegen/runtime/lease\"\n)\n\ntype S struct{ c *lease.Client }\n\ntype Req struct{ ID int64; Name *string }\n\n")
	for i := range n {
		if i%2 == 0 {
			fmt.Fprintf(&src, "//lease:lock k%d:{id}:{req.ID} ttl=10s deadline=1m wait=2s fence\nfunc (s *S) f%d(ctx context.Context, id string, req *Req) (int, error) { return %d, nil }\n\n", i, i, i)
		} else {
			fmt.Fprintf(&src, "//lease:lock j%d:{n}/{req.Name} deadline=30s busy=skip\nfunc g%d(ctx context.Context, n uint32, req *Req) error { return nil }\n\n", i, i)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "big.go"), []byte(src.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

// touch changes a comment so that no cached result is reused.
func touch(b *testing.B, dir string, i int) {
	if err := os.WriteFile(filepath.Join(dir, "touch.go"), []byte(fmt.Sprintf("package big\n\n// run %d\n", i)), 0o644); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkGenerate1000 runs the generator on 1,000 annotated functions;
// compare with BenchmarkGoVet1000 on the same package in the same run.
func BenchmarkGenerate1000(b *testing.B) {
	dir := synthetic(b, 1000)
	i := 0
	for b.Loop() {
		touch(b, dir, i)
		i++
		files, err := gen.Generate(gen.Config{Dir: dir})
		if err != nil || len(files) != 1 {
			b.Fatal(len(files), err)
		}
	}
}

// BenchmarkGenerate10000 is the same with ten times the functions: the
// generator's time should grow linearly (about ten times Generate1000).
func BenchmarkGenerate10000(b *testing.B) {
	dir := synthetic(b, 10000)
	i := 0
	for b.Loop() {
		touch(b, dir, i)
		i++
		files, err := gen.Generate(gen.Config{Dir: dir})
		if err != nil || len(files) != 1 {
			b.Fatal(len(files), err)
		}
	}
}

func BenchmarkGoVet1000(b *testing.B) {
	dir := synthetic(b, 1000)
	i := 0
	for b.Loop() {
		touch(b, dir, i)
		i++
		cmd := exec.Command("go", "vet", ".")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v\n%s", err, out)
		}
	}
}

// BenchmarkGenerateVsVet1000 alternates the two on the same package and
// reports their ratio (gen/vet, target ≤ 1.0): on a shared machine, load
// that changes between BenchmarkGenerate1000 and BenchmarkGoVet1000 would
// otherwise decide the comparison.
func BenchmarkGenerateVsVet1000(b *testing.B) {
	dir := synthetic(b, 1000)
	var genTime, vetTime time.Duration
	i := 0
	for b.Loop() {
		touch(b, dir, i)
		i++
		start := time.Now()
		if files, err := gen.Generate(gen.Config{Dir: dir}); err != nil || len(files) != 1 {
			b.Fatal(len(files), err)
		}
		genTime += time.Since(start)

		touch(b, dir, i)
		i++
		start = time.Now()
		cmd := exec.Command("go", "vet", ".")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v\n%s", err, out)
		}
		vetTime += time.Since(start)
	}
	b.ReportMetric(float64(genTime.Milliseconds())/float64(b.N), "gen-ms/op")
	b.ReportMetric(float64(vetTime.Milliseconds())/float64(b.N), "vet-ms/op")
	b.ReportMetric(float64(genTime)/float64(vetTime), "gen/vet")
}
