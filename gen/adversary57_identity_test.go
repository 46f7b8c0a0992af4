package gen_test

import (
	"path/filepath"
	"strings"
	"testing"
)

// Round 57, change 4d2d8f7: identity= a package-level string constant is
// checked at generate time, whatever form the constant takes; and a
// parameter of the name shadows the constant (not checked, not refused).
func TestAdversary57_ConstIdentityForms(t *testing.T) {
	long := strings.Repeat("n", 101)
	cases := map[string]struct {
		src    string
		refuse bool
	}{
		"typed":    {"type Name string\n\nconst node Name = \"" + long + long + "\"\n", true},
		"expr":     {"const base = \"" + long + "\"\n\nconst node = base + base\n", true},
		"iota":     {"const (\n\tx = iota\n\tnode = string(rune('a'+x)) + \"" + long + long + "\"\n)\n", true},
		"ok200":    {"const node = \"" + strings.Repeat("n", 200) + "\"\n", false},
		"empty":    {"const node = \"\"\n", false},
		"multibyt": {"const node = \"" + strings.Repeat("é", 101) + "\"\n", true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			mod := adv46Module(t)
			adv46Write(t, mod, map[string]string{"p/p.go": "package p\n\nimport \"context\"\n\n" + c.src +
				"\n//lease:leader jobs:settle ttl=3s identity=node\nfunc settle(ctx context.Context) error { return nil }\n"})
			errs := adv46Generate(t, filepath.Join(mod, "p"))
			got := strings.Join(errs, "\n")
			if c.refuse != strings.Contains(got, "the runtime would refuse this candidate") {
				t.Errorf("refuse=%v; got:\n%s", c.refuse, got)
			}
		})
	}
	t.Run("shadowed", func(t *testing.T) {
		mod := adv46Module(t)
		adv46Write(t, mod, map[string]string{"p/p.go": "package p\n\nimport \"context\"\n\nconst node = \"" + long + long + "\"\n" +
			"\n//lease:leader jobs:settle ttl=3s identity=node\nfunc settle(ctx context.Context, node string) error { return nil }\n"})
		adv46GenerateBuilds(t, mod, "p")
		if errs := adv46Generate(t, filepath.Join(mod, "p")); errs != nil {
			t.Errorf("the parameter node shadows the constant, yet: %s", strings.Join(errs, "\n"))
		}
	})
}
