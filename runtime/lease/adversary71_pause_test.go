package lease_test

// Round 71: the server paused (SIGSTOP) while a holder's release with two
// waiters is in flight: the release times out on the holder's side (and
// go-redis may send it again), and runs (once or twice) when the server
// resumes. It must hand the key to the first waiter exactly once (the
// second run, a replay, reads the marked tombstone as "released" and
// writes nothing: the second waiter keeps waiting), mark the tombstone,
// and Watch must name the ending "handed over".

import (
	"context"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

func TestAdversary71_PausedServerRelease(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"do", "lead"} {
		t.Run(kind, func(t *testing.T) {
			srv := leasetest.StartRedis(t)
			ctx := context.Background()
			key := "adv71pause-" + kind
			admin := srv.Client(t)
			// Waiters that send nothing while the server is paused (their
			// re-checks are 5s apart): they enter on the handover.
			hc, hrec := newClient(t, srv.Client(t))
			wc1, _ := newClient(t, srv.Client(t), lease.WithRecheck(5*time.Second))
			wc2, _ := newClient(t, srv.Client(t), lease.WithRecheck(5*time.Second))
			watcher, _ := newClient(t, srv.Client(t))
			// The release script loaded (else the paused server would run
			// an EVALSHA answered NOSCRIPT, and nothing would be released).
			if err := hc.Do(ctx, key+"-warm", spec(time.Second, time.Second), func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}

			var oldID string
			var stop func()
			if kind == "do" {
				h := holdUntil(t, hc, key, lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Fence: true})
				oldID = inspect(t, watcher, key).Holder
				stop = func() {
					close(h.release)
					if err := <-h.done; err != nil {
						t.Logf("the holder's Do: %v", err)
					}
				}
			} else {
				term := adv26Lead(hc, key, lease.LeadSpec{TTL: 10 * time.Second, Owner: "P1"})
				oldID = term.waitEntered(t).Owner()
				stop = func() {
					term.cancel()
					select {
					case err := <-term.done:
						if err != nil {
							t.Logf("the leader's Lead: %v", err)
						}
					case <-time.After(10 * time.Second):
						t.Error("Lead did not return in 10s")
					}
				}
			}
			// Reads of Watch bounded by 4s: longer than the pause.
			w := startWatch(t, watcher, key, 4*time.Second)
			w.next(lease.ChangeHeld, key)
			type entry struct {
				n  int
				id string
			}
			entered := make(chan entry, 2)
			release := make(chan struct{})
			dones := make(chan error, 2)
			for i, c := range []*lease.Client{wc1, wc2} {
				go func() {
					dones <- c.Do(ctx, key, lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Wait: 40 * time.Second, Fence: true},
						func(fctx context.Context) error {
							l, _ := lease.FromContext(fctx)
							entered <- entry{i, l.Owner()}
							<-release
							return nil
						})
				}()
				adv39WaitQueued(t, srv, key, int64(i+1))
			}
			srv.Pause()
			paused := true
			defer func() {
				if paused {
					srv.Resume()
				}
			}()
			stopped := make(chan struct{})
			go func() { stop(); close(stopped) }()
			time.Sleep(1200 * time.Millisecond)
			srv.Resume()
			paused = false
			<-stopped
			for _, e := range hrec.Events() {
				if e.Kind == lease.EventReleaseUnconfirmed {
					t.Logf("the release during the pause: %v (took %v)", e.Err, e.Took)
				}
			}

			var first entry
			select {
			case first = <-entered:
			case <-time.After(10 * time.Second):
				t.Fatal("no waiter entered within 10s of the resume")
			}
			if first.n != 0 {
				t.Errorf("waiter %d entered first, want the first queued", first.n)
			}
			// The second waiter is still waiting: no second handover.
			time.Sleep(500 * time.Millisecond)
			select {
			case e := <-entered:
				t.Fatalf("waiter %d entered too while the first holds the key", e.n)
			default:
			}
			if info := inspect(t, watcher, key); info.Holder != first.id || info.Queued != 1 {
				t.Errorf("after the resume: holder %q (want the first waiter's %q), %d queued (want 1)", info.Holder, first.id, info.Queued)
			}
			want := "1>"
			if kind == "lead" {
				want = "l>"
			}
			if v := admin.Get(ctx, "lease:{"+key+"}:r:"+oldID).Val(); v != want {
				t.Errorf("the old holder's tombstone %q, want %q", v, want)
			}
			ch := w.next(lease.ChangeEnded, key)
			if ch.Info.Holder != oldID || ch.How != "handed over" {
				t.Fatalf("ended %q how %q, want %q \"handed over\"", ch.Info.Holder, ch.How, oldID)
			}
			if g := w.next(lease.ChangeGranted, key); g.Info.Holder != first.id {
				t.Fatalf("granted %q, want %q", g.Info.Holder, first.id)
			}
			close(release)
			for range 2 {
				if err := <-dones; err != nil {
					t.Errorf("a waiter's Do: %v", err)
				}
			}
		})
	}
}
