package fence_test

import (
	"context"
	"errors"
	"testing"

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
