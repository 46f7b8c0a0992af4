package lease

import (
	"context"
	"sync/atomic"
)

type skipKey struct{}

// WithSkipReport lets the caller of a BusySkip call (a generated wrapper
// with busy=skip, or Do with Spec.Busy = BusySkip) tell a skipped call from
// one that ran: both return nil. Calls made with the returned context, or a
// context derived from it, record a skip; skipped reports whether any did.
//
//	ctx, skipped := lease.WithSkipReport(ctx)
//	if err := jobs.Settle(ctx); err != nil { ... }
//	if skipped() { log.Print("settlement ran elsewhere") }
func WithSkipReport(ctx context.Context) (_ context.Context, skipped func() bool) {
	var b atomic.Bool
	return context.WithValue(ctx, skipKey{}, &b), b.Load
}

func noteSkip(ctx context.Context) {
	if b, ok := ctx.Value(skipKey{}).(*atomic.Bool); ok {
		b.Store(true)
	}
}
