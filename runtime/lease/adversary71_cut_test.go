package lease_test

// Round 71: real Clients whose release (a Do's, a leader term's, a
// ForceRelease's) hands the key to a waiting Client while the release's
// reply is cut (the script ran; go-redis sees EOF and sends it again: a
// replay), with the releasing user allowed to publish or not (an ACL
// without the channels: no message names the new holder). The replay
// answers as the first run, the releaser reports a release, the waiter
// enters, the tombstone carries the mark ("1>", "l>"; "x" for a forced
// release), and Watch names the ending by it.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv71CutClient is adv40CutClient for an ACL user (user "": the
// default one): a client through a proxy that cuts the reply of the first
// release script on key.
func adv71CutClient(t *testing.T, srv *leasetest.Server, key, user string, rules ...string) (*redis.Client, *leasetest.Proxy) {
	t.Helper()
	if user != "" {
		aclClient(t, srv, user, rules...) // creates the user
	}
	p := leasetest.StartProxy(t, srv.Addr())
	o := &redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: 3}
	if user != "" {
		o.Username, o.Password = user, "pw"
	}
	r := redis.NewClient(o)
	t.Cleanup(func() { r.Close() })
	r.AddHook(&adv40CutRelease{p: p, key: key})
	return r, p
}

// noUnconfirmedReleases fails t with every unconfirmed release rec saw.
func noUnconfirmedReleases(t *testing.T, what string, rec *leasetest.Recorder) {
	t.Helper()
	if n := rec.Count(lease.EventReleaseUnconfirmed); n != 0 {
		for _, e := range rec.Events() {
			if e.Kind == lease.EventReleaseUnconfirmed {
				t.Logf("%s: unconfirmed: %v", what, e.Err)
			}
		}
		t.Errorf("%s: %d unconfirmed releases after a cut reply, want 0 (the replay answers as the first run)", what, n)
	}
}

// TestAdversary71_CutReplyHandoverNamedByWatch: see the file's comment.
// Kinds: a Do's release ("1>"), a leader term stepping down to the next
// candidate ("l>", and WatchLeader names the new leader), a ForceRelease
// of a Do's lease with a waiter ("x": its holder loses the lease with
// ForceRelease as the cause). Each below and at "mute" (the releaser
// without the channels: the waiter, not told, enters at its re-check on
// the claim).
func TestAdversary71_CutReplyHandoverNamedByWatch(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"do", "lead", "force"} {
		for _, mute := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/mute=%v", kind, mute), func(t *testing.T) {
				srv := leasetest.StartRedis(t)
				ctx := context.Background()
				key := "adv71cut-" + kind
				user, rules := "", []string(nil)
				if mute {
					user, rules = "mute71c", without(leastPrivilege, "&lease:*")
				}
				r, p := adv71CutClient(t, srv, key, user, rules...)
				rc, rrec := newClient(t, r) // the releaser (holder, leader or operator)
				wc, _ := newClient(t, srv.Client(t), lease.WithRecheck(200*time.Millisecond))
				watcher, _ := newClient(t, srv.Client(t))
				admin := srv.Client(t)
				// Load the release script through the cut client first (a
				// NOSCRIPT fallback is not the replay).
				if err := rc.Do(ctx, key+"-warm", spec(time.Second, time.Second), func(context.Context) error { return nil }); err != nil {
					t.Fatal(err)
				}
				long := lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Fence: true}

				var oldID string
				var stop func() error // ends the old holding: its release, or the ForceRelease
				var lostCause chan error
				switch kind {
				case "do", "force":
					hc := rc
					if kind == "force" {
						hc, _ = newClient(t, srv.Client(t))
					}
					h := holdUntil(t, hc, key, long)
					lostCause = h.cause
					oldID = inspect(t, watcher, key).Holder
					stop = func() error {
						if kind == "do" {
							close(h.release)
							return <-h.done
						}
						res, err := rc.ForceRelease(ctx, key, oldID)
						if err != nil || res != lease.ForceReleased {
							return fmt.Errorf("ForceRelease = %v, %v; want ForceReleased", res, err)
						}
						return nil
					}
				case "lead":
					term := adv26Lead(rc, key, lease.LeadSpec{TTL: 10 * time.Second, Owner: "L1"})
					oldID = term.waitEntered(t).Owner()
					stop = func() error { term.stop(t); return nil }
				}
				w := startWatch(t, watcher, key, 100*time.Millisecond)
				w.next(lease.ChangeHeld, key)

				// The waiter: a Do, or the second candidate. It holds the
				// key until Watch has seen it hold it.
				seen := make(chan struct{})
				see := sync.OnceFunc(func() { close(seen) })
				t.Cleanup(see)
				entered := make(chan string, 4)
				waited := make(chan error, 1)
				var term2 *adv26Term
				if kind == "lead" {
					term2 = adv26Lead(wc, key, lease.LeadSpec{TTL: 10 * time.Second, Owner: "L2"})
				} else {
					go func() {
						waited <- wc.Do(ctx, key, lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Wait: 30 * time.Second, Fence: true},
							func(fctx context.Context) error {
								l, _ := lease.FromContext(fctx)
								entered <- l.Owner()
								<-seen
								return nil
							})
					}()
				}
				adv39WaitQueued(t, srv, key, 1)
				if err := stop(); err != nil {
					t.Fatal(err)
				}
				if c := p.Cut(); c != 1 {
					t.Fatalf("%d replies cut, want 1 (the release's)", c)
				}
				noUnconfirmedReleases(t, kind, rrec)
				var newID string
				if kind == "lead" {
					newID = term2.waitEntered(t).Owner()
				} else {
					select {
					case newID = <-entered:
					case err := <-waited:
						t.Fatalf("the waiter's Do returned %v without entering", err)
					case <-time.After(10 * time.Second):
						t.Fatal("the waiter did not enter within 10s")
					}
				}
				wantTomb, wantHow := "1>", "handed over"
				switch kind {
				case "lead":
					wantTomb = "l>"
				case "force":
					wantTomb, wantHow = "x", "force-released"
				}
				if v := admin.Get(ctx, "lease:{"+key+"}:r:"+oldID).Val(); v != wantTomb {
					t.Errorf("the old holder's tombstone %q, want %q", v, wantTomb)
				}
				ch := w.next(lease.ChangeEnded, key)
				if ch.Info.Holder != oldID || ch.How != wantHow {
					t.Fatalf("ended %q how %q, want %q %q", ch.Info.Holder, ch.How, oldID, wantHow)
				}
				if g := w.next(lease.ChangeGranted, key); g.Info.Holder != newID {
					t.Fatalf("granted %q, want the waiter %q", g.Info.Holder, newID)
				}
				if kind == "force" {
					select {
					case cause := <-lostCause:
						if !errors.Is(cause, lease.ErrLost) || !strings.Contains(cause.Error(), "ForceRelease") {
							t.Errorf("the forced holder's cause %v, want ErrLost naming ForceRelease", cause)
						}
					case <-time.After(15 * time.Second):
						t.Error("the forced holder's fn was not cancelled within 15s")
					}
				}
				if kind == "lead" {
					lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					ok := false
					for ld := range watcher.WatchLeader(lctx, key) {
						if ld.Holder == newID && ld.Owner == "L2" {
							ok = true
							break
						}
					}
					cancel()
					if !ok {
						t.Error("WatchLeader did not name the new leader")
					}
					term2.stop(t)
				} else {
					see()
					if err := <-waited; err != nil {
						t.Fatal(err)
					}
				}
				w.ended(key, "released")
			})
		}
	}
}
