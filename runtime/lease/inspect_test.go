package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// holding is a Do call whose fn runs until released or its lease ends.
type holding struct {
	release chan struct{}
	entered chan string   // the lease's owner, once fn runs
	cause   chan error    // fn's context.Cause, once fn's context ended before the release
	done    chan error    // Do's result
	over    chan struct{} // closed when Do has returned
	token   lease.Token   // set before entered is sent
}

// startHolding calls Do on key in the background (it may wait for the
// key); fn keeps the lease until h.release is closed, recording why fn's
// context ended.
func startHolding(t *testing.T, c *lease.Client, key string, s lease.Spec) *holding {
	t.Helper()
	h := &holding{release: make(chan struct{}), entered: make(chan string, 1), cause: make(chan error, 1), done: make(chan error, 1), over: make(chan struct{})}
	go func() {
		defer close(h.over)
		h.done <- c.Do(context.Background(), key, s, func(ctx context.Context) error {
			h.token, _ = lease.TokenFrom(ctx)
			l, _ := lease.FromContext(ctx)
			h.entered <- l.Owner()
			select {
			case <-h.release:
			case <-ctx.Done():
				h.cause <- context.Cause(ctx)
			}
			return nil
		})
	}()
	t.Cleanup(func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
		select {
		case <-h.over:
		case <-time.After(time.Minute): // still waiting, in a test that failed
		}
	})
	return h
}

// enter returns the owner of h's lease once fn runs, failing after 10s.
func (h *holding) enter(t *testing.T) string {
	t.Helper()
	select {
	case id := <-h.entered:
		return id
	case err := <-h.done:
		t.Fatalf("Do returned %v without entering", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Do did not enter in 10s")
	}
	return ""
}

// holdUntil takes key on c and keeps it until h.release is closed,
// recording why fn's context ended; it returns once fn runs.
func holdUntil(t *testing.T, c *lease.Client, key string, s lease.Spec) *holding {
	t.Helper()
	h := startHolding(t, c, key, s)
	select {
	case <-h.entered:
	case err := <-h.done:
		t.Fatalf("holder did not get %q: %v", key, err)
	case <-time.After(5 * time.Second):
		t.Fatalf("holder did not get %q in 5s", key)
	}
	return h
}

func inspect(t *testing.T, c *lease.Client, key string) lease.Info {
	t.Helper()
	info, err := c.Inspect(context.Background(), key)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", key, err)
	}
	return info
}

var identity = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestInspectFreeAndHeld(t *testing.T) {
	c, _ := sharedClient(t)
	key := uniqueKey(t) + ":{odd}%key"
	if info := inspect(t, c, key); !info.Free() || info.TTL != 0 || info.Token != 0 || info.Hold || len(info.Waiters) != 0 || info.Key != key {
		t.Fatalf("free key: %+v", info)
	}
	if _, err := c.Inspect(context.Background(), ""); !errors.Is(err, lease.ErrBadKey) {
		t.Fatalf("Inspect(\"\") = %v, want ErrBadKey", err)
	}

	h := holdUntil(t, c, key, lease.Spec{TTL: 3 * time.Second, Deadline: 10 * time.Second, Fence: true})
	info := inspect(t, c, key)
	if !identity.MatchString(info.Holder) || info.Owner != "" || info.Hold {
		t.Fatalf("held: holder %q owner %q hold %v, want a 32-hex identity, no owner, no hold", info.Holder, info.Owner, info.Hold)
	}
	if info.Token != h.token || info.LastToken != h.token || h.token == 0 {
		t.Fatalf("token %d, last token %d; the holder's is %d", info.Token, info.LastToken, h.token)
	}
	if info.TTL <= 2*time.Second || info.TTL > 3*time.Second {
		t.Fatalf("TTL %v, want just under 3s", info.TTL)
	}
	close(h.release)
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	if info := inspect(t, c, key); !info.Free() || info.LastToken != h.token {
		t.Fatalf("after the release: %+v, want free with last token %d", info, h.token)
	}

	// Unfenced (the native SET NX GET path): token 0.
	h = holdUntil(t, c, key, spec(3*time.Second, 10*time.Second))
	if info := inspect(t, c, key); !identity.MatchString(info.Holder) || info.Token != 0 {
		t.Fatalf("unfenced: %+v", info)
	}
	close(h.release)
	<-h.done
}

// Waiters of other Clients appear in arrival order, with what they ask for;
// a dead queue entry does not.
func TestInspectWaiters(t *testing.T) {
	c, _ := sharedClient(t)
	key := uniqueKey(t)
	h := holdUntil(t, c, key, spec(5*time.Second, 20*time.Second))
	var ids []string
	results := make(chan error, 2)
	for i, fence := range []bool{true, false} {
		w, _ := sharedClient(t)
		s := lease.Spec{TTL: time.Duration(i+2) * time.Second, Deadline: 20 * time.Second, Wait: 10 * time.Second, Fence: fence}
		go func() { results <- w.Do(context.Background(), key, s, func(context.Context) error { return nil }) }()
		for deadline := time.Now().Add(5 * time.Second); ; {
			info := inspect(t, c, key)
			if len(info.Waiters) == i+1 {
				ids = append(ids, info.Waiters[i].Identity)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d not queued: %+v", i, info)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	info := inspect(t, c, key)
	if len(info.Waiters) != 2 || info.Queued != 2 {
		t.Fatalf("waiters %+v, queued %d", info.Waiters, info.Queued)
	}
	for i, w := range info.Waiters {
		if w.Identity != ids[i] || !identity.MatchString(w.Identity) || w.Identity == info.Holder {
			t.Fatalf("waiter %d: %+v, want identity %s", i, w, ids[i])
		}
		if w.TTL != time.Duration(i+2)*time.Second || w.Fence != (i == 0) || w.Expires <= 0 || w.Waited < 0 {
			t.Fatalf("waiter %d: %+v", i, w)
		}
	}
	if info.Waiters[0].Waited < info.Waiters[1].Waited {
		t.Fatalf("not in arrival order: %+v", info.Waiters)
	}

	// A dead entry (its expiry passed) is counted in Queued but not listed.
	k := "lease:{" + key + "}"
	ctx := context.Background()
	rdb := c.Redis()
	if err := rdb.ZAdd(ctx, k+":q", redis.Z{Score: 0, Member: "deadbeef|1000|0|100"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, k+":x", "deadbeef|1000|0|100", 1).Err(); err != nil {
		t.Fatal(err)
	}
	if info := inspect(t, c, key); info.Queued != 3 || len(info.Waiters) != 2 {
		t.Fatalf("with a dead entry: queued %d, waiters %+v", info.Queued, info.Waiters)
	}
	close(h.release)
	for range 2 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
}

// A lease whose holder returned with a hold-min shows Hold, the holder's
// identity and token, and what is left of the hold.
func TestInspectHoldMin(t *testing.T) {
	c, _ := sharedClient(t)
	key := uniqueKey(t)
	var tok lease.Token
	if err := c.Do(context.Background(), key, lease.Spec{TTL: 5 * time.Second, Deadline: 10 * time.Second, HoldMin: 3 * time.Second, Fence: true},
		func(ctx context.Context) error { tok, _ = lease.TokenFrom(ctx); return nil }); err != nil {
		t.Fatal(err)
	}
	info := inspect(t, c, key)
	if !info.Hold || !identity.MatchString(info.Holder) || info.Token != tok || info.TTL <= 2*time.Second || info.TTL > 3*time.Second {
		t.Fatalf("hold-min: %+v, want Hold with token %d and just under 3s left", info, tok)
	}
}

// A value written from outside the runtime is shown whole; a lock key of
// another type is an error naming it.
func TestInspectForeignValues(t *testing.T) {
	c, _ := sharedClient(t)
	key := uniqueKey(t)
	ctx := context.Background()
	if err := c.Redis().Set(ctx, lockKey(key), "not-a-lease", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if info := inspect(t, c, key); info.Holder != "not-a-lease" || info.TTL >= 0 {
		t.Fatalf("foreign value: %+v, want it whole and a negative TTL (no expiry)", info)
	}
	key = uniqueKey(t)
	c.Redis().HSet(ctx, lockKey(key), "a", "b")
	if _, err := c.Inspect(ctx, key); err == nil || !strings.Contains(err.Error(), "another type") {
		t.Fatalf("hash at the lock key: %v, want an error saying so", err)
	}
}

// List finds held leases by a pattern over the user's keys, unescapes the
// keys, skips other keys, and pages through many with its cursor.
func TestList(t *testing.T) {
	prefix := "list-" + uniqueKey(t) + ":"
	c, _ := sharedClient(t, lease.WithPrefix(prefix))
	ctx := context.Background()
	odd := "inv:{a}%b*c"
	var hs []*holding
	for _, key := range []string{"inv:1", "inv:2", odd, "other:1"} {
		hs = append(hs, holdUntil(t, c, key, spec(5*time.Second, 20*time.Second)))
	}
	// Not leases: a value of another type at a lock key's name, and the
	// runtime's other keys.
	c.Redis().HSet(ctx, prefix+"{inv:hash}:l", "a", "b")

	list := func(pattern string) []string {
		t.Helper()
		var keys []string
		cursor := ""
		for {
			page, next, err := c.List(ctx, pattern, cursor)
			if err != nil {
				t.Fatalf("List(%q): %v", pattern, err)
			}
			for _, info := range page {
				if info.Free() {
					t.Fatalf("List(%q) gave a free key: %+v", pattern, info)
				}
				keys = append(keys, info.Key)
			}
			if cursor = next; cursor == "" {
				break
			}
		}
		slices.Sort(keys)
		return keys
	}
	for pattern, want := range map[string][]string{
		"":          {"inv:1", "inv:2", odd, "other:1"},
		"inv:*":     {"inv:1", "inv:2", odd},
		"inv:?":     {"inv:1", "inv:2"},
		"inv:{a}*":  {odd},
		`inv:*\*c`:  {odd},
		"*:1":       {"inv:1", "other:1"},
		"nothing:*": nil,
	} {
		if got := list(pattern); !slices.Equal(got, want) {
			t.Errorf("List(%q) = %q, want %q", pattern, got, want)
		}
	}
	close(hs[0].release)
	<-hs[0].done
	if got := list("inv:*"); !slices.Equal(got, []string{"inv:2", odd}) {
		t.Errorf("after inv:1's release: %q", got)
	}

	// Many keys: pages of about ListPage, every key exactly once.
	const n = 2*lease.ListPage + 50
	pipe := c.Redis().Pipeline()
	for i := range n {
		pipe.Set(ctx, fmt.Sprintf("%s{bulk:%d}:l", prefix, i), fmt.Sprintf("%032x:%d", i, i), time.Minute)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	pages := 0
	for cursor := ""; ; pages++ {
		page, next, err := c.List(ctx, "bulk:*", cursor)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) >= 2*lease.ListPage {
			t.Fatalf("a page of %d", len(page))
		}
		for _, info := range page {
			seen[info.Key]++
			var i int
			if _, err := fmt.Sscanf(info.Key, "bulk:%d", &i); err != nil || info.Holder != fmt.Sprintf("%032x", i) || info.Token != lease.Token(i) || info.TTL <= 0 {
				t.Fatalf("bulk: %+v", info)
			}
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	if len(seen) != n || pages < 2 {
		t.Fatalf("bulk: %d keys in %d pages, want %d in several", len(seen), pages+1, n)
	}
	if _, _, err := c.List(ctx, "*", "not-a-cursor"); err == nil {
		t.Fatal("List with a bad cursor: no error")
	}
}

// On a Cluster, List scans every master: keys in slots of all three are
// listed, through cursors that name the master.
func TestListCluster(t *testing.T) {
	t.Parallel()
	cl := leasetest.StartCluster(t, 3)
	c, _ := newClient(t, cl.Client(t))
	ctx := context.Background()
	masters := map[string]bool{}
	var want []string
	for i := range 12 {
		key := fmt.Sprint("job:", i)
		want = append(want, key)
		holdUntil(t, c, key, lease.Spec{TTL: 5 * time.Second, Deadline: 20 * time.Second, Fence: true})
		m, err := cl.MasterForKey(ctx, "lease:{"+key+"}:l")
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Addr()] = true
	}
	if len(masters) != 3 {
		t.Fatalf("keys on %d masters, want all 3", len(masters))
	}
	var got []string
	cursors := 0
	for cursor := ""; ; {
		page, next, err := c.List(ctx, "job:*", cursor)
		if err != nil {
			t.Fatal(err)
		}
		for _, info := range page {
			if info.Token == 0 || !identity.MatchString(info.Holder) {
				t.Fatalf("%+v", info)
			}
			got = append(got, info.Key)
		}
		if cursor = next; cursor == "" {
			break
		}
		if !strings.Contains(cursor, "@") {
			t.Fatalf("cluster cursor %q does not name its master", cursor)
		}
		cursors++
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("List on the cluster = %q, want %q", got, want)
	}
	info, err := c.Inspect(ctx, "job:3")
	if err != nil || info.Free() {
		t.Fatalf("Inspect on the cluster: %+v, %v", info, err)
	}
	// Watch on the cluster, with listings too rare to matter: the forced
	// release is seen through the release channel (classic pub/sub, which
	// the cluster broadcasts to the watcher's node, whichever it is).
	w := startWatch(t, c, "job:*", time.Hour)
	for range want {
		select {
		case ch := <-w.changes:
			if ch.Kind != lease.ChangeHeld {
				t.Fatalf("change %v %q, want held", ch.Kind, ch.Info.Key)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("watch did not report the leases held")
		}
	}
	// ForceRelease on the cluster: the holder loses it.
	if res, err := c.ForceRelease(ctx, "job:3", info.Holder); err != nil || res != lease.ForceReleased {
		t.Fatalf("ForceRelease on the cluster = %v, %v", res, err)
	}
	w.ended("job:3", "force-released")
}

// The holder learns of a forced release as an ordinary loss: fn's context
// is cancelled with a cause wrapping ErrLost that says "released from
// outside", and Do returns an error wrapping ErrLost. With a short TTL the
// renewal finds it; with a TTL whose renewal comes after the release's
// default tombstone has gone (ttl/3 > 1s) the cause is still named.
func TestForceReleaseHolderLoses(t *testing.T) {
	for _, ttl := range []time.Duration{300 * time.Millisecond, 4500 * time.Millisecond} {
		t.Run(ttl.String(), func(t *testing.T) {
			holderC, _ := sharedClient(t)
			admin, _ := newClient(t, shared.Client(t)) // another Client, another connection
			key := uniqueKey(t)
			h := holdUntil(t, holderC, key, lease.Spec{TTL: ttl, Deadline: time.Minute, Fence: true})
			info := inspect(t, admin, key)
			start := time.Now()
			res, err := admin.ForceRelease(context.Background(), key, info.Holder)
			if err != nil || res != lease.ForceReleased {
				t.Fatalf("ForceRelease = %v, %v; want released", res, err)
			}
			if after := inspect(t, admin, key); !after.Free() {
				t.Fatalf("after ForceRelease: %+v, want free", after)
			}
			var cause error
			select {
			case cause = <-h.cause:
			case <-time.After(ttl + time.Second):
				t.Fatalf("the holder's context was not cancelled within %v", ttl+time.Second)
			}
			if took := time.Since(start); took > ttl/3+500*time.Millisecond {
				t.Errorf("the holder learned after %v, want within its renewal interval %v", took, ttl/3)
			}
			mustIs(t, cause, lease.ErrLost)
			if !strings.Contains(cause.Error(), "released from outside") {
				t.Fatalf("cause %q, want it to say released from outside", cause)
			}
			err = <-h.done
			mustIs(t, err, lease.ErrLost)
			if !strings.Contains(err.Error(), "released from outside") {
				t.Fatalf("Do = %q, want it to say released from outside", err)
			}
		})
	}
}

// The first waiter gets a force-released lease at once (a handover, not a
// TTL expiry), and the holder loses it.
func TestForceReleaseHandsToWaiter(t *testing.T) {
	t.Parallel()
	c, _ := sharedClient(t)
	w, _ := sharedClient(t)
	key := uniqueKey(t)
	h := holdUntil(t, c, key, lease.Spec{TTL: 3 * time.Second, Deadline: time.Minute})
	entered := make(chan time.Time, 1)
	done := make(chan error, 1)
	go func() {
		done <- w.Do(context.Background(), key, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute, Wait: 30 * time.Second},
			func(context.Context) error { entered <- time.Now(); return nil })
	}()
	var info lease.Info
	for deadline := time.Now().Add(5 * time.Second); len(info.Waiters) == 0; time.Sleep(10 * time.Millisecond) {
		if info = inspect(t, c, key); time.Now().After(deadline) {
			t.Fatal("the waiter never queued")
		}
	}
	start := time.Now()
	if res, err := c.ForceRelease(context.Background(), key, info.Holder); err != nil || res != lease.ForceReleased {
		t.Fatalf("ForceRelease = %v, %v", res, err)
	}
	select {
	case at := <-entered:
		if d := at.Sub(start); d > 2*time.Second {
			t.Fatalf("the waiter entered %v after the release", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the lease")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-h.cause:
		mustIs(t, cause, lease.ErrLost)
	case <-time.After(4 * time.Second):
		t.Fatal("the holder was not told (renewal every second)")
	}
	mustIs(t, <-h.done, lease.ErrLost)
}

// Compare-and-delete: an identity that no longer holds the key touches
// nothing, whoever holds it now.
func TestForceReleaseChangedHolder(t *testing.T) {
	c, _ := sharedClient(t)
	key := uniqueKey(t)
	ctx := context.Background()
	a := holdUntil(t, c, key, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute, Fence: true})
	shown := inspect(t, c, key) // what an operator saw
	close(a.release)
	if err := <-a.done; err != nil {
		t.Fatal(err)
	}
	b := holdUntil(t, c, key, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute, Fence: true})
	res, err := c.ForceRelease(ctx, key, shown.Holder)
	if err != nil || res != lease.ForceHeldByOther {
		t.Fatalf("ForceRelease of the old holder = %v, %v; want held by another", res, err)
	}
	now := inspect(t, c, key)
	if now.Holder == shown.Holder || now.Token != b.token || now.TTL <= 4*time.Second {
		t.Fatalf("the new holder's lease changed: %+v (b's token %d)", now, b.token)
	}
	close(b.release)
	if err := <-b.done; err != nil {
		t.Fatalf("the new holder: %v", err)
	}
	// Free, and nonsense.
	if res, err := c.ForceRelease(ctx, key, shown.Holder); err != nil || res != lease.ForceNotHeld {
		t.Fatalf("ForceRelease of a free key = %v, %v; want not held", res, err)
	}
	for _, id := range []string{"", "a:b", "~" + shown.Holder, shown.Holder[1:], strings.ToUpper(shown.Holder), "not-a-lease"} {
		if _, err := c.ForceRelease(ctx, key, id); err == nil {
			t.Errorf("ForceRelease(identity %q): no error", id)
		}
	}
	if _, err := c.ForceRelease(ctx, "", shown.Holder); !errors.Is(err, lease.ErrBadKey) {
		t.Errorf("ForceRelease(empty key) = %v, want ErrBadKey", err)
	}
}

// A lease in its hold-min (the holder's call has returned): force release
// ends the hold and a waiter gets the lease long before the hold would
// have run out; the holder's Do, long done, is unaffected. An identity
// that is not the hold's touches nothing.
func TestForceReleaseHoldMin(t *testing.T) {
	c, _ := sharedClient(t)
	w, _ := sharedClient(t)
	key := uniqueKey(t)
	ctx := context.Background()
	if err := c.Do(ctx, key, lease.Spec{TTL: 20 * time.Second, Deadline: time.Minute, HoldMin: 20 * time.Second},
		func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	info := inspect(t, c, key)
	if !info.Hold {
		t.Fatalf("want a hold: %+v", info)
	}
	entered := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- w.Do(ctx, key, lease.Spec{TTL: 5 * time.Second, Deadline: time.Minute, Wait: 40 * time.Second},
			func(context.Context) error { close(entered); return nil })
	}()
	for deadline := time.Now().Add(5 * time.Second); len(inspect(t, c, key).Waiters) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never queued")
		}
	}
	if res, err := c.ForceRelease(ctx, key, strings.Repeat("0", 32)); err != nil || res != lease.ForceHeldByOther {
		t.Fatalf("ForceRelease of another identity during the hold = %v, %v", res, err)
	}
	start := time.Now()
	if res, err := c.ForceRelease(ctx, key, info.Holder); err != nil || res != lease.ForceHoldEnded {
		t.Fatalf("ForceRelease during the hold = %v, %v; want hold ended", res, err)
	}
	select {
	case <-entered:
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("the waiter entered %v after the hold ended", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lease after the hold ended")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A forced release racing the holder's renewals (TTL 900ms: a renewal
// every 300ms) at random moments over two renewal periods: each time the
// release wins cleanly, the holder is told with the right cause, and no
// renewal brings the key back. (With a 300ms TTL, a renewal held up 200ms
// on a loaded machine let the key expire before the forced release.)
func TestForceReleaseRacingRenewal(t *testing.T) {
	c, _ := sharedClient(t)
	admin, _ := newClient(t, shared.Client(t))
	ctx := context.Background()
	for i := range 8 {
		key := fmt.Sprintf("%s-%d", uniqueKey(t), i)
		h := holdUntil(t, c, key, lease.Spec{TTL: 900 * time.Millisecond, Deadline: 10 * time.Second, Fence: true, MinValidity: time.Millisecond})
		info := inspect(t, admin, key)
		time.Sleep(time.Duration(rand.IntN(600)) * time.Millisecond)
		res, err := admin.ForceRelease(ctx, key, info.Holder)
		if err != nil || res != lease.ForceReleased {
			t.Fatalf("round %d: ForceRelease = %v, %v", i, res, err)
		}
		select {
		case cause := <-h.cause:
			mustIs(t, cause, lease.ErrLost)
			if !strings.Contains(cause.Error(), "released from outside") {
				t.Fatalf("round %d: cause %q", i, cause)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("round %d: the holder was not told", i)
		}
		mustIs(t, <-h.done, lease.ErrLost)
		time.Sleep(150 * time.Millisecond) // a late renewal would have landed by now
		if after := inspect(t, admin, key); !after.Free() {
			t.Fatalf("round %d: the key is held again after the forced release: %+v", i, after)
		}
	}
}

// A leader's term shows its owner, and a forced release of the identity
// shown ends the term as a loss (the leader campaigns again).
func TestInspectAndForceReleaseALeader(t *testing.T) {
	t.Parallel()
	leaderC, _ := sharedClient(t)
	ops, _ := sharedClient(t)
	key := uniqueKey(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	terms := make(chan lease.Token, 4)
	causes := make(chan error, 4)
	go func() {
		_ = leaderC.Lead(ctx, key, lease.LeadSpec{TTL: 2 * time.Second, Owner: "pod-7"}, func(ctx context.Context) error {
			tok, _ := lease.TokenFrom(ctx)
			terms <- tok
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil
		})
	}()
	first := <-terms
	info, err := ops.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if info.Owner != "pod-7" || info.Token != first {
		t.Fatalf("Inspect: owner %q token %d, want pod-7 and the term %d", info.Owner, info.Token, first)
	}
	res, err := ops.ForceRelease(context.Background(), key, info.Holder)
	if err != nil || res != lease.ForceReleased {
		t.Fatalf("ForceRelease(%q) = %v, %v", info.Holder, res, err)
	}
	select {
	case cause := <-causes:
		mustIs(t, cause, lease.ErrLost)
		if !strings.Contains(cause.Error(), "released from outside") {
			t.Fatalf("the term ended with %v, want a loss released from outside", cause)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the leader's term did not end after the forced release")
	}
	select {
	case second := <-terms:
		if second <= first {
			t.Fatalf("next term %d not after %d", second, first)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the leader did not campaign again")
	}
}
