package lease_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// With WithReplicas, a renewal counts only once the replicas have it, as a
// grant does. When a failover promotes the replica, the old primary may go
// on accepting the holder's renewals for a while (until sentinel demotes
// it, or min-replicas-max-lag runs out); those never reach the new
// primary, where the key expires by the last renewal the replica had. Were
// they counted, the holder would go on past that while another holder is
// granted the key on the new primary (a graceful Sentinel failover showed
// it with Lead). Here the replica is promoted under a running call: its
// renewals are no longer acknowledged, and it is told of the loss within
// its validity, with no confirmed renewal after the promotion.
func TestRenewalsWaitForReplicas(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	rep := srv.StartReplica(t)
	srv.WaitReplicas(t, rep)
	for _, fenced := range []bool{false, true} {
		c, rec := newClient(t, srv.Client(t), lease.WithReplicas(1, 50*time.Millisecond))
		key := uniqueKey(t)
		if fenced {
			key += ":fenced"
		}
		const ttl = 600 * time.Millisecond
		s := lease.Spec{TTL: ttl, Deadline: 10 * time.Second, Fence: fenced}
		var promoted time.Time
		err := c.Do(context.Background(), key, s, func(ctx context.Context) error {
			// Two renewals acknowledged first: the path works while the
			// replica follows.
			for rec.Count(lease.EventRenewed) < 2 {
				select {
				case <-ctx.Done():
					t.Fatalf("lost while the replica followed: %v", context.Cause(ctx))
				case <-time.After(10 * time.Millisecond):
				}
			}
			if err := rep.Client(t).SlaveOf(context.Background(), "no", "one").Err(); err != nil {
				t.Fatal(err)
			}
			promoted = time.Now()
			select {
			case <-ctx.Done():
			case <-time.After(3 * time.Second):
				t.Error("the call ran 3s after its replica was promoted: unacknowledged renewals extended its validity")
			}
			return nil
		})
		mustIs(t, err, lease.ErrLost)
		if took := time.Since(promoted); took > ttl+200*time.Millisecond {
			t.Errorf("loss reported %v after the promotion, TTL %v", took, ttl)
		}
		// Each failed renewal is unknown: acknowledged by too few
		// replicas, or WAIT's answer not back within the renewal's
		// deadline (the server notices WAIT's timeout at its hz).
		failed := 0
		for _, e := range rec.Events() {
			switch {
			case e.Kind == lease.EventRenewFailed:
				failed++
				if !errors.Is(e.Err, lease.ErrUnknown) {
					t.Errorf("renewal failure not unknown: %v", e.Err)
				}
			case e.Kind == lease.EventRenewed && e.At.Add(-e.Took).After(promoted):
				t.Errorf("a renewal sent %v after the promotion was confirmed", e.At.Add(-e.Took).Sub(promoted))
			}
		}
		if failed == 0 {
			t.Error("no failed renewal reported")
		}
		// The replica follows again, for the fenced round.
		if err := rep.Client(t).SlaveOf(context.Background(), "127.0.0.1", strconv.Itoa(srv.Port())).Err(); err != nil {
			t.Fatal(err)
		}
		srv.WaitReplicas(t, rep)
	}
}
