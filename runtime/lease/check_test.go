package lease_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Client.Check with the README's least-privilege user: every step runs
// clean, and nothing is left in Redis once the release tombstones expired.
func TestCheckLeastPrivilegeRunsClean(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	c, rec := newClient(t, aclClient(t, srv, "leases", leastPrivilege...))
	steps, err := c.Check(context.Background())
	for _, s := range steps {
		t.Logf("%v\t%s: %v", s.Took.Round(time.Millisecond), s.Name, s.Err)
	}
	if err != nil {
		t.Fatalf("Check with the least-privilege recipe: %v", err)
	}
	if len(steps) != 7 {
		t.Errorf("%d steps, want 7", len(steps))
	}
	for _, s := range steps {
		if s.Err != nil || s.Took <= 0 || s.Name == "" {
			t.Errorf("step %+v", s)
		}
	}
	if n := len(rec.Events()); n != 0 {
		t.Errorf("Check reported %d events to the Client's own Observer: its calls are its own Clients'", n)
	}
	// Tombstones live 4 release timeouts (1s).
	time.Sleep(1200 * time.Millisecond)
	if keys := admin.Keys(context.Background(), "*").Val(); len(keys) != 0 {
		t.Errorf("Check left keys behind: %q", keys)
	}
}

// Every permission of the recipe, taken out, makes Check fail naming the
// command Redis refused: the gaps that show late in a service (README,
// Recipes) show at once here.
func TestCheckNamesEachMissingPermission(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	ctx := context.Background()
	for _, perm := range leastPrivilege {
		if !strings.HasPrefix(perm, "+") {
			continue
		}
		cmd := perm[1:]
		c, _ := newClient(t, aclClient(t, srv, "u-"+strings.ReplaceAll(cmd, "|", "-"), without(leastPrivilege, perm)...))
		t.Run(perm, func(t *testing.T) {
			t.Parallel() // 21 users, each on keys of its own Check's
			_, err := c.Check(ctx)
			if err == nil {
				t.Fatalf("without %s: Check found nothing", perm)
			}
			if !namesCommand(err, cmd) {
				t.Errorf("without %s: Check does not name %q:\n%v", perm, cmd, err)
			}
		})
	}
}

// namesCommand reports whether err names command cmd as refused: Redis's
// NOPERM ("... the 'hget' command"), Check's note on a script's refused
// line ("that line calls HGET"), or the acquire script's on its ZADD.
func namesCommand(err error, cmd string) bool {
	m := strings.ToLower(err.Error())
	if strings.Contains(m, "'"+cmd+"' command") {
		return true
	}
	return regexp.MustCompile(`calls ([a-z|]+, )*` + regexp.QuoteMeta(cmd) + `[,:)]`).MatchString(m)
}

// Check on a closed Client sends nothing.
func TestCheckAfterClose(t *testing.T) {
	c, _ := sharedClient(t)
	c.Close()
	if _, err := c.Check(context.Background()); !errors.Is(err, lease.ErrClosed) {
		t.Fatalf("Check after Close: %v, want ErrClosed", err)
	}
}

// Close ends a Check under way (the service may close its go-redis client
// next): it returns at once, its error wrapping ErrClosed (adversary round
// 70 saw one carry on for 2s after Close and return nil).
func TestCheckEndedByClose(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	c, _ := newClient(t, rdb)
	done := make(chan error, 1)
	go func() {
		_, err := c.Check(context.Background())
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // in its renewal step
	closed := time.Now()
	c.Close()
	select {
	case err := <-done:
		t.Logf("Check returned %v after Close: %v", time.Since(closed).Round(time.Millisecond), err)
		if !errors.Is(err, lease.ErrClosed) {
			t.Errorf("Check ended by Close: %v, want ErrClosed", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Check still running 1s after Close")
	}
}

// On a Cluster, Check tries each master: an ACL user is set up node by
// node, and one master whose user lacks +hget fails that master's steps
// only, named with its address.
func TestCheckTriesEveryClusterMaster(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	ctx := context.Background()
	rules := append(append([]string{}, leastPrivilege...), "+cluster|slots", "+command", "+asking")
	c, _ := newClient(t, cl.ACLUser(t, "leases-cluster", "pw", rules...))
	steps, err := c.Check(ctx)
	if err != nil {
		t.Fatalf("Check with the Cluster recipe: %v", err)
	}
	masters := map[string]int{}
	for _, s := range steps {
		addr, _, _ := strings.Cut(strings.TrimPrefix(s.Name, "master "), ": ")
		masters[addr]++
	}
	if len(masters) != 3 {
		t.Fatalf("steps by master: %v, want 7 on each of 3", masters)
	}
	for addr, n := range masters {
		if n != 7 {
			t.Errorf("master %s: %d steps, want 7", addr, n)
		}
	}

	odd, err := cl.MasterForSlot(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := odd.Client(t).Do(ctx, "ACL", "SETUSER", "leases-cluster", "-hget").Err(); err != nil {
		t.Fatal(err)
	}
	steps, err = c.Check(ctx)
	if err == nil {
		t.Fatal("Check passed with a master whose user lacks +hget")
	}
	for _, s := range steps {
		onOdd := strings.HasPrefix(s.Name, "master "+odd.Addr()+": ")
		switch {
		case !onOdd && s.Err != nil:
			t.Errorf("%s: %v (only %s lacks +hget)", s.Name, s.Err, odd.Addr())
		case onOdd && strings.Contains(s.Name, "hands it the key") && (s.Err == nil || !namesCommand(s.Err, "hget")):
			t.Errorf("%s: %v, want a refusal naming HGET", s.Name, s.Err)
		}
	}
}
