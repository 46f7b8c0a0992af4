package fence_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// The fenced write's script, run by the tests with identities of their
// own: a send of a write already carried out (the same identity) writes
// nothing and answers "written", within the last 16 writes under the
// record's stamp; another stamp still refuses it; a new stamp starts the
// list again; and a record written before the list existed takes it up.
func TestRedisWriteIdentities(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("hset.lua")
	if err != nil {
		t.Fatal(err)
	}
	script := redis.NewScript(string(src))
	rdb := leasetest.StartRedis(t).Client(t)
	ctx := context.Background()
	id := func(n int) string { return fmt.Sprintf("%016x", n) }
	// send runs the script as HSet sends it: token, owner, identity, pairs.
	send := func(tok, owner, w, value string) []any {
		t.Helper()
		res, err := script.Run(ctx, rdb, []string{"rec"}, tok, owner, w, "value", value).Slice()
		if err != nil {
			t.Fatalf("write %s by %s:%s: %v", w, tok, owner, err)
		}
		return res
	}
	written := func(res []any) bool { return len(res) == 1 && res[0] == int64(1) }
	value := func() string { return rdb.HGet(ctx, "rec", "value").Val() }
	list := func() []string { return strings.Fields(rdb.HGet(ctx, "rec", fence.WritesField).Val()) }

	// A record as an earlier version of the store left it: a stamp, no
	// identities.
	rdb.HSet(ctx, "rec", fence.TokenField, "5", fence.OwnerField, "a", "value", "old")
	if !written(send("5", "a", id(1), "v1")) || value() != "v1" || len(list()) != 1 {
		t.Fatalf("first write on a record without identities: %q, %v", value(), list())
	}
	if !written(send("5", "a", id(2), "v2")) || value() != "v2" {
		t.Fatalf("second write: %q", value())
	}
	// The first write's late copy: answered as written, writes nothing.
	if !written(send("5", "a", id(1), "v1")) || value() != "v2" {
		t.Fatalf("a late copy of write 1 after write 2: %q, want v2 kept", value())
	}
	// 14 more writes (16 in all): write 1 is still the oldest kept.
	for n := 3; n <= 16; n++ {
		send("5", "a", id(n), fmt.Sprint("v", n))
	}
	if l := list(); len(l) != 16 || l[0] != id(1) || l[15] != id(16) {
		t.Fatalf("after 16 writes: %v", l)
	}
	if !written(send("5", "a", id(1), "v1")) || value() != "v16" {
		t.Fatalf("a late copy of write 1, 15 writes later: %q, want v16 kept", value())
	}
	// A 17th: write 1 leaves the list, which stays 16 long.
	send("5", "a", id(17), "v17")
	if l := list(); len(l) != 16 || l[0] != id(2) || l[15] != id(17) {
		t.Fatalf("after 17 writes: %v", l)
	}
	if !written(send("5", "a", id(2), "v2")) || value() != "v17" {
		t.Fatalf("a late copy of write 2, 15 writes later: %q, want v17 kept", value())
	}
	// Another owner with the same token, or an older token, is refused
	// whatever the identity.
	for _, s := range [][2]string{{"5", "b"}, {"4", "a"}} {
		if res := send(s[0], s[1], id(17), "x"); len(res) != 3 || res[0] != int64(0) || value() != "v17" {
			t.Fatalf("stamp %s:%s with a kept identity: %v, record %q", s[0], s[1], res, value())
		}
	}
	// A newer stamp starts the list again; the old stamp's copies are
	// then stale.
	if !written(send("6", "b", id(17), "w1")) || value() != "w1" || len(list()) != 1 {
		t.Fatalf("a newer stamp: %q, %v", value(), list())
	}
	if res := send("5", "a", id(17), "x"); len(res) != 3 || value() != "w1" {
		t.Fatalf("the old stamp's copy after a newer stamp: %v, record %q", res, value())
	}
	// An identity that is not hex digits is an error, and writes nothing.
	if _, err := script.Run(ctx, rdb, []string{"rec"}, "6", "b", "no id", "value", "x").Result(); err == nil || value() != "w1" {
		t.Fatalf("a write with identity %q: %v, record %q", "no id", err, value())
	}
}

// Each HSet has an identity of its own: two writes of the same values
// under one stamp are both carried out (neither is taken for a copy of
// the other), and the list keeps both.
func TestRedisEqualWritesAreDistinct(t *testing.T) {
	t.Parallel()
	rdb := leasetest.StartRedis(t).Client(t)
	store := fence.NewRedis(rdb)
	ctx := context.Background()
	s := stamp(9, "a")
	for i := 0; i < 3; i++ {
		if err := store.HSet(ctx, s, "rec", "n", "1"); err != nil {
			t.Fatal(err)
		}
		rdb.HDel(ctx, "rec", "n") // an outside change between the writes
	}
	if err := store.HSet(ctx, s, "rec", "n", "1"); err != nil || rdb.HGet(ctx, "rec", "n").Val() != "1" {
		t.Fatalf("the fourth equal write: %v, field %q", err, rdb.HGet(ctx, "rec", "n").Val())
	}
	if n := len(strings.Fields(rdb.HGet(ctx, "rec", fence.WritesField).Val())); n != 4 {
		t.Fatalf("%d identities kept, want 4", n)
	}
	if err := store.HSet(ctx, s, "rec", fence.WritesField, "x"); err == nil || errors.Is(err, fence.ErrStale) {
		t.Fatalf("a write naming %s: %v, want the reserved-field error", fence.WritesField, err)
	}
}
