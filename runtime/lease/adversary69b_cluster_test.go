package lease_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv69bClusterRig is a Cluster whose client dials every node through a
// proxy of its own (made on first dial), so that one node's replies can be
// cut and its dials refused.
type adv69bClusterRig struct {
	t       *testing.T
	cl      *leasetest.Cluster
	mu      sync.Mutex
	proxies map[string]*leasetest.Proxy // by node address
	refused sync.Map                    // node address -> true: dials refused
	onDial  func(addr string)
}

func (r *adv69bClusterRig) proxy(addr string) *leasetest.Proxy {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.proxies[addr]
	if p == nil {
		p = leasetest.StartProxy(r.t, addr)
		r.proxies[addr] = p
	}
	return p
}

func (r *adv69bClusterRig) client(hook redis.Hook) *redis.ClusterClient {
	cc := r.cl.Client(r.t, func(o *redis.ClusterOptions) {
		o.MaxRetries, o.PoolSize = 3, 1
		o.MinRetryBackoff, o.MaxRetryBackoff = time.Millisecond, 2*time.Millisecond
		o.DialTimeout = 200 * time.Millisecond
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if f := r.onDial; f != nil {
				f(addr)
			}
			if _, ok := r.refused.Load(addr); ok {
				return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
			}
			var d net.Dialer
			return d.DialContext(ctx, network, r.proxy(addr).Addr())
		}
	})
	if hook != nil {
		cc.AddHook(hook)
	}
	return cc
}

// keysOn returns two keys whose leases live on different masters, and
// those masters' addresses.
func (r *adv69bClusterRig) keysOn(t *testing.T) (k1, k2, a1, a2 string) {
	ctx := context.Background()
	base := uniqueKey(t)
	for i := 0; ; i++ {
		k := fmt.Sprintf("%s-%d", base, i)
		m, err := r.cl.MasterForKey(ctx, lockKey(k))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case k1 == "":
			k1, a1 = k, m.Addr()
		case m.Addr() != a1:
			return k1, k, a1, m.Addr()
		}
	}
}

// Attack 1 and 3 on Cluster renewals (renew.go sendCluster): two leases on
// different masters renewed in one pipeline. Master A carries out its
// renewal, its reply is cut. Variant "refused": A refuses every dial from
// then on (go-redis's re-send cannot connect). Variant "noscript": the
// re-send connects, A's script cache was flushed just before (a restart),
// it is answered NOSCRIPT, and the EVAL that follows cannot connect. In
// both, the lease on A was extended on the server: its renewal is unknown,
// never refused; the lease on B is renewed.
func TestAdversary69b_ClusterRenewCut(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	for _, variant := range []string{"refused", "noscript"} {
		t.Run(variant, func(t *testing.T) {
			rig := &adv69bClusterRig{t: t, cl: cl, proxies: map[string]*leasetest.Proxy{}}
			k1, k2, addrA, _ := rig.keysOn(t)
			ctx := context.Background()
			mA, _ := cl.MasterForKey(ctx, lockKey(k1))
			adminA := mA.Client(t)
			admin := cl.Client(t)

			var stage atomic.Int32
			var piped atomic.Int32
			hook := &adv69bHook{}
			arm := func() {
				rig.proxy(addrA).Set(leasetest.CutNextReply)
				if variant == "refused" {
					rig.refused.Store(addrA, true)
					_ = rig.proxy(addrA).Refuse()
				}
			}
			hook.pipe = func(cmds []redis.Cmder) {
				switch {
				case adv69bHas(cmds, "evalsha") && stage.CompareAndSwap(0, 1):
					piped.Store(int32(len(cmds)))
					arm()
				case variant == "noscript" && adv69bHas(cmds, "eval") && stage.CompareAndSwap(2, 3):
					rig.refused.Store(addrA, true)
					_ = rig.proxy(addrA).Refuse()
					rig.proxy(addrA).CloseConns()
					time.Sleep(20 * time.Millisecond)
				}
			}
			rig.onDial = func(addr string) {
				if variant == "noscript" && addr == addrA && stage.CompareAndSwap(1, 2) {
					if err := adminA.ScriptFlush(context.Background()).Err(); err != nil {
						t.Errorf("script flush: %v", err)
					}
				}
			}
			c, rec := newClient(t, rig.client(hook))
			// Warm-up: the renew script in every master's cache.
			var wg sync.WaitGroup
			warm := func(k string) {
				defer wg.Done()
				if err := c.Do(ctx, k, lease.Spec{TTL: 600 * time.Millisecond, Deadline: 2 * time.Second}, func(context.Context) error {
					time.Sleep(450 * time.Millisecond)
					return nil
				}); err != nil {
					t.Errorf("warm-up %s: %v", k, err)
				}
			}
			wg.Add(2)
			go warm(k1)
			go warm(k2)
			wg.Wait()
			if rec.Count(lease.EventRenewed) < 2 {
				t.Fatalf("warm-up renewals: %v", kinds(rec.Events()))
			}

			const ttl = 3 * time.Second
			s := lease.Spec{TTL: ttl, Deadline: 5 * time.Second, MinValidity: 100 * time.Millisecond}
			entered := make(chan struct{}, 2)
			release := make(chan struct{})
			errs := make([]error, 2)
			for i, k := range []string{k1, k2} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = c.Do(ctx, k, s, func(fctx context.Context) error {
						entered <- struct{}{}
						select {
						case <-fctx.Done():
						case <-release:
						}
						return nil
					})
				}()
			}
			<-entered
			<-entered
			hook.on.Store(true)
			find := func(key string, kind lease.EventKind) *lease.Event {
				for _, e := range rec.Events() {
					if e.Kind == kind && e.Key == key {
						return &e
					}
				}
				return nil
			}
			start := time.Now()
			var failA *lease.Event
			for failA == nil && time.Since(start) < ttl {
				failA = find(k1, lease.EventRenewFailed)
				time.Sleep(5 * time.Millisecond)
			}
			pttlA := admin.PTTL(ctx, lockKey(k1)).Val()
			for find(k2, lease.EventRenewed) == nil && time.Since(start) < ttl {
				time.Sleep(5 * time.Millisecond)
			}
			pttlB := admin.PTTL(ctx, lockKey(k2)).Val()
			renewedB := find(k2, lease.EventRenewed)
			close(release)
			wg.Wait()
			t.Logf("stage %d, pipeline of %d commands, cut %d; A (%s): PTTL %v, event %v; B: PTTL %v, renewed %v; Do: %v / %v",
				stage.Load(), piped.Load(), rig.proxy(addrA).Cut(), k1, pttlA, failA, pttlB, renewedB != nil, errs[0], errs[1])
			want := int32(1)
			if variant == "noscript" {
				want = 3
			}
			if rig.proxy(addrA).Cut() != 1 || stage.Load() != want || failA == nil {
				t.Fatalf("the test did not play its scenario")
			}
			if pttlA <= 2*time.Second {
				t.Fatalf("A's PTTL %v: the cut renewal was not carried out", pttlA)
			}
			if errors.Is(failA.Err, lease.ErrRefused) || !errors.Is(failA.Err, lease.ErrUnknown) {
				t.Errorf("A's renewal was carried out (PTTL %v after it), but its event says %v: want ErrUnknown, never ErrRefused", pttlA, failA.Err)
			}
			if renewedB == nil || pttlB <= 2*time.Second {
				t.Errorf("B's lease (on a healthy master) was not renewed: PTTL %v, events %v", pttlB, kinds(rec.Events()))
			}
			if errs[1] != nil {
				t.Errorf("B's Do: %v, want nil", errs[1])
			}
		})
	}
}
