package lease_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
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

// adv61DropJunk deletes the junk keys and waits for the server to shrink
// its keyspace table (serverCron, fill under 10%) and rehash.
func adv61DropJunk(t *testing.T, rdb *redis.Client, junk int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < junk; i += 1000 {
		args := make([]string, 0, 1000)
		for j := i; j < i+1000 && j < junk; j++ {
			args = append(args, fmt.Sprintf("junk:%d", j))
		}
		if err := rdb.Unlink(ctx, args...).Err(); err != nil {
			t.Error(err)
			return
		}
	}
	time.Sleep(3 * time.Second)
}

// Watch's doc: "It first reports every lease held (ChangeHeld), then
// grants, hold-min releases and endings as it sees them." Its first
// listing reported every page's leases as held without looking whether a
// key was reported already: a key SCAN returns twice (it may, when the
// server's key table shrinks during the scan) was reported held twice,
// and, if it changed holder in between, its new holder (granted after the
// watch started) was reported "held" with no ChangeEnded of the old one
// and no ChangeGranted of the new (adversary round 61).
func TestAdversary61_WatchFirstListingReportsHeldOnce(t *testing.T) {
	srv := leasetest.StartRedis(t)
	rdb := srv.Client(t)
	c, _ := newClient(t, rdb)
	const junk = 150000
	var keys []string
	for i := 0; i < 600; i++ {
		keys = append(keys, fmt.Sprintf("watch61:%03d", i))
	}
	adv61Fill(t, rdb, junk, keys)

	var (
		mu      sync.Mutex
		log     = map[string][]string{} // key -> kinds/holders, in order
		first   = true
		heldNow = map[string]string{}
		changed = map[string]string{} // key -> its new holder, set mid listing
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.Watch(ctx, "watch61:*", 200*time.Millisecond, func(ch lease.Change) {
			mu.Lock()
			log[ch.Info.Key] = append(log[ch.Info.Key], fmt.Sprintf("%v:%s", ch.Kind, ch.Info.Holder[:8]))
			if ch.Kind == lease.ChangeHeld {
				heldNow[ch.Info.Key] = ch.Info.Holder
			}
			do := first && ch.Kind == lease.ChangeHeld && len(heldNow) >= 100
			if do {
				first = false
				for k := range heldNow {
					changed[k] = adv61ID()
				}
			}
			mu.Unlock()
			if do {
				// Mid first listing: the leases reported so far change
				// holder (a release and a new grant each), and other keys
				// of the database are deleted.
				_, err := rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
					for k, id := range changed {
						p.Set(context.Background(), lockKey(k), id+":0", 10*time.Minute)
					}
					return nil
				})
				if err != nil {
					t.Error(err)
				}
				adv61DropJunk(t, rdb, junk)
			}
		})
	}()
	// Every changed key is reported granted to its new holder.
	granted := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for k, id := range changed {
			for _, s := range log[k] {
				if s == "granted:"+id[:8] {
					n++
					break
				}
			}
		}
		return n
	}
	if !waitFor(20*time.Second, func() bool { mu.Lock(); started := !first; mu.Unlock(); return started && granted() == 100 }) {
		t.Errorf("%d of the 100 keys that changed holder during the first listing were reported granted to the new holder", granted())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	bad := 0
	for k, l := range log {
		held := 0
		for _, s := range l {
			if len(s) > 5 && s[:5] == "held:" {
				held++
			}
		}
		if held > 1 {
			if bad < 5 {
				t.Errorf("key %q: %v", k, l)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d keys reported ChangeHeld more than once", bad)
	}
}
