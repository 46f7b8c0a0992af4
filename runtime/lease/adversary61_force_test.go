package lease_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv61CutAfterRelease blackholes the proxy once a forced release script
// (its tombstone argument "x") has been answered: the operator's
// connection dies right after the release.
type adv61CutAfterRelease struct {
	p *leasetest.Proxy
	t *testing.T
}

func (h adv61CutAfterRelease) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h adv61CutAfterRelease) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h adv61CutAfterRelease) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		name := strings.ToLower(cmd.Name())
		args := cmd.Args()
		if (name == "evalsha" || name == "eval") && err == nil && len(args) > 0 && fmt.Sprint(args[len(args)-1]) == "x" {
			// The operator's link to the server fails: its connections
			// close and new ones are refused.
			_ = h.p.Refuse()
			h.p.CloseConns()
		}
		if name == "pexpire" || name == "publish" {
			h.t.Logf("operator's %s after the release: %v", name, err)
		}
		return err
	}
}

// ForceRelease's doc: "The holder is told as an ordinary loss: its next
// renewal (within a third of its TTL) or its release finds the lease
// gone, its function's context is cancelled with a cause wrapping ErrLost
// that says it was released from outside". The tombstone that says so was
// written by the script for the tombstone TTL (1s by default) and
// extended to the holder's remaining TTL by a separate PEXPIRE, whose
// failure was ignored: when the operator's connection failed between the
// two, ForceRelease still reported ForceReleased, and the holder's renewal
// (3s later here) found no tombstone (adversary round 61). The script now
// sets that TTL itself.
func TestAdversary61_ForceReleaseCauseWithoutTheOperatorsConnection(t *testing.T) {
	srv := leasetest.StartRedis(t)
	holderC, _ := newClient(t, srv.Client(t))
	p := leasetest.StartProxy(t, srv.Addr())
	opRdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { opRdb.Close() })
	opRdb.AddHook(adv61CutAfterRelease{p, t})
	op, _ := newClient(t, opRdb)

	key := uniqueKey(t)
	h := holdUntil(t, holderC, key, lease.Spec{TTL: 9 * time.Second, Deadline: time.Minute})
	info := inspect(t, holderC, key)
	res, err := op.ForceRelease(context.Background(), key, info.Holder)
	t.Logf("ForceRelease = %v, %v", res, err)
	admin := srv.Client(t)
	tomb := "lease:{" + key + "}:r:" + info.Holder
	t.Logf("tombstone %q: %q, pttl %v", tomb, admin.Get(context.Background(), tomb).Val(), admin.PTTL(context.Background(), tomb).Val())
	if err != nil || res != lease.ForceReleased {
		t.Fatalf("ForceRelease = %v, %v; want released", res, err)
	}
	select {
	case cause := <-h.cause:
		t.Logf("holder's cause: %v", cause)
		if !strings.Contains(cause.Error(), "released from outside") {
			t.Errorf("ForceRelease returned ForceReleased, but the holder was told %q, not that it was released from outside", cause)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the holder never learned of the loss")
	}
}
