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
	EventAcquired           EventKind = iota + 1 // granted and entered; Event.Wait is the time spent getting it
	EventBusy                                    // held by another for the whole wait
	EventAcquireUnknown                          // acquire sent, no reply read
	EventLowValidity                             // granted too late to enter
	EventRenewed                                 // renewal confirmed
	EventRenewFailed                             // renewal unknown (Err wraps ErrUnknown), refused by the server (ErrRefused) or not the owner (ErrLost)
	EventLost                                    // lease ended while the function ran
	EventDeadlineExceeded                        // the total budget ran out
	EventReleased                                // release confirmed (or the hold shortened)
	EventReleaseUnconfirmed                      // release not confirmed: no reply (Err wraps ErrUnknown) or refused (ErrRefused); the TTL will end it
	EventUnreplicated                            // grant not acknowledged by the required replicas
	EventStaleWriteRejected                      // a fenced resource rejected a stale token (runtime/fence)
	EventDone                                    // the protected call finished; Err is what Do returned
	EventSkipped                                 // busy for the whole wait and Spec.Busy is BusySkip: fn was not called
	EventRefused                                 // the acquire was definitely not executed (Err wraps ErrRefused and names the cause)
	EventSubscriptionFailed                      // release notifications are interrupted; waiters re-check until they resume (no call: Ctx is Background, Key empty)
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
	// Ctx is the context of the call the event belongs to (the caller's
	// ctx passed to Do), so that adapters can parent spans and read
	// request-scoped values. Events of background work (renewals) carry the
	// same ctx as their call. Never nil for events of a call.
	Ctx   context.Context
	Name  string        // Spec.Name: a low-cardinality name for metrics and spans
	Key   string        // the user's key, as passed to Do
	Token Token         // fencing token of the grant (0 without fence)
	Start time.Time     // when the call started (for spans)
	Wait  time.Duration // EventAcquired: time from the call's start to entry
	Err   error         // the uncertain or failing outcome, when there is one
}

// Observer receives lease events. Observe is called synchronously on the
// path of the call (keep it fast) and may be called from several goroutines.
// It is never called with an internal lock held, so it may call any method
// of the Client, Close included. Renewal events come from the Client's
// renewal goroutine; one may arrive just after its call's EventDone.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// Observers fans each event out to several observers, in order.
type Observers []Observer

// Observe sends e to each observer.
func (os Observers) Observe(e Event) {
	for _, o := range os {
		o.Observe(e)
	}
}

type nopObserver struct{}

func (nopObserver) Observe(Event) {}
