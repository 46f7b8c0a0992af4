package directive

import (
	"go/token"
	"strings"
	"testing"
)

// Round 34: a key may hold '=' now; the near misses of a forgotten key or a
// misspelt option in first place are still errors, each at the argument.
func TestAdversary34_NearMissesStillErrors(t *testing.T) {
	const base = token.Pos(100)
	cases := []struct {
		text, want, at string
	}{
		{"//lease:lock ttl=5s", "needs a key first", "ttl=5s"},
		{"//lease:lock tll=5s orders:{id}", "needs a key first", "tll=5s"},
		{"//lease:lock fence orders:{id}", "needs a key first", "fence"},
		{"//lease:lock deadline=1m ttl=5s", "needs a key first", "deadline=1m"},
		{"//lease:leader ttl=5s", "needs a key first", "ttl=5s"},
		{"//lease:lock orders:{id} tll=5s", "did you mean ttl?", "tll=5s"},
		{"//lease:lock tenant={t}:jobs tll=5s", "did you mean ttl?", "tll=5s"},
	}
	for _, c := range cases {
		_, errs := Parse(base, c.text)
		if len(errs) == 0 {
			t.Errorf("%q: no error, want %q", c.text, c.want)
			continue
		}
		if !strings.Contains(errs[0].Msg, c.want) {
			t.Errorf("%q: error %q, want one containing %q", c.text, errs[0].Msg, c.want)
		}
		if wantPos := base + token.Pos(strings.Index(c.text, c.at)); errs[0].Pos != wantPos {
			t.Errorf("%q: error at offset %d, want %d (at %q)", c.text, errs[0].Pos-base, wantPos-base, c.at)
		}
	}
	for _, ok := range []string{"//lease:lock tenant={t}:jobs ttl=5s", "//lease:lock kv:{k}={v} fence"} {
		d, errs := Parse(base, ok)
		if len(errs) != 0 || d == nil {
			t.Errorf("%q: errors %v, want a key with '='", ok, errs)
		}
	}
}
