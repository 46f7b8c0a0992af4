package fence_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Held: the Redis store compares tokens as digits whatever the stored
// token looks like: leading zeros, "0", the largest token; a stored token
// that is no decimal integer (negative, letters, empty) refuses every
// write with the server's error (not ErrStale, not ErrUnknown) and
// nothing is written.
func TestAdversary32_RedisStoredTokenShapes(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	st := fence.NewRedis(rdb)
	const max = lease.Token(18446744073709551615)
	cases := []struct {
		stored, owner string
		s             fence.Stamp
		want          string // "ok", "stale" or "error"
	}{
		{"007", "a", fence.Stamp{Token: 7, Owner: "a"}, "ok"},
		{"007", "a", fence.Stamp{Token: 7, Owner: "b"}, "stale"},
		{"007", "a", fence.Stamp{Token: 6, Owner: "a"}, "stale"},
		{"007", "a", fence.Stamp{Token: 8, Owner: "b"}, "ok"},
		{"0", "a", fence.Stamp{Token: 1, Owner: "b"}, "ok"},
		{"000", "", fence.Stamp{Token: 1, Owner: "b"}, "ok"},
		{"18446744073709551615", "a", fence.Stamp{Token: max, Owner: "a"}, "ok"},
		{"18446744073709551615", "a", fence.Stamp{Token: max - 1, Owner: "a"}, "stale"},
		{"018446744073709551615", "a", fence.Stamp{Token: max, Owner: "b"}, "stale"},
		{"9007199254740993", "a", fence.Stamp{Token: 9007199254740992, Owner: "a"}, "stale"},
		{"9007199254740992", "a", fence.Stamp{Token: 9007199254740993, Owner: "b"}, "ok"},
		{"-3", "a", fence.Stamp{Token: 5, Owner: "a"}, "error"},
		{"abc", "a", fence.Stamp{Token: 5, Owner: "a"}, "error"},
		{"", "a", fence.Stamp{Token: 5, Owner: "a"}, "error"},
		{" 5", "a", fence.Stamp{Token: 6, Owner: "a"}, "error"},
	}
	for i, tc := range cases {
		key := "adv32:rec:" + t.Name()
		rdb.Del(ctx, key)
		if err := rdb.HSet(ctx, key, fence.TokenField, tc.stored, fence.OwnerField, tc.owner, "value", "old").Err(); err != nil {
			t.Fatal(err)
		}
		err := st.Set(ctx, tc.s, key, "new")
		v, _ := rdb.HGet(ctx, key, "value").Result()
		got := "error"
		switch {
		case err == nil:
			got = "ok"
		case errors.Is(err, fence.ErrStale):
			got = "stale"
		case errors.Is(err, lease.ErrUnknown):
			got = "unknown"
		}
		if got != tc.want {
			t.Errorf("case %d: stored %q/%q, write %d/%s: %v (%s), want %s", i, tc.stored, tc.owner, tc.s.Token, tc.s.Owner, err, got, tc.want)
		}
		if wrote := v == "new"; wrote != (tc.want == "ok") {
			t.Errorf("case %d: stored %q, write %d: value %q after %v", i, tc.stored, tc.s.Token, v, err)
		}
	}
}

// Held: FromKey under nested leases: each key's own fenced lease, the
// outer one again inside a nested call on the outer key (which reuses it),
// none for a key held without fencing or not held, and a kept fenced
// lease reused by a later call keeps its stamp.
func TestAdversary32_FromKeyNestedAndKept(t *testing.T) {
	srv := leasetest.StartRedis(t)
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	fenced := lease.Spec{TTL: 2 * time.Second, Deadline: 3 * time.Second, Fence: true}
	plain := lease.Spec{TTL: 2 * time.Second, Deadline: 3 * time.Second}
	stamp := func(ctx context.Context, key string) lease.Token {
		s, err := fence.FromKey(ctx, key)
		if err != nil {
			return 0
		}
		return s.Token
	}
	var outerTok lease.Token
	err = c.Do(ctx, "adv32-a", fenced, func(ctx context.Context) error {
		outerTok = stamp(ctx, "adv32-a")
		return c.Do(ctx, "adv32-b", fenced, func(ctx context.Context) error {
			inner := stamp(ctx, "adv32-b")
			if outerTok == 0 || inner == 0 || stamp(ctx, "adv32-a") != outerTok {
				t.Errorf("FromKey: a %d (outer %d), b %d", stamp(ctx, "adv32-a"), outerTok, inner)
			}
			if s, _ := fence.From(ctx); s.Token != inner {
				t.Errorf("From inside b: %d, want b's %d", s.Token, inner)
			}
			return c.Do(ctx, "adv32-a", plain, func(ctx context.Context) error {
				if got := stamp(ctx, "adv32-a"); got != outerTok {
					t.Errorf("FromKey(a) in a nested call on a: %d, want the outer %d", got, outerTok)
				}
				return c.Do(ctx, "adv32-c", plain, func(ctx context.Context) error {
					if _, err := fence.FromKey(ctx, "adv32-c"); !errors.Is(err, fence.ErrNoLease) {
						t.Errorf("FromKey(c), held without fencing: %v, want ErrNoLease", err)
					}
					if _, err := fence.FromKey(ctx, "adv32-zz"); !errors.Is(err, fence.ErrNoLease) {
						t.Errorf("FromKey of a key not held: %v, want ErrNoLease", err)
					}
					if got := stamp(ctx, "adv32-b"); got == 0 {
						t.Errorf("FromKey(b) under c: none")
					}
					return nil
				})
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	kept := fenced
	kept.Keep = 5 * time.Second
	var toks []lease.Token
	for range 2 {
		if err := c.Do(ctx, "adv32-k", kept, func(ctx context.Context) error {
			toks = append(toks, stamp(ctx, "adv32-k"))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if toks[0] == 0 || toks[0] != toks[1] {
		t.Errorf("a kept fenced lease reused: stamps %v, want one token twice", toks)
	}
}

// A stored token past 2^64-1 (written by another program) refuses every
// write, and the refusal names it: it used to say "older than the
// accepted 0" (the Go side could not parse it), which no one could act on.
func TestAdversary32_RedisStaleNamesHugeStoredToken(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const huge = "18446744073709551616"
	if err := rdb.HSet(ctx, "adv32:huge", fence.TokenField, huge, fence.OwnerField, "x").Err(); err != nil {
		t.Fatal(err)
	}
	err := fence.NewRedis(rdb).Set(ctx, fence.Stamp{Token: 18446744073709551615, Owner: "a"}, "adv32:huge", "v")
	if !errors.Is(err, fence.ErrStale) || !strings.Contains(err.Error(), huge) {
		t.Errorf("write under a stored token %s: %v, want ErrStale naming it", huge, err)
	}
}
