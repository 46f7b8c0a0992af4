package lease_test

// The README's deployment recipes, run as written (issue 13, item 5).

import (
	"context"
	"crypto/x509"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// readmeACL returns the rules of the README's least-privilege ACL recipe
// (the line "ACL SETUSER leases on >secret <rules>"), so that the recipe
// and its test cannot drift apart.
func readmeACL(t *testing.T, cluster bool) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	prefix := "ACL SETUSER leases on >secret "
	if cluster {
		prefix = "ACL SETUSER leases-cluster on >secret "
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			return strings.Fields(rest)
		}
	}
	t.Fatalf("README.md has no line starting %q", prefix)
	return nil
}

// The README's ACL recipe is what the test of the least privilege uses.
func TestReadmeACLRecipeIsTheTestedOne(t *testing.T) {
	got := strings.Join(readmeACL(t, false), " ")
	if want := strings.Join(leastPrivilege, " "); got != want {
		t.Fatalf("README ACL recipe\n  %s\nthe tested rules (errclass_test.go)\n  %s", got, want)
	}
}

// On a Cluster the recipe adds what go-redis's ClusterClient needs to learn
// the slot map; leases, waiting and fencing work under it on every shard.
func TestDeployACLRecipeOnCluster(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	rules := readmeACL(t, true)
	holder, _ := newClient(t, cl.ACLUser(t, "leases", "secret", rules...))
	waiter, rec := newClient(t, cl.ACLUser(t, "leases", "secret", rules...), lease.WithRecheck(10*time.Second))
	ctx := context.Background()
	for i := range 6 { // keys on all three masters
		key := "acl-" + itoa(i)
		// TTL 900ms: renewed once (at 300ms) before the release at 400ms,
		// with room for a loaded machine (a 300ms TTL needed its renewal
		// within about 100ms of due).
		s := lease.Spec{TTL: 900 * time.Millisecond, Deadline: 5 * time.Second, Wait: 3 * time.Second, Fence: true}
		release := make(chan struct{})
		held := hold(t, holder, key, s, release)
		time.AfterFunc(400*time.Millisecond, func() { close(release) }) // renewed once
		start := time.Now()
		if err := waiter.Do(ctx, key, s, func(context.Context) error { return nil }); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if err := <-held; err != nil {
			t.Fatalf("%s holder: %v", key, err)
		}
		if el := time.Since(start); el > 1500*time.Millisecond {
			t.Fatalf("%s: handoff took %v (re-checks are 10s apart: notifications failed)", key, el)
		}
	}
	if n := rec.Count(lease.EventSubscriptionFailed); n != 0 {
		t.Fatalf("subscription failed %d times", n)
	}
}

// TLS as the README writes it: a rediss:// URL, the CA from a file, and
// ContextTimeoutEnabled.
func TestDeployTLSRecipe(t *testing.T) {
	t.Parallel()
	srv := leasetest.StartTLS(t)
	url, caFile := srv.URL(), srv.CAFile()

	// --- the README's recipe, with url and caFile ---
	opt, err := redis.ParseURL(url) // rediss://user:password@host:port/db
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	opt.TLSConfig.RootCAs = x509.NewCertPool()
	if !opt.TLSConfig.RootCAs.AppendCertsFromPEM(ca) {
		t.Fatal("no certificate in the CA file")
	}
	opt.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	leases, err := lease.New(rdb)
	// --- end of the recipe ---
	if err != nil {
		t.Fatal(err)
	}
	defer leases.Close()
	s := lease.Spec{TTL: time.Second, Deadline: 5 * time.Second, Fence: true}
	if err := leases.Do(context.Background(), "tls", s, func(ctx context.Context) error {
		if _, ok := lease.TokenFrom(ctx); !ok {
			t.Error("no token")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Without the CA the handshake fails: nothing was sent, a definite error.
	bad, _ := redis.ParseURL(url)
	bad.ContextTimeoutEnabled = true
	brdb := redis.NewClient(bad)
	defer brdb.Close()
	bc, _ := newClient(t, brdb)
	err = bc.Do(context.Background(), "tls", lease.Spec{TTL: 10 * time.Second, Deadline: 5 * time.Second}, func(context.Context) error {
		t.Error("entered")
		return nil
	})
	mustIs(t, err, lease.ErrRefused)
	mustNotIs(t, err, lease.ErrUnknown)
}

// WithReplicas under the recipe: only WAIT is added.
func TestACLRecipeWithReplicas(t *testing.T) {
	srv := leasetest.StartRedis(t)
	replica := srv.StartReplica(t)
	srv.WaitReplicas(t, replica)
	rules := append(readmeACL(t, false), "+wait")
	c, rec := newClient(t, srv.ACLUser(t, "leases", "secret", rules...), lease.WithReplicas(1, 500*time.Millisecond))
	// After SCRIPT FLUSH the pipelined acquire falls back to EVAL.
	if err := srv.Client(t).ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, Fence: true}
	if err := c.Do(context.Background(), "acl-replicated", s, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if n := rec.Count(lease.EventUnreplicated); n != 0 {
		t.Fatalf("%d grants not acknowledged by the replica", n)
	}
}
