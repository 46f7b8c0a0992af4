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
//
// A permission missing from an ACL user's rules (see the README's
// recipes) shows on the first call that needs it: one that waits, a
// release that finds a waiter queued, a renewal. Check makes them all at
// once: run it when a service starts, or from leasectl check. The error
// is nil when every step ran clean; otherwise it joins the steps'
// errors. Check takes a few seconds (its waits and renewal are real
// ones) and leaves nothing behind but the fencing counter of its keys,
// which it deletes (a user without +del keeps them for the counter TTL).
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
	rec := &checkObserver{}
	a, err := c.sibling(rec)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	b, err := c.sibling(rec)
	if err != nil {
		return nil, err
	}
	defer b.Close()

	base := "leasegen-check:" + newID()[:16]
	key := func(what string) string { return base + ":" + what }
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
		steps = append(steps, CheckStep{Name: name, Took: time.Since(start), Err: checkErrs(append([]error{err}, rec.since(from)...))})
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
		errs := []error{
			checkCommand(ctx, c, "EVAL", "EVAL", "return 0", 1, k.lock),
			checkCommand(ctx, c, "EXISTS", "EXISTS", k.queue),
			checkCommand(ctx, c, "PUBLISH", "PUBLISH", k.channel, "check"),
			checkCommand(ctx, c, "PUBSUB NUMSUB", "PUBSUB", "NUMSUB", k.channel),
			checkUnsubscribe(ctx, c, k.channel),
		}
		if c.cluster {
			errs = append(errs, checkCommand(ctx, c, "ASKING", "ASKING"))
		}
		return errors.Join(errs...)
	})

	// The fencing counters (the only keys that outlive the calls).
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.releaseTimeout)
	for _, what := range []string{"grant", "wait"} {
		c.rdb.Del(dctx, redisKeys(c.prefix, key(what)).fence)
	}
	cancel()

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
	for _, s := range []*redis.Script{acquireScript.Script, releaseScript.Script, renewManyScript.Script, endholdScript.Script, renewScript, inspectScript, leaderScript} {
		if s.Hash() != m[1] {
			continue
		}
		lines := strings.Split(scriptSources[s], "\n")
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
func checkCommand(ctx context.Context, c *Client, name string, args ...any) error {
	if err := c.rdb.Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// checkUnsubscribe subscribes to channel and unsubscribes from it (the
// runtime's subscription leaves a channel nobody waits on any more).
func checkUnsubscribe(ctx context.Context, c *Client, channel string) error {
	ps := c.rdb.Subscribe(ctx, channel)
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
