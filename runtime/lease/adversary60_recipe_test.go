package lease_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// aclLog60 returns the ACL LOG entries (reason, object) as strings.
func aclLog60(t *testing.T, admin *redis.Client) []string {
	t.Helper()
	r, err := admin.Do(context.Background(), "ACL", "LOG").Slice()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range r {
		var parts []string
		switch m := e.(type) {
		case map[any]any:
			for _, k := range []string{"count", "reason", "context", "object", "username"} {
				parts = append(parts, fmt.Sprintf("%s=%v", k, m[k]))
			}
		case []any:
			for i := 0; i+1 < len(m); i += 2 {
				switch m[i] {
				case "count", "reason", "context", "object", "username":
					parts = append(parts, fmt.Sprintf("%v=%v", m[i], m[i+1]))
				}
			}
		}
		out = append(out, strings.Join(parts, " "))
	}
	return out
}

// Every runtime feature a service uses, under exactly the README's
// recipe, with two processes (two users of the same rules): the ACL LOG
// must stay empty and each feature must behave as without an ACL.
func TestAdversary60_RecipeAllFeatures(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	rules := readmeACL(t, false)
	a, arec := newClient(t, srv.ACLUser(t, "svc60a", "secret", rules...), lease.WithRecheck(10*time.Second))
	b, brec := newClient(t, srv.ACLUser(t, "svc60b", "secret", rules...), lease.WithRecheck(10*time.Second))
	ctx := context.Background()
	step := func(name string) {
		t.Helper()
		if l := aclLog60(t, admin); len(l) > 0 {
			t.Errorf("after %s: ACL LOG has %d entries: %v", name, len(l), l)
			admin.Do(ctx, "ACL", "LOG", "RESET")
		}
	}
	// Fence + queue + notification.
	{
		s := lease.Spec{TTL: 2 * time.Second, Deadline: 5 * time.Second, Wait: 3 * time.Second, Fence: true}
		rel := make(chan struct{})
		held := hold(t, a, "f", s, rel)
		time.AfterFunc(200*time.Millisecond, func() { close(rel) })
		start := time.Now()
		if err := b.Do(ctx, "f", s, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el > time.Second {
			t.Errorf("fenced handoff took %v", el)
		}
		<-held
		step("fence/wait")
	}
	// Keep: a kept lease is released when a waiter in another process announces itself.
	{
		ks := lease.Spec{TTL: 3 * time.Second, Deadline: 2 * time.Second, Keep: 20 * time.Second}
		if err := a.Do(ctx, "k", ks, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := a.Do(ctx, "k", ks, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := b.Do(ctx, "k", lease.Spec{TTL: 2 * time.Second, Deadline: 5 * time.Second, Wait: 4 * time.Second}, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el > time.Second {
			t.Errorf("kept lease released for a waiter after %v (re-check 10s): the announcement did not work", el)
		}
		step("keep")
	}
	// HoldMin: the waiter enters once the hold ends.
	{
		if err := a.Do(ctx, "h", lease.Spec{TTL: 3 * time.Second, Deadline: 2 * time.Second, HoldMin: 700 * time.Millisecond}, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := b.Do(ctx, "h", lease.Spec{TTL: 2 * time.Second, Deadline: 5 * time.Second, Wait: 4 * time.Second}, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el > 1500*time.Millisecond {
			t.Errorf("waiter behind a 700ms hold-min entered after %v", el)
		}
		step("holdmin")
	}
	// Nested.
	{
		err := a.Do(ctx, "n", spec(2*time.Second, 3*time.Second), func(ctx context.Context) error {
			return a.Do(ctx, "n", spec(2*time.Second, 2*time.Second), func(ctx context.Context) error {
				return a.Do(ctx, "n2", spec(2*time.Second, time.Second), func(context.Context) error { return nil })
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		step("nested")
	}
	// Many leases renewed together.
	{
		var wg sync.WaitGroup
		errs := make(chan error, 60)
		for i := 0; i < 60; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				errs <- a.Do(ctx, fmt.Sprintf("m%d", i), spec(600*time.Millisecond, 3*time.Second), func(ctx context.Context) error {
					time.Sleep(1300 * time.Millisecond)
					return ctx.Err()
				})
			}(i)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("many renewals: %v", err)
				break
			}
		}
		step("renew many")
	}
	// Lead / Leader / WatchLeader.
	{
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		ch := b.WatchLeader(wctx, "ldr")
		lctx, lcancel := context.WithCancel(ctx)
		entered := make(chan struct{})
		ldone := make(chan error, 1)
		go func() {
			ldone <- a.Lead(lctx, "ldr", lease.LeadSpec{TTL: time.Second, Owner: "pod-a"}, func(ctx context.Context) error {
				close(entered)
				<-ctx.Done()
				return nil
			})
		}()
		select {
		case <-entered:
		case err := <-ldone:
			t.Fatalf("Lead: %v", err)
		case <-time.After(5 * time.Second):
			t.Fatal("no term")
		}
		l, err := b.Leader(ctx, "ldr")
		if err != nil || l.Owner != "pod-a" {
			t.Errorf("Leader: %+v %v", l, err)
		}
		sawA := false
		deadline := time.After(3 * time.Second)
	loop:
		for {
			select {
			case l := <-ch:
				if l.Err != nil {
					t.Errorf("WatchLeader: %v", l.Err)
				}
				if l.Owner == "pod-a" {
					sawA = true
					break loop
				}
			case <-deadline:
				break loop
			}
		}
		if !sawA {
			t.Error("WatchLeader never reported pod-a")
		}
		lcancel()
		<-ldone
		// the step-down is heard at once
		start := time.Now()
		stepped := false
		deadline = time.After(3 * time.Second)
	loop2:
		for {
			select {
			case l := <-ch:
				if l.Holder == "" && l.Err == nil {
					stepped = true
					break loop2
				}
			case <-deadline:
				break loop2
			}
		}
		if !stepped || time.Since(start) > time.Second {
			t.Errorf("WatchLeader heard the step-down: %v after %v", stepped, time.Since(start))
		}
		step("lead")
	}
	// Close with a waiter queued.
	{
		rel := make(chan struct{})
		held := hold(t, a, "cl", spec(3*time.Second, 5*time.Second), rel)
		wdone := make(chan error, 1)
		go func() {
			wdone <- b.Do(ctx, "cl", lease.Spec{TTL: 2 * time.Second, Deadline: 5 * time.Second, Wait: 4 * time.Second}, func(context.Context) error { return nil })
		}()
		time.Sleep(200 * time.Millisecond)
		b.Close()
		if err := <-wdone; err == nil {
			t.Error("waiter after Close: nil")
		}
		close(rel)
		<-held
		step("close")
	}
	for _, rec := range []*leasetest.Recorder{arec, brec} {
		for _, k := range []lease.EventKind{lease.EventSubscriptionFailed, lease.EventReleaseUnconfirmed, lease.EventRefused, lease.EventRenewFailed} {
			if n := rec.Count(k); n != 0 {
				t.Errorf("%v events: %d", k, n)
			}
		}
	}
}

// adv60Events lists rec's events from index from, as "kind(err)".
func adv60Events(rec *leasetest.Recorder, from int) string {
	var out []string
	for i, e := range rec.Events() {
		if i < from {
			continue
		}
		s := e.Kind.String()
		if e.Err != nil {
			s += "(" + e.Err.Error() + ")"
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}
