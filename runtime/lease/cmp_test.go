package lease_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
)

func TestCmpRaw(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	c, _ := newClient(t, rdb)
	ctx := context.Background()
	var dl, rl, al []time.Duration
	for range 10 {
		for range 300 {
			s := time.Now()
			c.Do(ctx, "cmp", lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute}, func(context.Context) error { return nil })
			dl = append(dl, time.Since(s))
		}
		for range 300 {
			s := time.Now()
			rdb.SetNX(ctx, "cmpraw", "x", 10*time.Second)
			rawRelease.Run(ctx, rdb, []string{"cmpraw"}, "x")
			rl = append(rl, time.Since(s))
		}
		for range 300 {
			s := time.Now()
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			rdb.SetNX(cctx, "cmpraw", "x", 10*time.Second)
			rawRelease.Run(cctx, rdb, []string{"cmpraw"}, "x")
			cancel()
			al = append(al, time.Since(s))
		}
	}
	p := func(d []time.Duration) time.Duration { sort.Slice(d, func(i, j int) bool { return d[i] < d[j] }); return d[len(d)/2] }
	t.Logf("Do p50 %v; raw p50 %v; raw with ctx deadline p50 %v", p(dl), p(rl), p(al))
}
