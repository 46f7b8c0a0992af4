// Package leaseobs follows protected calls through their lease events, for
// the observer adapters (runtime/leaseotel, runtime/leaseprom,
// runtime/leaseslog and the example's /metrics): one outcome per call, the
// moments a call starts and stops waiting and holding, and the result of
// each renewal and release, so that every adapter counts the same things
// the same way.
//
// It is internal: the adapters live in their own modules but under this
// module's path, so they may import it, and they are released with the
// core module they require.
package leaseobs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/lease"
)

// Outcome is how a protected call, or its acquire, ended.
type Outcome uint8

// The outcomes, as the lease.outcome attribute names them.
const (
	Granted     Outcome = iota // fn ran under a lease that held to the end (fn's own error aside)
	Busy                       // held by another for the whole wait (ErrBusy)
	Skipped                    // busy, and Spec.Busy is BusySkip: Do returned nil without calling fn
	Unknown                    // the acquire's outcome is unknown (ErrUnknown, unreplicated grants included)
	LowValidity                // granted too late to enter (ErrLowValidity)
	Lost                       // the lease ended while fn ran (ErrLost)
	Deadline                   // the total budget ran out while fn ran (ErrDeadline)
	Refused                    // the acquire was definitely not executed (ErrRefused)
	Error                      // any other failure: the caller's context ended while waiting, the Client closed, a bad key
	NumOutcomes
)

var outcomeNames = [NumOutcomes]string{"granted", "busy", "skipped", "unknown", "low_validity", "lost", "deadline", "refused", "error"}

func (o Outcome) String() string {
	if o < NumOutcomes {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Classify maps an error returned by Do to an outcome, from the error
// alone. Call.Observe is more precise: it knows whether fn ran.
func Classify(err error) Outcome {
	switch {
	case err == nil:
		return Granted
	case errors.Is(err, lease.ErrLost):
		return Lost
	case errors.Is(err, lease.ErrDeadline):
		return Deadline
	case errors.Is(err, lease.ErrBusy):
		return Busy
	case errors.Is(err, lease.ErrUnknown):
		return Unknown
	case errors.Is(err, lease.ErrLowValidity):
		return LowValidity
	case errors.Is(err, lease.ErrRefused):
		return Refused
	}
	return Error
}

// ErrorType is the error.type of a call that ended with err and outcome o:
// the outcome's name for the lease's own failures, a short name for the
// runtime's other errors, a write rejected by a fenced resource and the
// caller's context, else the error's Go
// type (low cardinality: bounded by the program's types). "" for nil.
func ErrorType(err error, o Outcome) string {
	if err == nil {
		return ""
	}
	switch o {
	case Busy, Unknown, LowValidity, Lost, Deadline, Refused:
		return o.String()
	}
	switch {
	case errors.Is(err, lease.ErrClosed):
		return "closed"
	case errors.Is(err, lease.ErrBadKey):
		return "bad_key"
	case errors.Is(err, fence.ErrStale):
		return "stale_write"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	}
	return fmt.Sprintf("%T", err)
}

// Result is the result of one renewal or release, as the lease.result
// attribute names it.
type Result uint8

// The results.
const (
	Renewed      Result = iota // a renewal was confirmed
	RenewUnknown               // a renewal's reply was lost (ErrUnknown): the lease was not extended
	RenewRefused               // the server refused a renewal (ErrRefused)
	NotOwner                   // a renewal found the key no longer ours: the lease is lost
	Confirmed                  // a release (or hold shortening) was confirmed
	Unconfirmed                // a release got no reply or was refused: the TTL will end the lease
	NumResults
)

var resultNames = [NumResults]string{"renewed", "unknown", "refused", "not_owner", "confirmed", "unconfirmed"}

func (r Result) String() string {
	if r < NumResults {
		return resultNames[r]
	}
	return fmt.Sprintf("Result(%d)", uint8(r))
}

// ResultOf returns the result an event reports, for the renewal and
// release events (ok false for the others).
func ResultOf(e lease.Event) (Result, bool) {
	switch e.Kind {
	case lease.EventRenewed:
		return Renewed, true
	case lease.EventRenewFailed:
		switch {
		case errors.Is(e.Err, lease.ErrLost):
			return NotOwner, true
		case errors.Is(e.Err, lease.ErrRefused):
			return RenewRefused, true
		}
		return RenewUnknown, true
	case lease.EventReleased:
		return Confirmed, true
	case lease.EventReleaseUnconfirmed:
		return Unconfirmed, true
	}
	return 0, false
}

// Call is what one protected call has shown so far. An adapter makes one
// in its StartCall, keeps it in the call's context, and passes every event
// of the call to Observe. Safe for concurrent use: renewal events come from
// the Client's renewal goroutine, stale-write reports from fn's.
type Call struct {
	Name, Key string
	Begun     time.Time // when StartCall ran

	mu       sync.Mutex
	start    time.Time // Event.Start
	waiting  bool      // counted in lease.waiting now
	waited   bool      // waited at some point
	acquired bool      // EventAcquired seen
	acqEnded bool
	acquire  Outcome
	holding  bool // counted in lease.active now
	entered  time.Time
	held     time.Duration
	skipped  bool
	lost     bool
	deadline bool
	done     bool
}

// NewCall starts following the call on key named name.
func NewCall(name, key string) *Call {
	return &Call{Name: name, Key: key, Begun: time.Now()}
}

// Change is what one event changed. Zero fields did not change.
type Change struct {
	WaitStarted bool // the call started waiting for a busy lease (lease.waiting +1)
	WaitEnded   bool // it stopped waiting (lease.waiting −1)
	Entered     bool // fn was entered under a fresh grant (lease.active +1)
	Left        bool // the lease is released, or the call ended (lease.active −1)

	// AcquireEnded: the acquire ended with Acquire (Granted, Busy, Unknown,
	// LowValidity, Refused, or Error when waiting stopped early) after
	// AcquireTook from the call's start, at AcquireStart+AcquireTook.
	AcquireEnded bool
	Acquire      Outcome
	AcquireStart time.Time
	AcquireTook  time.Duration

	// Done: the call returned with Outcome. Held is how long fn held the
	// lease (entry to release) when HeldValid. Reentered: the call reused
	// its caller's lease on the same key (no acquire, no release).
	Done      bool
	Outcome   Outcome
	Held      time.Duration
	HeldValid bool
	Reentered bool
	// LostUnseen: the outcome is Lost but EventLost has not arrived (the
	// renewal goroutine reports it and may do so after EventDone, which
	// is then ignored here).
	LostUnseen bool
}

// Observe records e, observed at now, and returns what it changed. Events
// after the call's EventDone (a late renewal) change nothing.
func (c *Call) Observe(e lease.Event, now time.Time) Change {
	var ch Change
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return ch
	}
	if c.start.IsZero() {
		c.start = e.Start
		if c.start.IsZero() {
			c.start = c.Begun
		}
	}
	switch e.Kind {
	case lease.EventWaiting:
		if !c.acqEnded && !c.waiting {
			c.waiting, c.waited = true, true
			ch.WaitStarted = true
		}
	case lease.EventAcquired:
		c.endAcquire(&ch, Granted, e.Wait)
		c.acquired, c.holding = true, true
		c.entered = c.start.Add(e.Wait)
		ch.Entered = true
	case lease.EventBusy:
		c.endAcquire(&ch, Busy, now.Sub(c.start))
	case lease.EventAcquireUnknown, lease.EventUnreplicated:
		c.endAcquire(&ch, Unknown, now.Sub(c.start))
	case lease.EventRefused:
		c.endAcquire(&ch, Refused, now.Sub(c.start))
	case lease.EventLowValidity:
		if c.acquired {
			// Granted, then too little validity left when fn was to be
			// entered (a pause in between): fn did not run.
			c.acquired, c.acquire = false, LowValidity
		}
		c.endAcquire(&ch, LowValidity, now.Sub(c.start))
	case lease.EventSkipped:
		c.skipped = true
	case lease.EventLost:
		c.lost = true
	case lease.EventDeadlineExceeded:
		c.deadline = true
	case lease.EventReleased, lease.EventReleaseUnconfirmed:
		if c.holding {
			c.holding = false
			c.held = e.Held
			ch.Left = true
		}
	case lease.EventDone:
		c.done = true
		ch.Done = true
		if !c.acqEnded {
			if e.Reentered {
				ch.Reentered = true
			} else {
				// A call that ended before its acquire said anything: it
				// waited and was cut off, or never sent (closed Client,
				// context already done).
				c.endAcquire(&ch, Classify(e.Err), now.Sub(c.start))
			}
		}
		if c.acquired && !e.Entered && !e.Reentered {
			// Granted, then not entered (the Client closed first): fn did
			// not run under the lease; the call's outcome is its error's.
			c.acquired, c.acquire = false, Classify(e.Err)
		}
		if c.holding { // no release event: the release found the key not ours
			c.holding = false
			c.held = now.Sub(c.entered)
			ch.Left = true
		}
		ch.Outcome = c.outcome(e, ch.Reentered)
		ch.Held, ch.HeldValid = c.held, c.acquired
		ch.LostUnseen = ch.Outcome == Lost && !c.lost
	}
	return ch
}

func (c *Call) endAcquire(ch *Change, o Outcome, took time.Duration) {
	if c.acqEnded {
		return
	}
	c.acqEnded, c.acquire = true, o
	ch.AcquireEnded, ch.Acquire, ch.AcquireStart, ch.AcquireTook = true, o, c.start, took
	if c.waiting {
		c.waiting = false
		ch.WaitEnded = true
	}
}

// outcome is the call's outcome once Do returned (its EventDone e). A
// loss is read from e.Lost, not from EventLost (which may come after
// EventDone) nor from an ErrLost in Err: e.Lost says the loss touched the
// call's own lease while fn ran (one lost after fn returned in time,
// while its lease was being kept, or before fn was entered, did not),
// where Err may wrap ErrLost from a nested call on another key that fn
// returned. A call not granted keeps its acquire's outcome (a call that
// never started because its caller's lease was lost is Lost by its
// error). A granted call, or a reentered one whose fn ran, is otherwise
// Granted whatever fn returned (even an error wrapping ErrBusy or ErrLost
// from a nested call on another key): the outcome describes the lease.
func (c *Call) outcome(e lease.Event, reentered bool) Outcome {
	switch {
	case e.Lost:
		return Lost
	case c.deadline:
		return Deadline
	case c.acquired, reentered && e.Entered:
		// (A reentered call not entered, refused before its function or
		// with no time left for it, has its error's outcome.)
		return Granted
	case c.skipped:
		return Skipped
	case c.acqEnded:
		return c.acquire
	}
	return Classify(e.Err)
}
