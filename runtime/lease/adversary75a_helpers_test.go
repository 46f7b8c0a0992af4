package lease_test

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Round 75a: every key the runtime writes is deleted or carries a TTL, and
// the TTL is the documented one. These helpers read a whole keyspace with
// SCAN and PTTL.

// a75Keys is one look at a keyspace: key -> PTTL (-1: no expiry).
type a75Keys map[string]time.Duration

// a75Scan reads every key of rdb with SCAN, and each one's PTTL. A key
// gone between SCAN and PTTL (-2) is left out.
func a75Scan(ctx context.Context, rdb redis.Cmdable) (a75Keys, error) {
	out := a75Keys{}
	var cursor uint64
	for {
		ks, next, err := rdb.Scan(ctx, cursor, "*", 1000).Result()
		if err != nil {
			return nil, err
		}
		for _, k := range ks {
			p, err := rdb.PTTL(ctx, k).Result()
			if err != nil {
				return nil, err
			}
			// go-redis answers -2 (gone) and -1 (no expiry) as
			// nanoseconds, anything else as a duration.
			if p == -2 {
				continue
			}
			out[k] = p
		}
		if next == 0 {
			return out, nil
		}
		cursor = next
	}
}

// a75ScanAll reads the keyspace of every given server (a Cluster's
// masters), merged.
func a75ScanAll(ctx context.Context, rdbs ...redis.Cmdable) (a75Keys, error) {
	out := a75Keys{}
	for _, r := range rdbs {
		ks, err := a75Scan(ctx, r)
		if err != nil {
			return nil, err
		}
		for k, v := range ks {
			out[k] = v
		}
	}
	return out, nil
}

func (ks a75Keys) String() string {
	names := make([]string, 0, len(ks))
	for k := range ks {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for i, k := range names {
		if i == 20 {
			fmt.Fprintf(&b, " ... (%d keys)", len(names))
			break
		}
		fmt.Fprintf(&b, " %s=%v", k, ks[k])
	}
	return b.String()
}

// a75Kind names a runtime key's role by its suffix (see redisKeys).
func a75Kind(k string) string {
	switch {
	case strings.Contains(k, "}:r:"):
		return "tomb"
	case strings.HasSuffix(k, "}:l"):
		return "lock"
	case strings.HasSuffix(k, "}:f"):
		return "counter"
	case strings.HasSuffix(k, "}:q"):
		return "queue"
	case strings.HasSuffix(k, "}:x"):
		return "qexp"
	}
	return "other"
}

// a75NoPersistent fails for every key without an expiry.
func a75NoPersistent(t *testing.T, what string, ks a75Keys) {
	t.Helper()
	for k, p := range ks {
		if p < 0 {
			t.Errorf("%s: key %q (%s) has no expiry (PTTL -1)", what, k, a75Kind(k))
		}
	}
}

// a75Bounds fails for every key whose PTTL is above its kind's bound
// (kinds missing from max are not checked).
func a75Bounds(t *testing.T, what string, ks a75Keys, max map[string]time.Duration) {
	t.Helper()
	for k, p := range ks {
		if b, ok := max[a75Kind(k)]; ok && p > b {
			t.Errorf("%s: key %q (%s) has PTTL %v, above its bound %v", what, k, a75Kind(k), p, b)
		}
	}
}

// a75Drain polls until the keyspace is empty, checking on every look that
// no key lacks an expiry; it fails with what is left after within.
func a75Drain(t *testing.T, what string, within time.Duration, rdbs ...redis.Cmdable) {
	t.Helper()
	ctx := context.Background()
	end := time.Now().Add(within)
	told := map[string]bool{}
	for {
		ks, err := a75ScanAll(ctx, rdbs...)
		if err != nil {
			t.Errorf("%s: scan: %v", what, err)
			return
		}
		for k, p := range ks {
			if p < 0 && !told[k] {
				told[k] = true
				t.Errorf("%s: key %q (%s) has no expiry (PTTL -1)", what, k, a75Kind(k))
			}
		}
		if len(ks) == 0 {
			return
		}
		if time.Now().After(end) {
			t.Errorf("%s: %d keys left %v after the documented lifetimes:%v", what, len(ks), within, ks)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// a75Buf is a bytes.Buffer safe for a child process's two output pipes.
type a75Buf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *a75Buf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *a75Buf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
