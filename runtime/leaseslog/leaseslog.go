// Package leaseslog logs lease events with log/slog: one structured record
// per event, at a level that says whether someone should look.
//
//	leases, err := lease.New(rdb, lease.WithObserver(leaseslog.New(slog.Default())))
//
// Levels:
//
//	Error  lost (the work ran partly unprotected), refused (the server refused the acquire, or it could not be sent)
//	Warn   acquire_unknown, unreplicated, low_validity, renew_failed, release_unconfirmed,
//	       deadline_exceeded, stale_write_rejected, subscription_failed
//	Info   busy, skipped
//	Debug  waiting, acquired, renewed, released, done
//
// Each record is "lease <event>" with the group lease: name (Spec.Name),
// key, token (fenced grants), wait, took, held (durations that apply),
// result (renewals and releases), outcome (done), and err. The context of
// the call is passed to the handler, so handlers that add trace IDs from
// it correlate the records with the call's span.
//
// The package is in the core module and uses only the standard library.
package leaseslog

import (
	"context"
	"log/slog"
	"time"

	"github.com/leasegen/leasegen/internal/leaseobs"
	"github.com/leasegen/leasegen/runtime/lease"
)

// Observer is a lease.CallObserver that logs every event.
type Observer struct {
	l *slog.Logger
}

// New returns an Observer logging to l (slog.Default() if nil).
func New(l *slog.Logger) *Observer {
	if l == nil {
		l = slog.Default()
	}
	return &Observer{l: l}
}

// Level returns the level an event of kind k is logged at.
func Level(k lease.EventKind) slog.Level {
	switch k {
	case lease.EventLost, lease.EventRefused:
		return slog.LevelError
	case lease.EventAcquireUnknown, lease.EventUnreplicated, lease.EventLowValidity, lease.EventRenewFailed,
		lease.EventReleaseUnconfirmed, lease.EventDeadlineExceeded, lease.EventStaleWriteRejected,
		lease.EventSubscriptionFailed:
		return slog.LevelWarn
	case lease.EventBusy, lease.EventSkipped:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

// callKey keys a call's state by the Observer that follows it: two
// Observers combined with lease.Observers each keep their own.
type callKey struct{ o *Observer }

// StartCall follows the call, to log its outcome at EventDone, when Debug
// records are enabled.
func (o *Observer) StartCall(ctx context.Context, key string, spec lease.Spec) context.Context {
	name := spec.Name
	if !o.l.Enabled(ctx, slog.LevelDebug) {
		return ctx
	}
	return context.WithValue(ctx, callKey{o}, leaseobs.NewCall(name, key))
}

// Observe logs e.
func (o *Observer) Observe(e lease.Event) {
	ctx := e.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	var ch leaseobs.Change
	if c, ok := ctx.Value(callKey{o}).(*leaseobs.Call); ok && c.Key == e.Key && c.Name == e.Name {
		ch = c.Observe(e, time.Now())
	}
	level := Level(e.Kind)
	if !o.l.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 8)
	if e.Kind != lease.EventSubscriptionFailed {
		attrs = append(attrs, slog.String("name", e.Name), slog.String("key", e.Key))
	}
	if e.Token != 0 {
		attrs = append(attrs, slog.Uint64("token", uint64(e.Token)))
	}
	if e.Kind == lease.EventAcquired {
		attrs = append(attrs, slog.Duration("wait", e.Wait))
	}
	if e.Took != 0 {
		attrs = append(attrs, slog.Duration("took", e.Took))
	}
	if e.Held != 0 {
		attrs = append(attrs, slog.Duration("held", e.Held))
	}
	if r, ok := leaseobs.ResultOf(e); ok {
		attrs = append(attrs, slog.String("result", r.String()))
	}
	if ch.Done {
		attrs = append(attrs, slog.String("outcome", ch.Outcome.String()))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("err", e.Err.Error()))
	}
	o.l.LogAttrs(ctx, level, "lease "+e.Kind.String(), slog.Attr{Key: "lease", Value: slog.GroupValue(attrs...)})
}
