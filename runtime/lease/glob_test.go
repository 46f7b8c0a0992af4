package lease_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// List's and Watch's globs, against Redis's own matching: GlobMatch
// agrees with KEYS on every pattern and key (plain and random, over bytes
// that are glob syntax or that the runtime escapes), and what ScanGlob
// gives the server finds, in the escaped names, every key GlobMatch
// matches (TestAdversary44_ListGlobOverEscapedBytes).
func TestGlobMatchAgreesWithRedis(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const alphabet = "ab%{}-]^[\\*?x\x01\x7f\x80\xc3\xff"
	rnd := rand.New(rand.NewPCG(44, 1))
	random := func(n int) string {
		b := make([]byte, 1+rnd.IntN(n))
		for i := range b {
			b[i] = alphabet[rnd.IntN(len(alphabet))]
		}
		return string(b)
	}
	keys := []string{"a", "ab", "a%b", "a{b", "a}b", "axb", "%x", "2x", "{y", "7y", "a-b", "a]b", `a\b`, "a*b", "a?b", "a[b", "abc", "^a", "b", "%25", "%7B", "}{"}
	for range 300 {
		keys = append(keys, random(5))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	escape := strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")
	for _, k := range keys {
		rdb.Set(ctx, "p:"+k, "", 0)
		rdb.Set(ctx, "e:"+escape.Replace(k), k, 0)
	}
	patterns := []string{"*", "?", "a?b", "[%]x", "[{]y", "?x", "[^a]*", "[a-c]*", "[c-a]*", `\?*`, `a\`, "[", "[a", "[]]*", "[a-]*", `[\]]*`, "*%*", "*{*", "*}", "[%{}]*", "[^%]?", "a*b*c"}
	for range 300 {
		patterns = append(patterns, random(6))
	}
	for _, p := range patterns {
		var want, got []string
		for _, rk := range rdb.Keys(ctx, "p:"+p).Val() {
			want = append(want, strings.TrimPrefix(rk, "p:"))
		}
		for _, k := range keys {
			if lease.GlobMatch(p, k) {
				got = append(got, k)
			}
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("pattern %q: GlobMatch matches %q, Redis %q", p, got, want)
			continue
		}
		found := map[string]bool{}
		for _, rk := range rdb.Keys(ctx, "e:"+lease.ScanGlob(p)).Val() {
			found[rdb.Get(ctx, rk).Val()] = true
		}
		for _, k := range got {
			if !found[k] {
				t.Errorf("pattern %q: ScanGlob %q does not find %q (escaped %q)", p, lease.ScanGlob(p), k, escape.Replace(k))
			}
		}
	}
}
