package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
)

// locker is one library under test: run fn while holding key.
type locker interface {
	name() string
	// with takes key (waiting up to wait when wait > 0), runs fn, releases.
	with(ctx context.Context, key string, ttl, wait time.Duration, fn func()) error
	// config says how the library was set up, for the report.
	config() string
}

// raw is the floor: SET NX PX, then a compare-delete script by EVALSHA.
// Contended, it polls every 2ms.
type raw struct{ rdb *redis.Client }

var rawDel = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func (raw) name() string   { return "raw SET NX + EVALSHA DEL" }
func (raw) config() string { return "2 round trips; contended: SET NX every 2ms" }

func (r raw) with(ctx context.Context, key string, ttl, wait time.Duration, fn func()) error {
	var b [16]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	deadline := time.Now().Add(wait)
	for {
		ok, err := r.rdb.SetNX(ctx, key, id, ttl).Result()
		if err != nil {
			return err
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("busy")
		}
		time.Sleep(2 * time.Millisecond)
	}
	fn()
	return rawDel.Run(ctx, r.rdb, []string{key}, id).Err()
}

// leasegenDo calls lease.Do; leasegenWrapper goes through a generated
// wrapper (see wrapper.go).
type leasegenDo struct {
	c     *lease.Client
	fence bool
}

func (l leasegenDo) name() string {
	if l.fence {
		return "leasegen lease.Do (fence)"
	}
	return "leasegen lease.Do"
}
func (leasegenDo) config() string { return "1 round trip each way; waits on release notifications" }

func (l leasegenDo) with(ctx context.Context, key string, ttl, wait time.Duration, fn func()) error {
	return l.c.Do(ctx, key, lease.Spec{TTL: ttl, Deadline: wait + 5*time.Second, Wait: wait, MinValidity: ttl / 2, Fence: l.fence},
		func(context.Context) error { fn(); return nil })
}

type leasegenWrapper struct{ s *Service }

func (leasegenWrapper) name() string { return "leasegen generated wrapper (fence)" }
func (leasegenWrapper) config() string {
	return "//lease:lock bench:{key} ttl=10s deadline=1m wait=30s fence"
}

func (l leasegenWrapper) with(ctx context.Context, key string, ttl, wait time.Duration, fn func()) error {
	return l.s.Protected(ctx, key, fn)
}

// redsyncLocker is go-redsync/redsync with one pool.
type redsyncLocker struct{ rs *redsync.Redsync }

func newRedsync(rdb *redis.Client) redsyncLocker {
	return redsyncLocker{redsync.New(goredis.NewPool(rdb))}
}

func (redsyncLocker) name() string   { return "go-redsync/redsync v4" }
func (redsyncLocker) config() string { return "one pool; contended: retry every 2ms" }

func (r redsyncLocker) with(ctx context.Context, key string, ttl, wait time.Duration, fn func()) error {
	tries := 1
	if wait > 0 {
		tries = int(wait/(2*time.Millisecond)) + 1
	}
	m := r.rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(tries), redsync.WithRetryDelay(2*time.Millisecond))
	if err := m.LockContext(ctx); err != nil {
		return err
	}
	fn()
	_, err := m.UnlockContext(ctx)
	return err
}

// bsmLocker is bsm/redislock.
type bsmLocker struct{ c *redislock.Client }

func (bsmLocker) name() string   { return "bsm/redislock" }
func (bsmLocker) config() string { return "contended: LinearBackoff(2ms)" }

func (b bsmLocker) with(ctx context.Context, key string, ttl, wait time.Duration, fn func()) error {
	opt := &redislock.Options{}
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
		opt.RetryStrategy = redislock.LinearBackoff(2 * time.Millisecond)
	}
	l, err := b.c.Obtain(ctx, key, ttl, opt)
	if err != nil {
		return err
	}
	fn()
	return l.Release(context.WithoutCancel(ctx))
}
