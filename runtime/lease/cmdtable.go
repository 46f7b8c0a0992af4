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
// loaded (a look at a loaded table sends nothing).
const cmdTableFast = 50 * time.Millisecond

// loadCommandTable makes cc load its command table, then closes ready. A
// routed command whose context has already ended loads the table (go-redis
// does not pass the command's context to the load) and then goes nowhere:
// its send fails on the ended context. A look that took long may have
// failed (every node it asked was silent): it is repeated until one is
// quick, or the Client closes.
func (c *Client) loadCommandTable(cc *redis.ClusterClient, ready chan struct{}) {
	defer close(ready)
	gone, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		select {
		case <-c.hub.closing:
		case <-gone.Done():
		}
		stop()
	}()
	for pause := 10 * time.Millisecond; gone.Err() == nil; pause = min(2*pause, time.Second) {
		// The slot map first (with a context that lives): the look below
		// would otherwise fail on its ended context before the load.
		sctx, cancel := context.WithTimeout(gone, 10*time.Second)
		err := cc.ForEachMaster(sctx, func(context.Context, *redis.Client) error { return nil })
		cancel()
		if err == nil {
			ended, end := context.WithCancel(gone)
			end()
			start := time.Now()
			_ = cc.Process(ended, redis.NewCmd(ended, "exists", "lease:{%cmdtable}"))
			if time.Since(start) < cmdTableFast {
				return
			}
			continue
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
