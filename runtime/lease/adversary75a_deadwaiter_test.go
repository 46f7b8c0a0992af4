package lease_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

const a75ChildEnv = "A75_WAITER_ADDR"

// a75ChildWaiter is the child process of TestAdversary75a_WaiterProcessDies:
// one Client (re-check 300ms) whose call waits for the key, then blocks.
func a75ChildWaiter(addr string) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	c, err := lease.New(rdb, lease.WithRecheck(300*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	err = c.Do(context.Background(), "a75-dead", lease.Spec{TTL: 10 * time.Second, Deadline: 60 * time.Second, Wait: 50 * time.Second}, func(context.Context) error {
		fmt.Println("ENTERED")
		select {}
	})
	fmt.Println("returned:", err)
	select {}
}

// A waiter whose process is killed (SIGKILL) or stopped (SIGSTOP) while
// queued: its place lasts "two re-check intervals past its last look"
// (README, Release) and then the queue and its expiries are gone while the
// holder still holds the key; the holder's release then deletes the key
// (no handover to the dead place) and only its tombstone remains, for 1s.
func TestAdversary75a_WaiterProcessDies(t *testing.T) {
	if addr := os.Getenv(a75ChildEnv); addr != "" {
		a75ChildWaiter(addr)
		return
	}
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := leasetest.StartRedis(t)
			admin := srv.Client(t)
			holder, _ := newClient(t, srv.Client(t))
			rel := make(chan struct{})
			hdone := hold(t, holder, "a75-dead", lease.Spec{TTL: 10 * time.Second, Deadline: 10 * time.Second}, rel)

			cmd := exec.Command(os.Args[0], "-test.run=^TestAdversary75a_WaiterProcessDies$", "-test.count=1")
			cmd.Env = append(os.Environ(), a75ChildEnv+"="+srv.Addr())
			out := &a75Buf{}
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = cmd.Process.Signal(syscall.SIGKILL)
				_ = cmd.Wait()
			})
			end := time.Now().Add(8 * time.Second)
			for admin.ZCard(ctx, "lease:{a75-dead}:q").Val() == 0 {
				if time.Now().After(end) {
					t.Fatalf("the child never queued; its output: %s", out)
				}
				time.Sleep(10 * time.Millisecond)
			}
			// Let it look a few times (re-checks), then the signal.
			time.Sleep(700 * time.Millisecond)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			signalled := time.Now()
			const bound = 2*300*time.Millisecond + 100*time.Millisecond
			for {
				ks, err := a75Scan(ctx, admin)
				if err != nil {
					t.Fatal(err)
				}
				a75NoPersistent(t, "after the signal", ks)
				a75Bounds(t, "after the signal", ks, map[string]time.Duration{"queue": bound, "qexp": bound})
				_, q := ks["lease:{a75-dead}:q"]
				_, x := ks["lease:{a75-dead}:x"]
				if !q && !x {
					break
				}
				if time.Since(signalled) > bound+500*time.Millisecond {
					t.Fatalf("the dead waiter's queue still there %v after the %v:%v", time.Since(signalled), sig, ks)
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("queue gone %v after the %v", time.Since(signalled).Round(time.Millisecond), sig)
			close(rel)
			if err := <-hdone; err != nil {
				t.Fatalf("holder: %v", err)
			}
			ks, _ := a75Scan(ctx, admin)
			if _, ok := ks["lease:{a75-dead}:l"]; ok {
				t.Errorf("the release handed the key to the dead waiter:%v", ks)
			}
			a75Drain(t, "after the holder's release", 1200*time.Millisecond, admin)
		})
	}
}
