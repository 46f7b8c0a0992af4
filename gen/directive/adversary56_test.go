package directive_test

import (
	"go/token"
	"strings"
	"testing"

	"github.com/leasegen/leasegen/gen/directive"
)

// A quoted first argument is the key, whatever it reads as; unquoted, a
// key that reads as an option is refused with how to write it.
func TestAdversary56_QuotedKeyIsAKey(t *testing.T) {
	for text, key := range map[string]string{
		`//lease:lock "region=eu" deadline=1s`:    "region=eu",
		`//lease:lock "fence" deadline=1s`:        "fence",
		"//lease:lock `mode=batch` deadline=1s":   "mode=batch",
		`//lease:leader "role=primary" ttl=10s`:   "role=primary",
		`//lease:lock "tenant={t}:x" deadline=1s`: "tenant={t}:x",
	} {
		d, errs := directive.Parse(token.Pos(1), text)
		if len(errs) > 0 || d == nil {
			t.Errorf("%s: refused: %v", text, errs)
			continue
		}
		if d.Key != key {
			t.Errorf("%s: key %q, want %q", text, d.Key, key)
		}
	}
	for text, want := range map[string]string{
		"//lease:lock region=eu deadline=1s": `needs a key first, as in //lease:lock orders:{orderID} deadline=1m (if region=eu is the key, quote it: "region=eu")`,
		"//lease:leader fence":               `needs a key first, as in //lease:leader jobs:settle ttl=10s (if fence is the key, quote it: "fence")`,
	} {
		_, errs := directive.Parse(token.Pos(1), text)
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), want) {
			t.Errorf("%s: %v, want one error containing %q", text, errs, want)
		}
	}
}
