package lease

import (
	"context"
	"fmt"
	"time"
)

// EventKind names what happened to a lease.
type EventKind uint8

// The events an Observer receives.
const (
	EventAcquired           EventKind = iota + 1 // granted, fn entered next (unless EventLowValidity follows: too little left by then; or the Client was closed first: EventDone with ErrClosed); Event.Wait is the time spent getting it
	EventBusy                                    // held by another for the whole wait
	EventAcquireUnknown                          // acquire sent, no reply read
	EventLowValidity                             // granted too late to enter, or too little validity left when fn was to be entered (a pause in between): fn not called
	EventRenewed                                 // renewal confirmed
	EventRenewFailed                             // renewal unknown (Err wraps ErrUnknown), refused by the server (ErrRefused) or not the owner (ErrLost)
	EventLost                                    // lease ended while the function ran (or, for a call not entered, while it was held)
	EventDeadlineExceeded                        // the total budget ran out
	EventReleased                                // release confirmed (or the hold shortened)
	EventReleaseUnconfirmed                      // release not confirmed: no reply (Err wraps ErrUnknown) or refused (ErrRefused); the TTL will end it
	EventUnreplicated                            // grant not acknowledged by the required replicas
	EventStaleWriteRejected                      // a fenced resource rejected a stale token (runtime/fence)
	EventDone                                    // the protected call finished; Err is what Do returned
	EventSkipped                                 // busy for the whole wait and Spec.Busy is BusySkip: fn was not called
	EventRefused                                 // the acquire was definitely not executed (Err wraps ErrRefused and names the cause)
	EventSubscriptionFailed                      // release notifications are interrupted (the subscription, or a release's message refused, as by an ACL); waiters re-check until they resume (no call: Ctx is Background, Key empty)
	EventWaiting                                 // the first attempt found the lease busy and the call waits (Spec.Wait > 0); one per call at most
)

var eventNames = [...]string{
	EventAcquired:           "acquired",
	EventBusy:               "busy",
	EventAcquireUnknown:     "acquire_unknown",
	EventLowValidity:        "low_validity",
	EventRenewed:            "renewed",
	EventRenewFailed:        "renew_failed",
	EventLost:               "lost",
	EventDeadlineExceeded:   "deadline_exceeded",
	EventReleased:           "released",
	EventReleaseUnconfirmed: "release_unconfirmed",
	EventUnreplicated:       "unreplicated",
	EventStaleWriteRejected: "stale_write_rejected",
	EventDone:               "done",
	EventSkipped:            "skipped",
	EventRefused:            "refused",
	EventSubscriptionFailed: "subscription_failed",
	EventWaiting:            "waiting",
}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one observation. Fields that do not apply are zero.
type Event struct {
	Kind EventKind
	// Ctx is the context of the call the event belongs to: the caller's
	// ctx passed to Do, as returned by a CallObserver's StartCall, so that
	// adapters can parent spans, find per-call state and read
	// request-scoped values. Events of background work (renewals) carry the
	// same ctx as their call. Never nil.
	Ctx   context.Context
	Name  string    // Spec.Name: a low-cardinality name for metrics and spans
	Key   string    // the user's key, as passed to Do
	Token Token     // fencing token of the grant (0 without fence)
	Start time.Time // when the call started (for spans)
	// Wait is, for EventAcquired, the time from the call's start to entry.
	Wait time.Duration
	// Took is how long the step took: the release round trip
	// (EventReleased, EventReleaseUnconfirmed), the renewal round trip
	// (EventRenewed, EventRenewFailed).
	Took time.Duration
	// Held is, for EventReleased and EventReleaseUnconfirmed after work,
	// the time from entry to the release.
	Held time.Duration
	// At is when the event happened (renewal events are delivered after
	// their batch has been processed).
	At time.Time
	// Reentered is set on the EventDone of a nested call that reused its
	// caller's lease (no acquire, no release of its own).
	Reentered bool
	// Kept is set on EventAcquired when the call took a lease the Client
	// kept from an earlier call (Spec.Keep): no round trip, same token.
	Kept bool
	// Entered is set on EventDone when the call's function ran (under a
	// grant, or Reentered under its caller's lease). A call granted a
	// lease and not entered (EventLowValidity, or the Client closed
	// first: Err wraps ErrClosed) ends without it.
	Entered bool
	// Lost is set on EventDone when Err wraps ErrLost for the call's own
	// lease: lost while its function ran (or, Reentered, its caller's
	// lease was, or the caller returned), or a kept lease the call took
	// found lost before its function was entered (Err wraps
	// ErrLowValidity too). An ErrLost in Err without Lost is not this
	// call's lease's: the function returned it (a nested call on another
	// key), or the call was not started because its context had ended
	// with a loss (its caller's).
	Lost bool
	Err  error // the uncertain or failing outcome, when there is one
}

// Observer receives lease events. Observe is called synchronously on the
// path of the call (keep it fast) and may be called from several goroutines.
// It is never called with an internal lock held, so it may call any method
// of the Client, Close included. Renewal events come from the Client's
// renewal goroutine; one may arrive just after its call's EventDone.
// A call's EventLost comes before its EventDone: when the loss is found by
// another goroutine (a renewal refused, the validity timer), the call
// waits for that EventLost to be observed before it returns, for up to a
// second; so an Observer must not wait for the call it observes to
// return. EventDone's Err says whether the loss touched the call: a lease
// lost after its function returned in time (while the Client was deciding
// to keep it) reports EventLost, then an EventDone without error. A kept
// lease (Spec.Keep) lost between calls reports EventLost to the last call
// that used it, after that call's EventDone.
type Observer interface {
	Observe(Event)
}

// A CallObserver is also told when each call starts, before anything is
// sent, with the call's spec after defaults (spec.Name, spec.TTL, ...). The
// context it returns becomes the call's context: fn runs under it and every
// event of the call carries it (Event.Ctx). Adapters use it to start a span
// that parents the protected work, and to keep per-call state (a value in
// the context) that later events find. Every call that started ends with
// exactly one EventDone.
type CallObserver interface {
	Observer
	StartCall(ctx context.Context, key string, spec Spec) context.Context
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// Observers fans each event out to several observers, in order. Nil
// entries (an optional adapter left unset, a nil ObserverFunc) are
// skipped.
type Observers []Observer

// Observe sends e to each observer.
func (os Observers) Observe(e Event) {
	for _, o := range os {
		if !isNilObserver(o) {
			o.Observe(e)
		}
	}
}

// StartCall passes ctx through the StartCall of each CallObserver, in order.
func (os Observers) StartCall(ctx context.Context, key string, spec Spec) context.Context {
	for _, o := range os {
		if co, ok := o.(CallObserver); ok && !isNilObserver(o) {
			ctx = co.StartCall(ctx, key, spec)
		}
	}
	return ctx
}

// isNilObserver reports a nil entry: a nil interface or a nil
// ObserverFunc. (A nil pointer of another type may have methods that work;
// it is called.)
func isNilObserver(o Observer) bool {
	if o == nil {
		return true
	}
	f, ok := o.(ObserverFunc)
	return ok && f == nil
}

type nopObserver struct{}

func (nopObserver) Observe(Event) {}
