package lease

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Hooks for the package's external tests: they let a test play a
// scheduler that runs some goroutine late.

// SetRenewedHook makes f run after each renewal batch's answer came and
// before it is applied, until the test ends (restore).
func SetRenewedHook(f func()) (restore func()) {
	testHookRenewed.Store(&f)
	return func() { testHookRenewed.Store(nil) }
}

// StopValidityTimer disarms l's validity timer, as if its goroutine never
// got to run: only the renewer and Do's own checks can end the lease.
func StopValidityTimer(l *Lease) { l.w.timer.Stop() }

// SetCheckKeptHook makes f run in the background check of a kept lease
// (after a notice on its key's channel), between finding the lease and
// asking Redis about it, until restore.
func SetCheckKeptHook(f func()) (restore func()) {
	testHookCheckKept.Store(&f)
	return func() { testHookCheckKept.Store(nil) }
}

// RearmValidityTimer makes l's validity timer fire after d (a timer
// goroutine that runs late, but runs).
func RearmValidityTimer(l *Lease, d time.Duration) { l.w.timer.Reset(d) }

// CommandTableReady returns the channel a Cluster Client closes once its
// command-table load is over (nil for a single server).
func CommandTableReady(c *Client) <-chan struct{} { return c.cmdTable }

// CallHasGrantPart reports whether the call whose function got ctx was
// made with the parts only a call that acquires uses (see grantPart); ok
// is false when ctx carries no lease.
func CallHasGrantPart(ctx context.Context) (has, ok bool) {
	r, _ := ctx.Value(ctxKey{}).(*leaseRef)
	if r == nil {
		return false, false
	}
	return r.a.g != nil, true
}

// ReleaseScript is the release script a Client runs (token.lua and
// release.lua), for benchmarks that run it outside a call.
var ReleaseScript = releaseScript.Script

// AcquireSrc is the acquire script's source (token.lua and acquire.lua),
// for tests that run it outside a call.
var AcquireSrc = tokenSrc + acquireSrc

// GlobMatch and ScanGlob are List's and Watch's matching of a glob over
// user keys (glob.go).
var (
	GlobMatch = globMatch
	ScanGlob  = scanGlob
)

// AskNode is c.askNode: the client c makes for a Cluster master at addr
// that an ASK named.
func AskNode(c *Client, cc *redis.ClusterClient, addr string) *redis.Client {
	return c.askNode(cc, addr)
}
