package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
)

func benchClient(b *testing.B) (*lease.Client, *redis.Client) {
	b.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr(), ContextTimeoutEnabled: true})
	c, err := lease.New(rdb)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(); rdb.Close() })
	return c, rdb
}

func nop(context.Context) error { return nil }

// BenchmarkDo is one uncontended protected call: acquire, enter, release.
func BenchmarkDo(b *testing.B) {
	c, _ := benchClient(b)
	s := lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Do(ctx, "bench:do", s, nop); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDoKept is a loop of calls on one key whose lease the Client
// keeps between them (Spec.Keep): after the first, no round trip.
func BenchmarkDoKept(b *testing.B) {
	c, _ := benchClient(b)
	s := lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Keep: time.Second, Fence: true}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Do(ctx, "bench:kept", s, nop); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDoFenced adds fencing-token minting to BenchmarkDo.
func BenchmarkDoFenced(b *testing.B) {
	c, _ := benchClient(b)
	s := lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Fence: true}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Do(ctx, "bench:fenced", s, nop); err != nil {
			b.Fatal(err)
		}
	}
}

var rawRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// BenchmarkRawSetNXEvalDel is the floor: SET NX PX, then a compare-delete
// script by EVALSHA (two round trips, no waiting, renewal or tokens).
func BenchmarkRawSetNXEvalDel(b *testing.B) {
	_, rdb := benchClient(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		ok, err := rdb.SetNX(ctx, "bench:raw", "0123456789abcdef0123456789abcdef", 10*time.Second).Result()
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := rawRelease.Run(ctx, rdb, []string{"bench:raw"}, "0123456789abcdef0123456789abcdef").Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDoContended runs Do from parallel goroutines on one key, with
// waiting: it measures handoffs through the release notification.
func BenchmarkDoContended(b *testing.B) {
	c, _ := benchClient(b)
	s := lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Wait: 50 * time.Second}
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if err := c.Do(ctx, "bench:contended", s, nop); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
