package lease_test

// Adversary round 70 on Client.Check (c4e9f44): alongside the Client's own
// calls, under a cancelled or short ctx, against a paused server, several
// at once, with a prefix, with a step failing, on a Cluster with its ACL
// recipe. All held; the round's one finding was a renewal's refusal that
// named no command (adversary70_renew_test.go).

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

func adv70Log(t *testing.T, steps []lease.CheckStep) {
	for _, s := range steps {
		t.Logf("%v\t%s: %v", s.Took.Round(time.Millisecond), s.Name, s.Err)
	}
}

// Check while the same Client holds a lease, has a call waiting for it and
// keeps a lease between calls: none of them is disturbed, and the Client's
// Observer hears nothing of Check's keys.
func TestAdversary70_CheckLeavesOwnCallsAlone(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	c, rec := newClient(t, srv.Client(t))
	ctx := context.Background()
	held, kept := "held", "kept"
	release := make(chan struct{})
	var lostCause error
	var mu sync.Mutex
	holderIn := make(chan struct{})
	holderDone := make(chan error, 1)
	go func() {
		holderDone <- c.Do(ctx, held, lease.Spec{TTL: time.Second, Deadline: 30 * time.Second}, func(fctx context.Context) error {
			close(holderIn)
			select {
			case <-release:
			case <-fctx.Done():
				mu.Lock()
				lostCause = context.Cause(fctx)
				mu.Unlock()
			}
			return nil
		})
	}()
	<-holderIn
	waiterDone := make(chan error, 1)
	go func() {
		waiterDone <- c.Do(ctx, held, lease.Spec{TTL: time.Second, Deadline: 30 * time.Second, Wait: 25 * time.Second}, func(context.Context) error { return nil })
	}()
	if err := c.Do(ctx, kept, lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Keep: 20 * time.Second}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	keptVal := admin.Get(ctx, lockKey(kept)).Val()
	time.Sleep(100 * time.Millisecond)
	before := len(rec.Events())

	steps, err := c.Check(ctx)
	adv70Log(t, steps)
	if err != nil {
		t.Errorf("Check: %v", err)
	}
	select {
	case err := <-waiterDone:
		t.Errorf("the Client's waiter returned during Check: %v", err)
	default:
	}
	select {
	case err := <-holderDone:
		mu.Lock()
		t.Errorf("the Client's holder returned during Check: %v (cause %v)", err, lostCause)
		mu.Unlock()
	default:
	}
	if v := admin.Get(ctx, lockKey(kept)).Val(); v != keptVal {
		t.Errorf("the kept lease's key is %q after Check, was %q", v, keptVal)
	}
	for _, e := range rec.Events()[before:] {
		if strings.Contains(e.Key, "leasegen-check") {
			t.Errorf("Check's event reached the Client's Observer: %v %q", e.Kind, e.Key)
		}
		if e.Kind == lease.EventLost || e.Kind == lease.EventRenewFailed || e.Kind == lease.EventReleased {
			t.Errorf("own call event during Check: %v %q %v", e.Kind, e.Key, e.Err)
		}
	}
	close(release)
	if err := <-holderDone; err != nil {
		t.Errorf("holder: %v", err)
	}
	select {
	case err := <-waiterDone:
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("waiter did not get the key after the holder's release")
	}
}

// A ctx already cancelled, or one whose deadline passes during a step:
// Check returns promptly and leaves no goroutine behind. Not parallel: it
// counts the process's goroutines.
func TestAdversary70_CheckCtxEndsPromptly(t *testing.T) {
	srv := leasetest.StartRedis(t)
	c, _ := newClient(t, srv.Client(t))
	// warm up (pools, scripts)
	if _, err := c.Check(context.Background()); err != nil {
		t.Fatalf("warm Check: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	base := runtime.NumGoroutine()

	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	steps, err := c.Check(cctx)
	took := time.Since(start)
	t.Logf("cancelled: %v, err %v", took, err)
	if err == nil {
		t.Errorf("Check with a cancelled ctx reported success")
	}
	if took > time.Second {
		adv70Log(t, steps)
		t.Errorf("Check with a cancelled ctx took %v", took)
	}
	for _, d := range []time.Duration{50 * time.Millisecond, 400 * time.Millisecond, 1200 * time.Millisecond, 2500 * time.Millisecond} {
		dctx, cancel := context.WithTimeout(context.Background(), d)
		start := time.Now()
		steps, err := c.Check(dctx)
		took := time.Since(start)
		cancel()
		t.Logf("deadline %v: took %v, err=%v", d, took, err != nil)
		if err == nil {
			t.Errorf("deadline %v: Check passed", d)
		}
		if took > d+time.Second {
			adv70Log(t, steps)
			t.Errorf("deadline %v: Check took %v", d, took)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("%d goroutines, %d before:\n%s", n, base, buf)
	}
}

// A paused server (SIGSTOP): Check with a 1.5s deadline returns within
// bounded time after it.
func TestAdversary70_CheckPausedServer(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	c, _ := newClient(t, srv.Client(t))
	if _, err := c.Check(context.Background()); err != nil {
		t.Fatalf("warm Check: %v", err)
	}
	srv.Pause()
	defer srv.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	steps, err := c.Check(ctx)
	took := time.Since(start)
	adv70Log(t, steps)
	t.Logf("paused: took %v err=%v", took, err)
	if err == nil {
		t.Errorf("Check against a paused server passed")
	}
	if took > 3*time.Second {
		t.Errorf("Check against a paused server with a 1.5s deadline took %v", took)
	}
}

// Two Checks at once on one Client both pass.
func TestAdversary70_CheckConcurrent(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	c, rec := newClient(t, aclClient(t, srv, "leases", leastPrivilege...))
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			steps, err := c.Check(context.Background())
			if err != nil {
				adv70Log(t, steps)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Check %d: %v", i, err)
		}
	}
	if n := len(rec.Events()); n != 0 {
		t.Errorf("%d events on the Client's Observer", n)
	}
	time.Sleep(1200 * time.Millisecond)
	if keys := admin.Keys(context.Background(), "*").Val(); len(keys) != 0 {
		t.Errorf("keys left: %q", keys)
	}
}

// WithPrefix and the recipe rewritten for that prefix.
func TestAdversary70_CheckWithPrefix(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	var rules []string
	for _, r := range leastPrivilege {
		rules = append(rules, strings.Replace(r, "lease:", "svc:", 1))
	}
	c, _ := newClient(t, aclClient(t, srv, "svc", rules...), lease.WithPrefix("svc:"))
	steps, err := c.Check(context.Background())
	adv70Log(t, steps)
	if err != nil {
		t.Errorf("Check with prefix svc: %v", err)
	}
	time.Sleep(1200 * time.Millisecond)
	if keys := admin.Keys(context.Background(), "*").Val(); len(keys) != 0 {
		t.Errorf("keys left: %q", keys)
	}
}

// Each permission taken out: whatever Check leaves behind must expire (no
// key without a TTL), and apart from -del's fence counters nothing should
// stay past the tombstones.
func TestAdversary70_CheckLeftoversWhenAStepFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var wg sync.WaitGroup
	for _, perm := range leastPrivilege {
		if !strings.HasPrefix(perm, "+") && !strings.HasPrefix(perm, "&") {
			continue
		}
		srv := leasetest.StartRedis(t)
		admin := srv.Client(t)
		c, _ := newClient(t, aclClient(t, srv, "u70", without(leastPrivilege, perm)...))
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Check(ctx)
			if err == nil {
				t.Errorf("without %s: Check passed", perm)
			}
			time.Sleep(1200 * time.Millisecond)
			for _, k := range admin.Keys(ctx, "*").Val() {
				pttl := admin.PTTL(ctx, k).Val()
				if pttl < 0 {
					t.Errorf("without %s: key %q left with no TTL (%v)", perm, k, pttl)
				} else if perm != "+del" {
					t.Logf("without %s: key %q left, PTTL %v", perm, k, pttl)
				}
			}
		}()
	}
	wg.Wait()
}

// A 3-master Cluster with the README's leases-cluster recipe.
func TestAdversary70_CheckClusterRecipe(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	rules := append(append([]string{}, leastPrivilege...), "+cluster|slots", "+command", "+asking")
	cc := cl.ACLUser(t, "leases-cluster", "pw", rules...)
	c, rec := newClient(t, cc)
	steps, err := c.Check(context.Background())
	adv70Log(t, steps)
	if err != nil {
		t.Errorf("Check on a Cluster with the recipe: %v", err)
	}
	if len(steps) != 3*7 { // each master's (since Check tries each)
		t.Errorf("%d steps", len(steps))
	}
	if n := len(rec.Events()); n != 0 {
		t.Errorf("%d events on the Client's Observer", n)
	}
	// each missing cluster permission is named
	for _, perm := range []string{"+asking", "+cluster|slots"} {
		cc := cl.ACLUser(t, "lc-"+strings.ReplaceAll(perm[1:], "|", "-"), "pw", without(rules, perm)...)
		c, _ := newClient(t, cc)
		_, err := c.Check(context.Background())
		t.Logf("without %s: %v", perm, err)
		if err == nil {
			t.Errorf("Cluster without %s: Check passed", perm)
		}
	}
	time.Sleep(1200 * time.Millisecond)
	admin := cl.Client(t)
	var left []string
	admin.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		ks := m.Keys(ctx, "*").Val()
		for _, k := range ks {
			left = append(left, fmt.Sprintf("%s(pttl %v)", k, m.PTTL(ctx, k).Val()))
		}
		return nil
	})
	t.Logf("left on cluster: %v", left)
	for _, k := range left {
		if strings.Contains(k, "pttl -1") {
			t.Errorf("key without TTL left: %s", k)
		}
	}
	_ = errors.New
}
