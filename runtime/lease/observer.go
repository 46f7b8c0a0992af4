package lease

import (
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
	EventRenewFailed                             // renewal unknown (Err wraps ErrUnknown) or refused (Err wraps ErrLost)
	EventLost                                    // lease ended while the function ran
	EventDeadlineExceeded                        // the total budget ran out
	EventReleased                                // release confirmed (or the hold shortened)
	EventReleaseUnconfirmed                      // release sent, no reply read: the TTL will end it
	EventUnreplicated                            // grant not acknowledged by the required replicas
	EventStaleWriteRejected                      // a fenced resource rejected a stale token (runtime/fence)
	EventDone                                    // the protected call finished; Err is what Do returned
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
}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one observation. Fields that do not apply are zero.
type Event struct {
	Kind  EventKind
	Key   string        // the user's key, as passed to Do
	Token Token         // fencing token of the grant (0 without fence)
	Start time.Time     // when the call started (for spans)
	Wait  time.Duration // EventAcquired: time from the call's start to entry
	Err   error         // the uncertain or failing outcome, when there is one
}

// Observer receives lease events. Observe is called synchronously on the
// path of the call (keep it fast) and may be called from several goroutines.
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
