package lease_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// The soak's mix on a 3-master Cluster, keys spread over every master's
// slots, two Clients: each master's keyspace, looked at with SCAN and PTTL
// as the calls run, holds no key without an expiry or above its bound,
// and drains once they end.
func TestAdversary75a_ClusterKeyspaceDrains(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	const recheck = 200 * time.Millisecond
	opts := []lease.Option{lease.WithRecheck(recheck), lease.WithCounterTTL(time.Second)}
	var clients []*lease.Client
	for range 2 {
		c, err := lease.New(cl.Client(t), opts...)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	var masters []redis.Cmdable
	for _, n := range cl.Nodes[:3] {
		masters = append(masters, n.Client(t))
	}
	var keys []string
	slots := map[int]bool{}
	for i := range 9 {
		k := fmt.Sprintf("a75-cl-%d", i)
		keys = append(keys, k)
		slots[leasetest.Slot("{"+k+"}")/5462] = true
	}
	if len(slots) < 3 {
		t.Fatalf("keys on %d masters' slot ranges only", len(slots))
	}
	bounds := map[string]time.Duration{
		"lock": time.Second, "tomb": time.Second, "counter": time.Second,
		"queue": 2*recheck + 100*time.Millisecond, "qexp": 2*recheck + 100*time.Millisecond,
	}
	stop := make(chan struct{})
	looks := a75Sample(t, bounds, stop, masters...)
	go func() { time.Sleep(3 * time.Second); close(stop) }()
	calls, entered := a75Mix(clients, keys, 12, stop)
	for _, c := range clients {
		c.Close()
	}
	t.Logf("%d calls, %d entered, %d looks", calls, entered, <-looks)
	if entered < 100 {
		t.Errorf("only %d calls entered", entered)
	}
	per := make([]int, 3)
	for i, m := range masters {
		ks, _ := a75Scan(t.Context(), m)
		per[i] = len(ks)
	}
	t.Logf("keys per master when the calls ended: %v", per)
	a75Drain(t, "Cluster, after the calls", 1500*time.Millisecond, masters...)
}
