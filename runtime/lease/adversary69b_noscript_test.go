package lease_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv69bHook runs callbacks of a test at chosen points of the user's
// client: before a command (proc), a pipeline (pipe) and a dial (dial) is
// processed, once switched on.
type adv69bHook struct {
	on   atomic.Bool
	proc func(cmd redis.Cmder)
	pipe func(cmds []redis.Cmder)
	dial func(addr string)
}

func (h *adv69bHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h.on.Load() && h.dial != nil {
			h.dial(addr)
		}
		return next(ctx, network, addr)
	}
}

func (h *adv69bHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() && h.proc != nil {
			h.proc(cmd)
		}
		return next(ctx, cmd)
	}
}

func (h *adv69bHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.on.Load() && h.pipe != nil {
			h.pipe(cmds)
		}
		return next(ctx, cmds)
	}
}

func adv69bHas(cmds []redis.Cmder, name string) bool {
	for _, c := range cmds {
		if strings.EqualFold(c.Name(), name) {
			return true
		}
	}
	return false
}

// adv69bClient is a lease Client through a proxy of its own (PoolSize 1,
// MaxRetries 3, ContextTimeoutEnabled so that the hook sees the lease
// commands), warmed up so that renew scripts were loaded by a renewal.
func adv69bClient(t *testing.T, srv *leasetest.Server, hook *adv69bHook, opts ...lease.Option) (*leasetest.Proxy, *lease.Client, *leasetest.Recorder) {
	t.Helper()
	p := leasetest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1, MaxRetries: 3,
		MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 2 * time.Millisecond,
		DialTimeout: 200 * time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(hook)
	c, rec := newClient(t, rdb, opts...)
	ctx := context.Background()
	if err := c.Do(ctx, uniqueKey(t), lease.Spec{TTL: 600 * time.Millisecond, Deadline: 2 * time.Second}, func(context.Context) error {
		time.Sleep(450 * time.Millisecond)
		return nil
	}); err != nil || rec.Count(lease.EventRenewed) == 0 {
		t.Fatalf("warm-up renewal: %v, %v", err, kinds(rec.Events()))
	}
	return p, c, rec
}

// adv69bFirstRenewFailure holds key with a 3s TTL, switches the hook on
// once in fn, and returns the first EventRenewFailed's error and the key's
// PTTL right after it, and Do's error.
func adv69bFirstRenewFailure(t *testing.T, c *lease.Client, rec *leasetest.Recorder, admin *redis.Client, hook *adv69bHook, key string) (renewErr error, pttl time.Duration, doErr error) {
	t.Helper()
	ctx := context.Background()
	const ttl = 3 * time.Second
	doErr = c.Do(ctx, key, lease.Spec{TTL: ttl, Deadline: 5 * time.Second, MinValidity: 100 * time.Millisecond}, func(fctx context.Context) error {
		hook.on.Store(true)
		entered := time.Now()
		for renewErr == nil && time.Since(entered) < ttl {
			for _, e := range rec.Events() {
				if e.Kind == lease.EventRenewFailed && e.Key == key {
					renewErr = e.Err
					break
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		pttl = admin.PTTL(ctx, lockKey(key)).Val()
		t.Logf("first renewal failed %v after entry; key's PTTL then %v", time.Since(entered), pttl)
		<-fctx.Done()
		return nil
	})
	return renewErr, pttl, doErr
}

// Attack 3 on the renewal with WithReplicas (renew.go sendWaited): the
// pipeline EVALSHA renew.lua + WAIT is written and carried out, its reply
// is cut; go-redis re-sends it on a new connection, where the script cache
// is gone (SCRIPT FLUSH just before that dial: a restart, a failover to a
// node without the script) and it is answered NOSCRIPT; the EVAL pass that
// follows cannot connect. The first send extended the key: the renewal is
// unknown, never refused. evalCmd keeps a write count above 1 for this
// reason (forgetNoScript); sendWaited starts the EVAL pass with fresh
// counters.
func TestAdversary69b_ReplicatedRenewCutThenNoscriptThenDialRefused(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	rep := srv.StartReplica(t)
	srv.WaitReplicas(t, rep)
	admin := srv.Client(t)

	var p *leasetest.Proxy
	var stage atomic.Int32
	hook := &adv69bHook{}
	hook.pipe = func(cmds []redis.Cmder) {
		switch {
		case adv69bHas(cmds, "evalsha") && stage.CompareAndSwap(0, 1):
			p.Set(leasetest.CutNextReply)
		case adv69bHas(cmds, "eval") && stage.CompareAndSwap(2, 3):
			_ = p.Refuse()
			p.CloseConns()
			time.Sleep(20 * time.Millisecond)
		}
	}
	hook.dial = func(string) {
		if stage.CompareAndSwap(1, 2) {
			if err := admin.ScriptFlush(context.Background()).Err(); err != nil {
				t.Errorf("script flush: %v", err)
			}
		}
	}
	p, c, rec := adv69bClient(t, srv, hook, lease.WithReplicas(1, 200*time.Millisecond))
	key := uniqueKey(t)
	renewErr, pttl, err := adv69bFirstRenewFailure(t, c, rec, admin, hook, key)
	t.Logf("Do: %v; renewal event: %v; stage %d, cut %d", err, renewErr, stage.Load(), p.Cut())
	if p.Cut() != 1 || stage.Load() != 3 || renewErr == nil {
		t.Fatalf("the test did not play its scenario (cut %d, stage %d, renewal error %v)", p.Cut(), stage.Load(), renewErr)
	}
	adv69RanButUnknown(t, pttl, 2*time.Second, renewErr)
}

// The same on a standalone server without replicas (renew.go send,
// args.go evalCmd): EVALSHA renew_many.lua carried out, reply cut, re-sent
// on a new connection and answered NOSCRIPT (the cache flushed before that
// dial), then EVAL cannot connect: unknown (the write count was 2, which
// forgetNoScript keeps).
func TestAdversary69b_RenewCutThenNoscriptThenDialRefused(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)

	var p *leasetest.Proxy
	var stage atomic.Int32
	hook := &adv69bHook{}
	hook.proc = func(cmd redis.Cmder) {
		switch {
		case strings.EqualFold(cmd.Name(), "evalsha") && stage.CompareAndSwap(0, 1):
			p.Set(leasetest.CutNextReply)
		case strings.EqualFold(cmd.Name(), "eval") && stage.CompareAndSwap(2, 3):
			_ = p.Refuse()
			p.CloseConns()
			time.Sleep(20 * time.Millisecond)
		}
	}
	hook.dial = func(string) {
		if stage.CompareAndSwap(1, 2) {
			if err := admin.ScriptFlush(context.Background()).Err(); err != nil {
				t.Errorf("script flush: %v", err)
			}
		}
	}
	p, c, rec := adv69bClient(t, srv, hook)
	key := uniqueKey(t)
	renewErr, pttl, err := adv69bFirstRenewFailure(t, c, rec, admin, hook, key)
	t.Logf("Do: %v; renewal event: %v; stage %d, cut %d", err, renewErr, stage.Load(), p.Cut())
	if p.Cut() != 1 || stage.Load() != 3 || renewErr == nil {
		t.Fatalf("the test did not play its scenario (cut %d, stage %d, renewal error %v)", p.Cut(), stage.Load(), renewErr)
	}
	adv69RanButUnknown(t, pttl, 2*time.Second, renewErr)
}

// A renewal answered NOSCRIPT (SCRIPT FLUSH on the server, nothing run),
// whose EVAL cannot connect, ran nowhere: it is refused, and the key's
// PTTL shows no renewal. Both without and with WithReplicas.
func TestAdversary69b_RenewNoscriptThenDialRefusedIsRefused(t *testing.T) {
	t.Parallel()
	for _, replicas := range []bool{false, true} {
		t.Run(map[bool]string{false: "standalone", true: "replicas"}[replicas], func(t *testing.T) {
			srv := leasetest.StartRedis(t)
			var opts []lease.Option
			if replicas {
				rep := srv.StartReplica(t)
				srv.WaitReplicas(t, rep)
				opts = append(opts, lease.WithReplicas(1, 200*time.Millisecond))
			}
			admin := srv.Client(t)
			var p *leasetest.Proxy
			var stage atomic.Int32
			onEvalsha := func() {
				if stage.CompareAndSwap(0, 1) {
					if err := admin.ScriptFlush(context.Background()).Err(); err != nil {
						t.Errorf("script flush: %v", err)
					}
				}
			}
			onEval := func() {
				if stage.CompareAndSwap(1, 2) {
					_ = p.Refuse()
					p.CloseConns()
					time.Sleep(20 * time.Millisecond)
				}
			}
			hook := &adv69bHook{}
			hook.proc = func(cmd redis.Cmder) {
				switch strings.ToLower(cmd.Name()) {
				case "evalsha":
					onEvalsha()
				case "eval":
					onEval()
				}
			}
			hook.pipe = func(cmds []redis.Cmder) {
				switch {
				case adv69bHas(cmds, "evalsha"):
					onEvalsha()
				case adv69bHas(cmds, "eval"):
					onEval()
				}
			}
			p, c, rec := adv69bClient(t, srv, hook, opts...)
			key := uniqueKey(t)
			renewErr, pttl, err := adv69bFirstRenewFailure(t, c, rec, admin, hook, key)
			t.Logf("Do: %v; renewal event: %v; stage %d", err, renewErr, stage.Load())
			if stage.Load() != 2 || renewErr == nil {
				t.Fatalf("the test did not play its scenario (stage %d, renewal error %v)", stage.Load(), renewErr)
			}
			if pttl > 2*time.Second+200*time.Millisecond {
				t.Fatalf("the key's PTTL %v: a renewal ran, though it was answered NOSCRIPT and its EVAL never connected", pttl)
			}
			// On a loaded machine go-redis's dial retries may outlast the
			// renewal's flight: then its deadline ends the EVAL, and
			// unknown is as right (inconclusive here, not a failure).
			late := errors.Is(renewErr, lease.ErrUnknown) && errors.Is(renewErr, context.DeadlineExceeded)
			if late {
				t.Logf("the EVAL's dials outlasted the renewal's flight: %v", renewErr)
			} else if !errors.Is(renewErr, lease.ErrRefused) {
				t.Fatalf("a renewal answered NOSCRIPT whose EVAL never connected: %v, want ErrRefused", renewErr)
			}
			if !errors.Is(err, lease.ErrLost) {
				t.Fatalf("Do: %v, want ErrLost", err)
			}
		})
	}
}

// Attack 3 on ForceRelease's end of a hold-min (inspect.go endHold,
// evalCmd): "flushed": the script cache flushed before the EVALSHA
// (answered NOSCRIPT, nothing run), the EVAL cannot connect: ErrRefused,
// and the hold is still on the server. "cut": the EVALSHA carried out, its
// reply cut, the re-send answered NOSCRIPT (cache flushed before its
// dial), the EVAL cannot connect: ErrUnknown, the hold gone.
func TestAdversary69b_ForceEndHoldNoscript(t *testing.T) {
	t.Parallel()
	for _, variant := range []string{"flushed", "cut"} {
		t.Run(variant, func(t *testing.T) {
			srv := leasetest.StartRedis(t)
			admin := srv.Client(t)
			ctx := context.Background()
			holder, _ := newClient(t, srv.Client(t))
			hold := func(key string) lease.Info { return adv69Hold(t, holder, key) }
			flush := func() {
				if err := admin.ScriptFlush(context.Background()).Err(); err != nil {
					t.Errorf("script flush: %v", err)
				}
			}
			var p *leasetest.Proxy
			var stage atomic.Int32
			hook := &adv69bHook{}
			hook.proc = func(cmd redis.Cmder) {
				switch {
				case strings.EqualFold(cmd.Name(), "evalsha") && stage.CompareAndSwap(0, 1):
					if variant == "flushed" {
						flush()
						stage.Store(2)
					} else {
						p.Set(leasetest.CutNextReply)
					}
				case strings.EqualFold(cmd.Name(), "eval") && stage.CompareAndSwap(2, 3):
					_ = p.Refuse()
					p.CloseConns()
					time.Sleep(20 * time.Millisecond)
				}
			}
			hook.dial = func(string) {
				if stage.CompareAndSwap(1, 2) {
					flush()
				}
			}
			p = leasetest.StartProxy(t, srv.Addr())
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1, MaxRetries: 3,
				MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 2 * time.Millisecond,
				DialTimeout: 200 * time.Millisecond, ContextTimeoutEnabled: true})
			t.Cleanup(func() { rdb.Close() })
			rdb.AddHook(hook)
			op, _ := newClient(t, rdb)
			if res, err := op.ForceRelease(ctx, "warm", hold("warm").Holder); err != nil || res != lease.ForceHoldEnded {
				t.Fatalf("warm-up force: %v, %v", res, err)
			}
			key := uniqueKey(t)
			info := hold(key)
			hook.on.Store(true)
			res, err := op.ForceRelease(ctx, key, info.Holder)
			exists := admin.Exists(ctx, lockKey(key)).Val()
			t.Logf("ForceRelease: %v, %v (stage %d, cut %d, key exists %d)", res, err, stage.Load(), p.Cut(), exists)
			if stage.Load() != 3 {
				t.Fatalf("the test did not play its scenario")
			}
			if variant == "flushed" {
				if exists != 1 {
					t.Fatalf("the hold is gone, though its EVALSHA was answered NOSCRIPT and its EVAL never connected")
				}
				if !errors.Is(err, lease.ErrRefused) {
					t.Fatalf("nothing ran, ForceRelease says %v: want ErrRefused", err)
				}
				return
			}
			if p.Cut() != 1 || exists != 0 {
				t.Fatalf("the cut end of hold was not carried out (cut %d, exists %d)", p.Cut(), exists)
			}
			if errors.Is(err, lease.ErrRefused) || !errors.Is(err, lease.ErrUnknown) {
				t.Fatalf("the hold was ended, ForceRelease says %v: want ErrUnknown", err)
			}
		})
	}
}
