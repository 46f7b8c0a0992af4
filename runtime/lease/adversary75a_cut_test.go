package lease_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Replies cut (the request ran, the client sees EOF; go-redis re-sends)
// and blackholed (requests run, no reply) on one Client's connections
// while it and a direct Client contend: acquires, renewals and releases
// with unknown outcomes. Whatever is left must carry a TTL within its
// kind's bound at every look, and everything drains once the calls end:
// at most a lease's TTL (1s: a grant whose release was lost too) and a
// tombstone's life after the last call.
func TestAdversary75a_CutAndBlackholedReplies(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	p := leasetest.StartProxy(t, srv.Addr())
	const recheck = 200 * time.Millisecond
	opts := []lease.Option{lease.WithRecheck(recheck), lease.WithCounterTTL(time.Second), lease.WithReleaseTimeout(100 * time.Millisecond)}
	prdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: 3})
	t.Cleanup(func() { prdb.Close() })
	faulty, frec := newClient(t, prdb, opts...)
	direct, _ := newClient(t, srv.Client(t), opts...)
	keys := []string{"a75-cut-0", "a75-cut-1", "a75-cut-2"}

	stop := make(chan struct{})
	bounds := map[string]time.Duration{
		"lock": time.Second, "tomb": time.Second, "counter": time.Second,
		"queue": 2*recheck + 100*time.Millisecond, "qexp": 2*recheck + 100*time.Millisecond,
	}
	looks := a75Sample(t, bounds, stop, admin)
	faults := make(chan int, 1)
	go func() {
		r := rand.New(rand.NewPCG(75, 1))
		n := 0
		defer func() { faults <- n }()
		for {
			select {
			case <-stop:
				p.Set(leasetest.Pass)
				return
			case <-time.After(time.Duration(5+r.IntN(40)) * time.Millisecond):
			}
			n++
			if r.IntN(12) == 0 {
				p.Set(leasetest.Blackhole)
				time.Sleep(time.Duration(50+r.IntN(150)) * time.Millisecond)
				p.Set(leasetest.Pass)
			} else {
				p.Set(leasetest.CutNextReply)
			}
		}
	}()
	go func() { time.Sleep(3 * time.Second); close(stop) }()
	calls, entered := a75Mix([]*lease.Client{faulty, faulty, direct}, keys, 10, stop)
	nf := <-faults
	faulty.Close()
	direct.Close()
	t.Logf("%d calls, %d entered, %d faults (%d replies cut), %d looks; faulty Client: %d unknown acquires, %d unconfirmed releases",
		calls, entered, nf, p.Cut(), <-looks, frec.Count(lease.EventAcquireUnknown), frec.Count(lease.EventReleaseUnconfirmed))
	if p.Cut() < 10 {
		t.Errorf("only %d replies cut", p.Cut())
	}
	a75Drain(t, "after the faults", 2200*time.Millisecond, admin)
}
