package gen_test

import (
	"path/filepath"
	"strings"
	"testing"
)

// Round 57 (an adversary round on f6ce037): the advice of a name clash
// names the right side. A decorator (names from the interface: rename it)
// and a directive's wrapper (name=) in either order, and a decorator
// against an internal test file, another platform's file and an import
// name.
func TestAdversary57_DecoratorClashMessages(t *testing.T) {
	iface := "type Store interface {\n\t//lease:lock a:{id} deadline=1s\n\tSave(ctx context.Context, id string) error\n}\n"
	fn := "//lease:lock b:{id} deadline=1s\nfunc newLeasedStore(ctx context.Context, id string) error { return nil }\n"
	head := "package p\n\nimport \"context\"\n\n"
	cases := map[string]struct {
		files map[string]string
		want  []string
	}{
		"funcFirst": {map[string]string{"p.go": head + fn + "\n" + iface},
			[]string{"is also generated for the directive at p.go:5:1; choose another for it with name=, or rename the interface Store (its decorator is named after it)"}},
		"ifaceFirst": {map[string]string{"p.go": head + iface + "\n" + fn},
			[]string{"is also generated for the decorator of interface Store at", "; choose another with name="}},
		"testFile": {map[string]string{"p.go": head + iface, "p_test.go": "package p\n\ntype leasedStore int\n"},
			[]string{"a test file of the package", "rename the interface Store (its decorator is named after it) or the other declaration"}},
		"otherPlatform": {map[string]string{"p.go": head + iface, "p_plan9.go": "package p\n\nfunc NewLeasedStore() {}\n"},
			[]string{"for another platform or build tag", "rename the interface Store"}},
		"import": {map[string]string{"p.go": "package p\n\nimport (\n\t\"context\"\n\tleasedStore \"strings\"\n)\n\nvar _ = leasedStore.Cut\n\n" + iface},
			[]string{"imports package strings under", "rename the interface Store"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			mod := adv46Module(t)
			files := map[string]string{}
			for f, s := range c.files {
				files["p/"+f] = s
			}
			adv46Write(t, mod, files)
			got := strings.Join(adv46Generate(t, filepath.Join(mod, "p")), "\n")
			t.Logf("%s", got)
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("want %q in:\n%s", w, got)
				}
			}
			if strings.Contains(got, "choose another with name=") && name != "ifaceFirst" {
				t.Errorf("advises name= for a decorator:\n%s", got)
			}
		})
	}
}
