package main

// Adversary round 18: leasectl's identityLike must accept exactly what the
// runtime's ForceRelease accepts (isIdentity): "hex" and "hex/owner".

import (
	"context"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// The runtime's verdict, read from ForceRelease: a string it does not take
// for an identity is refused before anything is sent.
func adv18RuntimeAccepts(t *testing.T, c *lease.Client, s string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := c.ForceRelease(ctx, "adv18:none", s)
	if err != nil && strings.Contains(err.Error(), "not a holder's identity") {
		return false
	}
	if err != nil {
		t.Fatalf("ForceRelease(%q) = %v", s, err)
	}
	return true
}

func TestAdversary18_IdentityLikeMatchesRuntime(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hex := "0123456789abcdef0123456789abcdef"
	cases := []string{
		"", "/", "a/", "/a", hex, hex + "/", hex + "/o", hex + "//o", hex + "/o/p", hex + "/o:p", hex + ":1",
		strings.ToUpper(hex), hex[:31], hex + "0", hex[:31] + "/o", hex + "0/o", hex + "/%2F", hex + "/pod 7",
		hex + "/é", hex + "/\x00", hex + "/|", hex[:31] + "g", hex[:30] + "é", "/" + hex, hex + "/" + hex,
		hex + "/o\xff", hex[:31] + "\xff", hex + "/:", hex + "/a:", hex + "/a/",
	}
	rng := rand.New(rand.NewSource(18))
	alpha := []byte("0af9gA/:%|\xff é")
	for range 1500 {
		var b strings.Builder
		if rng.Intn(2) == 0 {
			b.WriteString(hex[:28+rng.Intn(5)])
		}
		for n := rng.Intn(6); n > 0; n-- {
			b.WriteByte(alpha[rng.Intn(len(alpha))])
		}
		cases = append(cases, b.String())
	}
	accepted, mismatches := 0, 0
	for _, s := range cases {
		rt := adv18RuntimeAccepts(t, c, s)
		if rt {
			accepted++
		}
		if got := identityLike(s); got != rt {
			mismatches++
			if mismatches <= 10 {
				t.Errorf("identityLike(%q) = %v, runtime ForceRelease accepts it: %v", s, got, rt)
			}
		}
	}
	t.Logf("%d strings, %d accepted by the runtime, %d mismatches", len(cases), accepted, mismatches)
}
