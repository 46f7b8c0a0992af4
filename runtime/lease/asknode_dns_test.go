package lease_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// askNodeDNSChild is set in the child process of TestAskNodeMakesNoLookup.
const askNodeDNSChild = "LEASE_TEST_ASKNODE_SILENT_DNS"

// go-redis v9.22.0 looks a client's host name up in DNS as it makes the
// client (for maintenance notifications), for up to 2 s on a context of
// its own. askNode makes a client, holding askMu, on a renewal's path,
// for an address an ASK named, which is a host name when the Cluster
// announces names: with a resolver that did not answer, that renewal and
// every other that needed askMu would wait 2 s. askNode turns
// notifications off with an endpoint type set, so go-redis does not look.
// An external test: a paused parallel test of package lease itself would
// count as a runtime goroutine in leaseGoroutines (CI: TestAdversary_
// CloseDuringLoad). Run in a child process whose resolver never answers (swapping
// net.DefaultResolver under other tests would race with their dials),
// with its control: go-redis's own NewClient there takes the 2 s.
func TestAskNodeMakesNoLookup(t *testing.T) {
	if os.Getenv(askNodeDNSChild) != "" {
		askNodeDNSInChild(t)
		return
	}
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run", "^TestAskNodeMakesNoLookup$", "-test.v", "-test.count", "1")
	cmd.Env = append(os.Environ(), askNodeDNSChild+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("child:\n%s", out)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if !strings.Contains(string(out), "askNode took") {
		t.Fatal("the child did not run the test")
	}
}

func askNodeDNSInChild(t *testing.T) {
	if err := leasetest.SilentDNS(); err != nil {
		t.Fatal(err)
	}
	const addr = "lease-asknode.invalid:7000"

	// The control: a client made the default way waits for the lookup.
	start := time.Now()
	plain := redis.NewClient(&redis.Options{Addr: addr})
	control := time.Since(start)
	plain.Close()
	fmt.Printf("redis.NewClient took %v\n", control)
	if control < 1900*time.Millisecond {
		t.Fatalf("redis.NewClient(%s) took %v with a resolver that never answers, want go-redis's 2 s lookup: the test cannot tell", addr, control)
	}

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true})
	defer cc.Close()
	c, err := lease.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start = time.Now()
	n := lease.AskNode(c, cc, addr)
	took := time.Since(start)
	fmt.Printf("askNode took %v\n", took)
	if n == nil {
		t.Fatal("askNode made no client")
	}
	if took > 500*time.Millisecond {
		t.Errorf("askNode(%s) took %v holding askMu: go-redis looked the name up", addr, took)
	}
}
