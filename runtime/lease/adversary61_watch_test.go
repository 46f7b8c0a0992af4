package lease_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

func adv61ID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// adv61Fill writes n junk keys (not leases) and the lock keys of leases
// keys, each held by a fresh identity for 10 minutes.
func adv61Fill(t *testing.T, rdb *redis.Client, junk int, leases []string) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < junk; i += 1000 {
		args := make([]any, 0, 2000)
		for j := i; j < i+1000 && j < junk; j++ {
			args = append(args, fmt.Sprintf("junk:%d", j), "x")
		}
		if err := rdb.MSet(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range leases {
			p.Set(ctx, lockKey(k), adv61ID()+":0", 10*time.Minute)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// adv62DupScan makes SCAN repeat one key, as the server may when its table
// shrinks during a scan (List's doc: "a key may be listed twice"): the
// first SCAN's first key is returned again by the third SCAN, after its
// holder changed (released and taken by another identity) in between.
type adv62DupScan struct {
	mu      sync.Mutex
	n       int
	dup     string // the Redis key repeated
	onCount func(n int, dup string)
}

func (h *adv62DupScan) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *adv62DupScan) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *adv62DupScan) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		sc, ok := cmd.(*redis.ScanCmd)
		if !ok || err != nil {
			return err
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.n++
		keys, cur := sc.Val()
		switch {
		case h.n == 1 && len(keys) > 0:
			h.dup = keys[0]
		case h.n == 3 && h.dup != "" && cur != 0:
			h.onCount(h.n, h.dup)
			sc.SetVal(append(append([]string{}, keys...), h.dup), cur)
		}
		return err
	}
}

// Watch's doc: "It first reports every lease held (ChangeHeld), then
// grants, hold-min releases and endings as it sees them." Its first
// listing reported a key SCAN returned twice as held twice, and a new
// holder granted in between as held, with no ending or grant (round 61);
// the fix reported that ending and grant at once, in the middle of the
// first listing, before later pages' held leases (round 62). Now: each
// lease is reported held once, and what changed since (the repeated key's
// ending and new grant) once every held lease has been.
func TestAdversary61_WatchFirstListingRepeatedKey(t *testing.T) {
	srv := leasetest.StartRedis(t)
	admin := srv.Client(t)
	wrdb := srv.Client(t)
	hook := &adv62DupScan{}
	newHolder := adv61ID()
	hook.onCount = func(n int, dup string) {
		// Meanwhile the repeated key's lease was released and granted to
		// another identity.
		if err := admin.Set(context.Background(), dup, newHolder+":0", 10*time.Minute).Err(); err != nil {
			t.Error(err)
		}
	}
	wrdb.AddHook(hook)
	c, _ := newClient(t, wrdb)
	var keys []string
	for i := 0; i < 400; i++ {
		keys = append(keys, fmt.Sprintf("watch62:%03d", i))
	}
	adv61Fill(t, admin, 0, keys)

	var (
		mu  sync.Mutex
		seq []string
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.Watch(ctx, "watch62:*", time.Hour, func(ch lease.Change) {
			mu.Lock()
			seq = append(seq, fmt.Sprintf("%v %s %s", ch.Kind, ch.Info.Key, ch.Info.Holder[:8]))
			mu.Unlock()
		})
	}()
	waitFor(20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		held := 0
		for _, s := range seq {
			if strings.HasPrefix(s, "held ") {
				held++
			}
		}
		return held >= len(keys)
	})
	time.Sleep(200 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("repeated key %q; %d changes", hook.dup, len(seq))
	firstOther, heldAfter := -1, 0
	for i, s := range seq {
		if !strings.HasPrefix(s, "held ") {
			if firstOther < 0 {
				firstOther = i
				t.Logf("change #%d: %s", i, s)
				if i+1 < len(seq) {
					t.Logf("change #%d: %s", i+1, seq[i+1])
				}
			}
			continue
		}
		if firstOther >= 0 {
			if heldAfter == 0 {
				t.Logf("then change #%d: %s", i, s)
			}
			heldAfter++
		}
	}
	if heldAfter > 0 {
		t.Errorf("%d ChangeHeld reports came after a %q (change #%d of %d): the first listing's held leases are not all reported first", heldAfter, seq[firstOther], firstOther, len(seq))
	}
	held := map[string]int{}
	var dupChanges []string
	for _, s := range seq {
		f := strings.Fields(s)
		if f[0] == "held" {
			held[f[1]]++
		}
		if lockKey(f[1]) == hook.dup {
			dupChanges = append(dupChanges, f[0]+" "+f[2])
		}
	}
	for k, n := range held {
		if n > 1 {
			t.Errorf("key %q reported held %d times", k, n)
		}
	}
	if len(held) != len(keys) || len(dupChanges) != 3 || dupChanges[1] != "ended "+dupChanges[0][len("held "):] || dupChanges[2] != "granted "+newHolder[:8] {
		t.Errorf("%d keys reported held, want %d; the repeated key's changes %v, want held (old holder), ended (old holder), granted %s", len(held), len(keys), dupChanges, newHolder[:8])
	}
}
