package gen_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Round 57, change cb44078: quoted keys that read as options, with key
// parts and escapes: errors must point at the part in the source (line
// and column), and the ones that are right must build.
func TestAdversary57_QuotedOptionKeyPositions(t *testing.T) {
	mod := adv46Module(t)
	src := "package p\n\nimport \"context\"\n\n" +
		"//lease:lock \"region=eu:{nope}\" deadline=1s\nfunc a(ctx context.Context, id string) error { return nil }\n\n" +
		"//lease:lock \"a\\tb={nope}\" deadline=1s\nfunc b(ctx context.Context, id string) error { return nil }\n\n" +
		"//lease:leader `fence={nope}` ttl=10s\nfunc c(ctx context.Context, id string) error { return nil }\n\n" +
		"//lease:lock \"\\u00e9t\\u00e9=x:{nope}\" deadline=1s\nfunc d(ctx context.Context, id string) error { return nil }\n"
	adv46Write(t, mod, map[string]string{"p/p.go": src})
	errs := adv46Generate(t, filepath.Join(mod, "p"))
	lines := strings.Split(src, "\n")
	want := map[string]bool{}
	for i, l := range lines {
		if c := strings.Index(l, "{nope}"); c >= 0 && strings.HasPrefix(l, "//lease:") {
			want[filepath.Base("p.go")+":"+itoa(i+1)+":"+itoa(c+1)] = true
		}
	}
	got := map[string]bool{}
	for _, e := range errs {
		if strings.Contains(e, "no parameter nope") {
			f := strings.SplitN(e, ": ", 2)[0]
			got[filepath.Base(f)] = true
		}
	}
	for w := range want {
		if !got[w] {
			t.Errorf("no error at %s; errors:\n%s", w, strings.Join(errs, "\n"))
		}
	}
}

func itoa(n int) string {
	s := ""
	for {
		s = string(rune('0'+n%10)) + s
		n /= 10
		if n == 0 {
			return s
		}
	}
}

// Quoted keys that read as options with escapes that a Go file cannot
// hold verbatim (newline, NUL, a comment end, a backquote) must generate
// a file that builds (or be refused).
func TestAdversary57_QuotedOptionKeyEscapesBuild(t *testing.T) {
	mod := adv46Module(t)
	adv46Write(t, mod, map[string]string{"p/p.go": "package p\n\nimport \"context\"\n\n" +
		"//lease:lock \"a=b\\n//c\" deadline=1s\nfunc a(ctx context.Context) error { return nil }\n\n" +
		"//lease:lock \"x=*/`\\\"{id}\" deadline=1s\nfunc b(ctx context.Context, id string) error { return nil }\n\n" +
		"//lease:leader \"fence\" ttl=10s\nfunc c(ctx context.Context) error { return nil }\n\n" +
		"//lease:lock \"deadline=2s\" deadline=1s wait=500ms\nfunc d(ctx context.Context) error { return nil }\n",
	})
	adv46GenerateBuilds(t, mod, "p")
	gen, _ := os.ReadFile(filepath.Join(mod, "p", "lease_gen.go"))
	t.Logf("%s", gen)
}
