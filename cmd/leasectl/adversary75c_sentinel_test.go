package main

// Adversary round 75c (leasectl): a Sentinel deployment. Pointed at a
// node's URL, leasectl reaches that node, also after a failover demoted
// it (for about 9s it is still a writable master, and a release there
// said "released" while the new primary's holder kept the lease: the
// round's finding). With -sentinel it goes where the services' failover
// clients go.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// a75cFailover runs SENTINEL FAILOVER from the first primary once its
// replicas have its writes, and returns it and the new primary.
func a75cFailover(t *testing.T, sn *leasetest.Sentinel) (old, np *leasetest.Server) {
	t.Helper()
	old = sn.Data[0]
	if err := old.WaitSync(context.Background(), sn.Data[1:]...); err != nil {
		t.Fatal(err)
	}
	fctx, fcancel := context.WithTimeout(context.Background(), 12*time.Second)
	defer fcancel()
	np, err := sn.Failover(fctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failed over from %s to %s", old.Addr(), np.Addr())
	return old, np
}

// A holder (a service on the failover client) holds two leases; SENTINEL
// FAILOVER moves the primary, and the old one, alive, stays a writable
// primary for about 9s (README, Deployments). An operator runs leasectl
// release -yes -sentinel: it must release on the deployment's primary,
// and the holder must learn it (README, Operate it: "the holder learns it
// at its next renewal and stops with ErrLost"; within a third of its TTL,
// plus slack). Once the old node is a replica, a release pointed at that
// node's own URL must fail (exit 1) rather than claim a release.
func TestAdversary75c_LeasectlReleaseOnSentinelNodes(t *testing.T) {
	t.Parallel()
	const ttl = 4500 * time.Millisecond
	sn := leasetest.StartSentinel(t)
	ctx := context.Background()
	svc := sn.FailoverClient(t, func(o *redis.FailoverOptions) { o.DialTimeout = 300 * time.Millisecond })
	c, err := lease.New(svc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const key, other = "adv75c:sentinel", "adv75c:sentinel-node"
	h := a17Hold(t, c, key, lease.Spec{TTL: ttl, Deadline: time.Minute})
	a17Hold(t, c, other, lease.Spec{TTL: ttl, Deadline: time.Minute})
	old, np := a75cFailover(t, sn)
	// The holder renews on the new primary for a moment.
	time.Sleep(ttl / 3)
	select {
	case cause := <-h.cause:
		t.Fatalf("the holder lost its lease in the failover (not this test's subject): %v", cause)
	default:
	}
	addrs := sn.SentinelAddrs()
	url := "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
	code, out, errOut := leasectl(t, "", "release", "-yes", "-sentinel", sn.Name, "-url", url, key)
	at := time.Now()
	t.Logf("leasectl release -sentinel: exit %d\n%s%s", code, out, errOut)
	if code != 0 || !strings.Contains(out, "released") {
		t.Fatalf("leasectl release -sentinel %s: exit %d, %q %q", sn.Name, code, out, errOut)
	}
	if v := np.Client(t).Get(ctx, "lease:{"+key+"}:l").Val(); v != "" {
		t.Errorf("leasectl -sentinel said released, but the deployment's primary %s still holds %q", np.Addr(), v)
	}
	select {
	case cause := <-h.cause:
		if !errors.Is(cause, lease.ErrLost) {
			t.Errorf("holder: %v", cause)
		}
	case <-time.After(time.Until(at.Add(ttl/3 + 1500*time.Millisecond))):
		t.Errorf("leasectl said released; the holder, renewing on the new primary, was not told within TTL/3 + 1.5s")
	}
	// Once the old primary is a replica of the new one, a release sent
	// to its own URL is refused there.
	sctx, scancel := context.WithTimeout(ctx, 14*time.Second)
	err = sn.WaitSettled(sctx)
	scancel()
	if err != nil {
		t.Fatal(err)
	}
	if v := np.Client(t).Get(ctx, "lease:{"+other+"}:l").Val(); v == "" {
		t.Fatalf("%s: not held on the primary after the failover", other)
	}
	code, out, errOut = leasectl(t, "", "release", "-yes", "-url", old.URL(), other)
	t.Logf("leasectl release on the demoted node: exit %d\n%s%s", code, out, errOut)
	if code == 0 {
		t.Errorf("leasectl release against a replica exited 0: %s", out)
	}
	if code, _, errOut := leasectl(t, "", "list", "-cluster", "-sentinel", sn.Name, "-url", url); code != 2 || !strings.Contains(errOut, "choose one") {
		t.Errorf("leasectl list -cluster -sentinel: exit %d, %q; want usage", code, errOut)
	}
}
