package leasetest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/leasetest"
)

// A replica started from a server has every write once WaitReplicas
// returns, and refuses writes of its own.
func TestReplica(t *testing.T) {
	t.Parallel()
	m := leasetest.StartRedis(t)
	r1, r2 := m.StartReplica(t), m.StartReplica(t)
	ctx := context.Background()
	mc := m.Client(t)
	pipe := mc.Pipeline()
	for i := range 2000 {
		pipe.Set(ctx, fmt.Sprint("k", i), i, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	m.WaitReplicas(t, r1, r2)
	for _, r := range []*leasetest.Server{r1, r2} {
		rc := r.Client(t)
		if n, err := rc.DBSize(ctx).Result(); err != nil || n != 2000 {
			t.Fatalf("replica %s: DBSIZE %d, %v; want 2000 right after WaitReplicas", r.Addr(), n, err)
		}
		if err := rc.Set(ctx, "x", 1, 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "READONLY") {
			t.Fatalf("write to replica %s: %v, want READONLY", r.Addr(), err)
		}
	}
	// WaitReplicas refuses a server that replicates someone else.
	other := leasetest.StartRedis(t)
	ctx2, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := other.WaitSync(ctx2, r1); err == nil {
		t.Fatalf("WaitSync: a replica of %s counted as a replica of %s", m.Addr(), other.Addr())
	}
}
