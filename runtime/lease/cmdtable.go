package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Cluster client's command table. go-redis's ClusterClient (with its
// routing policies, the default) loads the servers' command table on its
// first routed command, from up to 3 nodes one after another, under a 5 s
// timeout of its own that ignores the command's context: on a fresh client
// with a node that does not answer (paused, blackholed), the first calls
// would outlive their deadlines by seconds. New therefore loads the table
// on a goroutine of its own (loadCommandTable), and calls wait for that
// load within their budget (waitCommandTable) instead of starting it
// themselves. Once loaded, go-redis keeps the table for the client's life.

// cmdTableFast is how long a look at the table may take for it to count as
// loaded when the look cannot tell (a look at a loaded table asks nothing).
const cmdTableFast = 50 * time.Millisecond

// loadCommandTable makes cc load its command table, then closes ready. It
// asks go-redis's own resolver for a command's policy, which loads the
// table as a routed command would (under go-redis's own timeout) but sends
// no command and goes through none of the client's hooks: a hook that
// answers an ended context at once, or that takes a while, tells nothing
// about the table. On Redis 7 and later every command has a policy once
// the table is loaded; without one (Redis 6, or a load that failed) a
// look that was quick counts as loaded (a load refused at once, as for an
// ACL user without +command, is tried again by go-redis on each command,
// as quickly), and one that took long (a silent node) is repeated after a
// pause, until one is quick or the Client closes. With
// DisableRoutingPolicies (and no ReadOnly) go-redis never loads the table
// on a command's path: there is nothing to wait for.
func (c *Client) loadCommandTable(cc *redis.ClusterClient, ready chan struct{}) {
	defer close(ready)
	if o := cc.Options(); o.DisableRoutingPolicies && !o.ReadOnly {
		return
	}
	gone := ctxOf(c.hub.closing) // ends with the Client
	resolver := cc.NewDynamicResolver()
	look := redis.NewCmd(gone, "get", c.prefix+"{%cmdtable}")
	for pause := 10 * time.Millisecond; gone.Err() == nil; pause = min(2*pause, time.Second) {
		start := time.Now()
		if resolver.GetCommandPolicy(gone, look) != nil || time.Since(start) < cmdTableFast {
			return
		}
		select {
		case <-gone.Done():
		case <-time.After(pause):
		}
	}
}

// waitCommandTable waits until the Cluster client's command table is
// loaded (see loadCommandTable), while ctx lives and, unless until is
// zero, at most until until. Nothing has been sent when it fails: the
// error is ErrRefused (or ErrClosed), naming what held the call up; op
// and key say which call it was ("" for the call on key).
func (c *Client) waitCommandTable(ctx context.Context, op, key string, until time.Time) error {
	if c.cmdTable == nil {
		return nil
	}
	select {
	case <-c.cmdTable:
		return nil
	default:
	}
	var timeout <-chan time.Time
	if !until.IsZero() {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		timeout = t.C
	}
	if op != "" {
		op += " of "
	}
	select {
	case <-c.cmdTable:
		return nil
	case <-c.hub.closing:
		return fmt.Errorf("%w: %skey %q", ErrClosed, op, key)
	case <-ctx.Done():
	case <-timeout:
	}
	return fmt.Errorf("%w: %skey %q: not sent: the Cluster client is still loading its command table (go-redis asks the nodes one by one, under a timeout of its own, and one of them has not answered yet)", ErrRefused, op, key)
}
