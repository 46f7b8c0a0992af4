package lease

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// CheckStep is one path of a service's calls that Client.Check ran.
type CheckStep struct {
	Name string        // what ran, and the commands it needs
	Took time.Duration // how long it took
	// Err is nil when the step ran clean; otherwise what went wrong: the
	// call's error and the events it reported (a refused release or
	// renewal is an event, not the call's error), each naming Redis's
	// answer (a missing permission: NOPERM and the command).
	Err error
}

// checkStepTimeout bounds each step of Check (one that waits for a
// handover, a renewal or a hold's end takes about a second).
const checkStepTimeout = 5 * time.Second

// Check runs, on keys of its own under the Client's prefix, each path a
// service's calls can take, and reports each one's outcome: a grant and
// its release; a fenced grant; a call that waits, and the release that
// hands it the key (the queue, the subscription, the handover); a
// renewal; a hold-min and a call waiting for it to end; a kept lease
// given up to a caller that asks for it; and the commands sent only now
// and then, each on its own (EVAL, after a restart or a SCRIPT FLUSH
// emptied the script cache; EXISTS, by a kept lease's check; PUBLISH;
// PUBSUB NUMSUB, by a release that hands over; UNSUBSCRIBE; ASKING on a
// Cluster, to follow a slot migration). It uses two Clients of its own on
// the same go-redis client with this Client's options, as two processes
// of a service would, so that every command the runtime sends is sent.
// On a Cluster, whose ACL users are set up node by node, it runs the steps
// on each master at once, on keys that hash to that master's slots (from
// CLUSTER SLOTS), each step's name beginning with "master ADDR: ". Each
// step is bounded by 5s: a master that does not answer fails its steps
// in about half a minute.
//
// A permission missing from an ACL user's rules (see the README's
// recipes) shows on the first call that needs it: one that waits, a
// release that finds a waiter queued, a renewal. Check makes them all at
// once: run it when a service starts, or from leasectl check. The error
// is nil when every step ran clean; otherwise it joins the steps'
// errors. Check takes a few seconds (its waits and renewal are real
// ones) and leaves nothing behind but its releases' tombstones, which
// expire within 4 release timeouts (at least 1s), as any release's do,
// and the fencing counter of its keys, which it deletes (a user without
// +del keeps them for the counter TTL).
// It does not try operators' commands (Inspect, List, ForceRelease,
// Watch; see leasectl's ACL recipe). Close ends it: its error then wraps
// ErrClosed.
func (c *Client) Check(ctx context.Context) ([]CheckStep, error) {
	if c.closed.Load() {
		return nil, fmt.Errorf("%w: Check", ErrClosed)
	}
	// Close ends the check as a cancelled ctx would (the go-redis client
	// may be closed next), with ErrClosed.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(ctxOf(c.hub.closing), cancel)()
	// On a Cluster each master is tried (an ACL user is set up on each
	// node, and may differ between them): its own steps, on keys that hash
	// to its slots, all masters at once.
	var steps []CheckStep
	targets := []checkTarget{{}}
	if c.cluster {
		ts, err := c.checkMasters(ctx)
		if err != nil {
			// Nothing else would run: go-redis routes by that map.
			steps = append(steps, CheckStep{Name: "the slot map (CLUSTER SLOTS)", Err: err})
			targets = nil
		} else {
			targets = ts
		}
	}
	per := make([][]CheckStep, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			per[i] = c.checkOn(ctx, t)
		}()
	}
	wg.Wait()
	for _, ss := range per {
		steps = append(steps, ss...)
	}

	var errs []error
	if c.closed.Load() {
		errs = append(errs, fmt.Errorf("%w: Check ended by Close", ErrClosed))
	}
	for _, s := range steps {
		if s.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Name, s.Err))
		}
	}
	return steps, errors.Join(errs...)
}

// checkOn runs Check's steps on target t, with two Clients of its own.
func (c *Client) checkOn(ctx context.Context, t checkTarget) []CheckStep {
	rec := &checkObserver{}
	a, err := c.sibling(rec)
	if err == nil {
		defer a.Close()
		var b *Client
		if b, err = c.sibling(rec); err == nil {
			defer b.Close()
			return c.checkSteps(ctx, t, rec, a, b)
		}
	}
	return []CheckStep{{Name: t.label + "two Clients of the check's own (lease.New)", Err: err}}
}

// checkSteps runs Check's steps on t with Clients a and b, whose events
// rec records.
func (c *Client) checkSteps(ctx context.Context, t checkTarget, rec *checkObserver, a, b *Client) []CheckStep {
	base := "leasegen-check:" + newID()[:16]
	key := func(what string) string { return t.key(base + ":" + what) }
	nop := func(context.Context) error { return nil }
	var steps []CheckStep
	step := func(name string, run func(ctx context.Context) error) {
		sctx, cancel := context.WithTimeout(ctx, checkStepTimeout)
		defer cancel()
		from := rec.mark()
		start := time.Now()
		err := run(sctx)
		// Events of the step's background work (a kept lease's release)
		// may come just after its calls return.
		time.Sleep(20 * time.Millisecond)
		steps = append(steps, CheckStep{Name: t.label + name, Took: time.Since(start), Err: checkErrs(append([]error{err}, rec.since(from)...))})
	}

	step("grant and release (SET NX; the release script: GET, SET, ZRANGE, DEL)", func(ctx context.Context) error {
		return a.Do(ctx, key("grant"), Spec{TTL: 2 * time.Second, Deadline: 4 * time.Second}, nop)
	})
	step("fenced grant (the acquire script: TIME, SET NX, the fencing counter's SET)", func(ctx context.Context) error {
		return a.Do(ctx, key("grant"), Spec{TTL: 2 * time.Second, Deadline: 4 * time.Second, Fence: true}, func(ctx context.Context) error {
			if tok, ok := TokenFrom(ctx); !ok || tok == 0 {
				return errors.New("lease: check: a fenced grant without a token")
			}
			return nil
		})
	})
	step("a call that waits, and the release that hands it the key (PTTL, ZADD, HSET, PEXPIRE, SUBSCRIBE; ZRANGE, HGET, ZREM, HDEL, PUBLISH)", func(ctx context.Context) error {
		k := key("wait")
		waiter := make(chan error, 1)
		started := false // fn runs on Do's goroutine
		err := a.Do(ctx, k, Spec{TTL: time.Second, Deadline: 4 * time.Second}, func(fctx context.Context) error {
			started = true
			queued := rec.waiting(k)
			go func() {
				waiter <- b.Do(ctx, k, Spec{TTL: time.Second, Deadline: 4 * time.Second, Wait: 3 * time.Second, Fence: true}, nop)
			}()
			select {
			case <-queued:
			case err := <-waiter:
				waiter <- err // it did not wait: its error is reported below
			case <-fctx.Done():
			}
			return nil
		})
		if !started {
			return err // the holder did not enter: nobody waited
		}
		return errors.Join(err, checkCall("the waiting call", <-waiter))
	})
	step("renewal (the renewal script: GET, PEXPIRE)", func(ctx context.Context) error {
		// Past the TTL (renewed twice, or lost), which leaves a renewal
		// on a loaded machine a second of slack.
		return a.Do(ctx, key("renew"), Spec{TTL: 1500 * time.Millisecond, Deadline: 4 * time.Second}, func(ctx context.Context) error {
			select {
			case <-time.After(1700 * time.Millisecond):
			case <-ctx.Done():
			}
			return nil
		})
	})
	step("hold-min, and a call waiting for the hold to end", func(ctx context.Context) error {
		k := key("hold")
		err := a.Do(ctx, k, Spec{TTL: time.Second, Deadline: 4 * time.Second, HoldMin: 300 * time.Millisecond}, nop)
		return errors.Join(err, checkCall("the waiting call", b.Do(ctx, k, Spec{TTL: time.Second, Deadline: 4 * time.Second, Wait: 3 * time.Second}, nop)))
	})
	step("a kept lease, given up when another caller asks (GET, EXISTS)", func(ctx context.Context) error {
		k := key("keep")
		s := Spec{TTL: time.Second, Deadline: 4 * time.Second, Keep: 3 * time.Second}
		err := errors.Join(a.Do(ctx, k, s, nop), a.Do(ctx, k, s, nop))
		return errors.Join(err, checkCall("the asking call", b.Do(ctx, k, Spec{TTL: time.Second, Deadline: 4 * time.Second, Wait: 3 * time.Second}, nop)))
	})
	step("commands sent now and then (EVAL after the script cache was emptied; EXISTS, by a kept lease's check; PUBLISH; PUBSUB NUMSUB; UNSUBSCRIBE; ASKING on a Cluster)", func(ctx context.Context) error {
		k := redisKeys(c.prefix, key("probe"))
		// On a Cluster, on the target master itself (the keyless ones
		// would go to any node).
		rdb := c.rdb
		if cc, ok := c.rdb.(*redis.ClusterClient); ok {
			node, err := cc.MasterForKey(ctx, k.lock)
			if err != nil {
				return fmt.Errorf("the master of %q: %w", k.lock, err)
			}
			rdb = node
		}
		errs := []error{
			checkCommand(ctx, rdb, "EVAL", "EVAL", "return 0", 1, k.lock),
			checkCommand(ctx, rdb, "EXISTS", "EXISTS", k.queue),
			checkCommand(ctx, rdb, "PUBLISH", "PUBLISH", k.channel, "check"),
			checkCommand(ctx, rdb, "PUBSUB NUMSUB", "PUBSUB", "NUMSUB", k.channel),
			checkUnsubscribe(ctx, rdb, k.channel),
		}
		if c.cluster {
			errs = append(errs, checkCommand(ctx, rdb, "ASKING", "ASKING"))
		}
		return errors.Join(errs...)
	})

	// The fencing counters (the only keys that outlive the calls).
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.releaseTimeout)
	for _, what := range []string{"grant", "wait"} {
		c.rdb.Del(dctx, redisKeys(c.prefix, key(what)).fence)
	}
	cancel()
	return steps
}

// checkTarget is where Check's steps run: anywhere (zero), or on keys that
// hash to one Cluster master's slots.
type checkTarget struct {
	label  string   // "master ADDR: ", in front of its steps' names
	ranges [][2]int // the master's slots (none: any)
}

// key returns user key k, or the first of k + ":" + n (n = 0, 1, ...)
// whose slot is the target's.
func (t checkTarget) key(k string) string {
	if len(t.ranges) == 0 {
		return k
	}
	for n := 0; n < 1<<20; n++ {
		kn := k + ":" + strconv.Itoa(n)
		slot := int(crc16(escapeKey(kn)) % 16384)
		for _, r := range t.ranges {
			if r[0] <= slot && slot <= r[1] {
				return kn
			}
		}
	}
	return k
}

// checkMasters is one target per Cluster master, from the slot map.
func (c *Client) checkMasters(ctx context.Context) ([]checkTarget, error) {
	cc := c.rdb.(*redis.ClusterClient)
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	byAddr := map[string]int{}
	var ts []checkTarget
	for _, s := range slots {
		if len(s.Nodes) == 0 {
			continue
		}
		addr := s.Nodes[0].Addr
		i, ok := byAddr[addr]
		if !ok {
			i = len(ts)
			byAddr[addr] = i
			ts = append(ts, checkTarget{label: "master " + addr + ": "})
		}
		ts[i].ranges = append(ts[i].ranges, [2]int{s.Start, s.End})
	}
	if len(ts) == 0 {
		return nil, errors.New("no master in the slot map")
	}
	// The steps go through the go-redis client's own slot map, which may
	// be older than the one read here (a failover since its last reload):
	// a step labelled with the new master would go to the old one
	// (adversary round 70b). Reloaded until it routes each target's keys
	// to that target, for at most 2s (then the steps tell).
	until := time.Now().Add(2 * time.Second)
	for !c.checkRouted(ctx, cc, ts) && time.Now().Before(until) && ctx.Err() == nil {
		cc.ReloadState(ctx)
		time.Sleep(50 * time.Millisecond)
	}
	return ts, nil
}

// checkRouted reports whether cc sends each target's keys to that target.
func (c *Client) checkRouted(ctx context.Context, cc *redis.ClusterClient, ts []checkTarget) bool {
	for _, t := range ts {
		node, err := cc.MasterForKey(ctx, redisKeys(c.prefix, t.key("leasegen-check:route")).lock)
		if err != nil || "master "+node.Options().Addr+": " != t.label {
			return false
		}
	}
	return true
}

// escapeKey is user key k as it stands between the braces of its Redis
// keys (see redisKeys): the part Redis Cluster hashes.
func escapeKey(k string) string {
	l := redisKeys("", k).lock // "{" + escaped + "}:l"
	return l[1 : len(l)-3]
}

// crc16 is Redis Cluster's key hash (CRC-16/XMODEM).
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// sibling is a Client of its own on c's go-redis client with c's options
// and observer o.
func (c *Client) sibling(o Observer) (*Client, error) {
	opts := []Option{WithObserver(o), WithPrefix(c.prefix), WithReleaseTimeout(c.releaseTimeout), WithRecheck(c.recheck), WithCounterTTL(c.counterTTL)}
	if c.replicas > 0 {
		opts = append(opts, WithReplicas(c.replicas, c.replicaTimeout))
	}
	return New(c.user, opts...)
}

// checkErrs joins errs, each once (a call's error and the event that
// reported it often say the same), naming the command a script was
// refused (see scriptRefusal).
func checkErrs(errs []error) error {
	var out []error
	seen := map[string]bool{}
	for _, err := range errs {
		if err == nil || seen[err.Error()] {
			continue
		}
		seen[err.Error()] = true
		if cmd := scriptRefusal(err); cmd != "" {
			err = fmt.Errorf("%w (that line calls %s: is it in the user's ACL?)", err, cmd)
		}
		out = append(out, err)
	}
	return errors.Join(out...)
}

// userScriptLine finds the script and line in Redis's refusal of a
// command a script called ("... script: <sha1>, on @user_script:<line>."),
// which does not name the command.
var (
	userScriptLine = regexp.MustCompile(`script: ([0-9a-f]{40}), on @user_script:([0-9]+)`)
	scriptCall     = regexp.MustCompile(`redis\.p?call\(\s*'([A-Za-z|]+)'`)
)

// scriptSources are the runtime's scripts' sources.
var scriptSources = map[*redis.Script]string{
	acquireScript.Script: tokenSrc + acquireSrc, releaseScript.Script: tokenSrc + releaseSrc,
	renewManyScript.Script: renewManySrc, endholdScript.Script: endholdSrc,
	renewScript: renewSrc, inspectScript: inspectSrc, leaderScript: leaderSrc,
}

// scriptRefusal returns the commands that the runtime's script line named
// in err calls ("" when err names no line of one of them).
func scriptRefusal(err error) string {
	m := userScriptLine.FindStringSubmatch(err.Error())
	if m == nil {
		return ""
	}
	line, _ := strconv.Atoi(m[2])
	for s, src := range scriptSources {
		if s.Hash() != m[1] {
			continue
		}
		lines := strings.Split(src, "\n")
		if line < 1 || line > len(lines) {
			return ""
		}
		var cmds []string
		for _, c := range scriptCall.FindAllStringSubmatch(lines[line-1], -1) {
			if !slices.Contains(cmds, c[1]) {
				cmds = append(cmds, c[1])
			}
		}
		if strings.Contains(lines[line-1], "ARGV[3]") {
			cmds = append(cmds, "PUBLISH")
		}
		return strings.Join(cmds, ", ")
	}
	return ""
}

func checkCall(what string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// checkCommand sends one command, and reports a refusal of it.
func checkCommand(ctx context.Context, rdb redis.UniversalClient, name string, args ...any) error {
	if err := rdb.Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// checkUnsubscribe subscribes to channel and unsubscribes from it (the
// runtime's subscription leaves a channel nobody waits on any more).
func checkUnsubscribe(ctx context.Context, rdb redis.UniversalClient, channel string) error {
	ps := rdb.Subscribe(ctx, channel)
	defer ps.Close()
	for _, what := range []string{"SUBSCRIBE", "UNSUBSCRIBE"} {
		if what == "UNSUBSCRIBE" {
			if err := ps.Unsubscribe(ctx, channel); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
		}
		m, err := ps.Receive(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if s, ok := m.(*redis.Subscription); !ok || s.Kind != strings.ToLower(what) {
			return fmt.Errorf("%s: answered %v", what, m)
		}
	}
	return nil
}

// checkObserver records the failures two Clients of Check report, and
// tells when a call starts waiting.
type checkObserver struct {
	mu     sync.Mutex
	errs   []error
	queued map[string]chan struct{}
}

func (o *checkObserver) Observe(e Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch e.Kind {
	case EventWaiting:
		if ch, ok := o.queued[e.Key]; ok {
			close(ch)
			delete(o.queued, e.Key)
		}
	case EventRefused, EventAcquireUnknown, EventRenewFailed, EventLost, EventReleaseUnconfirmed, EventUnreplicated, EventSubscriptionFailed:
		err := e.Err
		if err == nil {
			err = errors.New("no cause given")
		}
		o.errs = append(o.errs, fmt.Errorf("%s: %w", e.Kind, err))
	}
}

// mark is where the errors recorded from now on begin.
func (o *checkObserver) mark() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.errs)
}

// since returns the errors recorded after mark from.
func (o *checkObserver) since(from int) []error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]error(nil), o.errs[from:]...)
}

// waiting returns a channel closed when a call on key reports that it
// waits.
func (o *checkObserver) waiting(key string) <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.queued == nil {
		o.queued = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	o.queued[key] = ch
	return ch
}
