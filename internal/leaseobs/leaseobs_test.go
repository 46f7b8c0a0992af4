package leaseobs

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

// The orders of events the runtime produces, and what Call makes of each:
// the adapters' tests run them against redis-server; these pin the edge
// cases down without timing.
// reentered is the EventDone of a nested call that reused its caller's lease.
func reentered(err error) lease.Event {
	return lease.Event{Kind: lease.EventDone, Reentered: true, Entered: true, Lost: errors.Is(err, lease.ErrLost), Err: err}
}

// entered is the EventDone of a call whose function ran; lost: its own
// lease was lost meanwhile.
func entered(err error, lost bool) lease.Event {
	return lease.Event{Kind: lease.EventDone, Entered: true, Lost: lost, Err: err}
}

func TestCallSequences(t *testing.T) {
	ev := func(k lease.EventKind, err error) lease.Event { return lease.Event{Kind: k, Err: err} }
	lost := fmt.Errorf("%w: renewal refused", lease.ErrLost)
	tests := []struct {
		name   string
		events []lease.Event
		want   Outcome
		acq    Outcome // the acquire's outcome; NumOutcomes: none
		held   bool
	}{
		{"granted", []lease.Event{ev(lease.EventAcquired, nil), ev(lease.EventReleased, nil), entered(nil, false)}, Granted, Granted, true},
		{"fn error under a good lease", []lease.Event{ev(lease.EventAcquired, nil), ev(lease.EventReleased, nil),
			entered(fmt.Errorf("inner: %w", lease.ErrBusy), false)}, Granted, Granted, true},
		{"fn returned a nested call's loss on another key", []lease.Event{ev(lease.EventAcquired, nil), ev(lease.EventReleased, nil),
			entered(fmt.Errorf("inner: %w", lost), false)}, Granted, Granted, true},
		{"granted, the Client closed before entry", []lease.Event{ev(lease.EventAcquired, nil),
			ev(lease.EventDone, fmt.Errorf("%w: closed before the function was entered", lease.ErrClosed))}, Error, Granted, false},
		{"busy", []lease.Event{ev(lease.EventBusy, nil), ev(lease.EventDone, lease.ErrBusy)}, Busy, Busy, false},
		{"skipped", []lease.Event{ev(lease.EventBusy, nil), ev(lease.EventSkipped, lease.ErrBusy), ev(lease.EventDone, nil)}, Skipped, Busy, false},
		{"unknown, release unconfirmed", []lease.Event{ev(lease.EventAcquireUnknown, lease.ErrUnknown),
			ev(lease.EventReleaseUnconfirmed, lease.ErrUnknown), ev(lease.EventDone, lease.ErrUnknown)}, Unknown, Unknown, false},
		{"unreplicated", []lease.Event{ev(lease.EventUnreplicated, lease.ErrUnknown), ev(lease.EventReleased, nil),
			ev(lease.EventDone, lease.ErrUnknown)}, Unknown, Unknown, false},
		{"refused", []lease.Event{ev(lease.EventRefused, lease.ErrRefused), ev(lease.EventDone, lease.ErrRefused)}, Refused, Refused, false},
		{"low validity", []lease.Event{ev(lease.EventLowValidity, lease.ErrLowValidity), ev(lease.EventReleased, nil),
			ev(lease.EventDone, lease.ErrLowValidity)}, LowValidity, LowValidity, false},
		{"lost", []lease.Event{ev(lease.EventAcquired, nil), ev(lease.EventRenewFailed, lost), ev(lease.EventLost, lost),
			ev(lease.EventReleased, nil), entered(lost, true)}, Lost, Granted, true},
		{"lost, reported after Done", []lease.Event{ev(lease.EventAcquired, nil), ev(lease.EventReleased, nil),
			entered(lost, true), ev(lease.EventRenewFailed, lost), ev(lease.EventLost, lost)}, Lost, Granted, true},
		{"lost and deadline: lost wins, as in Do", []lease.Event{ev(lease.EventAcquired, nil), ev(lease.EventLost, lost),
			ev(lease.EventDeadlineExceeded, nil), entered(lost, true)}, Lost, Granted, true},
		{"deadline", []lease.Event{ev(lease.EventAcquired, nil), ev(lease.EventDeadlineExceeded, nil), ev(lease.EventReleased, nil),
			entered(lease.ErrDeadline, false)}, Deadline, Granted, true},
		{"waiting ended by the caller's context", []lease.Event{ev(lease.EventWaiting, nil),
			ev(lease.EventDone, context.Canceled)}, Error, Error, false},
		{"reentered", []lease.Event{reentered(nil)}, Granted, NumOutcomes, false},
		{"reentered, enclosing lease lost", []lease.Event{reentered(lost)}, Lost, NumOutcomes, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCall("n", "k")
			start := time.Now()
			var waiting, active int
			var got Change
			acq := NumOutcomes
			for i, e := range tt.events {
				e.Name, e.Key, e.Start = "n", "k", start
				if e.Kind == lease.EventAcquired {
					e.Wait = time.Millisecond
				}
				if e.Kind == lease.EventReleased || e.Kind == lease.EventReleaseUnconfirmed {
					e.Held = 3 * time.Millisecond
				}
				ch := c.Observe(e, start.Add(time.Duration(i+1)*time.Millisecond))
				waiting += b2i(ch.WaitStarted) - b2i(ch.WaitEnded)
				active += b2i(ch.Entered) - b2i(ch.Left)
				if ch.AcquireEnded {
					if acq != NumOutcomes {
						t.Errorf("acquire ended twice")
					}
					acq = ch.Acquire
				}
				if ch.Done {
					got = ch
				}
			}
			if !got.Done || got.Outcome != tt.want {
				t.Errorf("outcome %v (done %v), want %v", got.Outcome, got.Done, tt.want)
			}
			if acq != tt.acq {
				t.Errorf("acquire outcome %v, want %v", acq, tt.acq)
			}
			if got.HeldValid != tt.held || (tt.held && got.Held <= 0) {
				t.Errorf("held %v (valid %v), want valid %v", got.Held, got.HeldValid, tt.held)
			}
			if waiting != 0 || active != 0 {
				t.Errorf("after the call: waiting %d, active %d; want 0 and 0", waiting, active)
			}
			if got.Reentered != (tt.acq == NumOutcomes) {
				t.Errorf("reentered %v", got.Reentered)
			}
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A function that panics ends the call without EventDone; its release
// still ends the hold, so lease.active does not leak.
func TestReleaseEndsHoldWithoutDone(t *testing.T) {
	c := NewCall("n", "k")
	now := time.Now()
	if ch := c.Observe(lease.Event{Kind: lease.EventAcquired, Start: now}, now); !ch.Entered {
		t.Fatal("not entered")
	}
	if ch := c.Observe(lease.Event{Kind: lease.EventReleased, Start: now, Held: time.Millisecond}, now); !ch.Left {
		t.Fatal("the release did not end the hold")
	}
}

func TestErrorType(t *testing.T) {
	for _, tt := range []struct {
		err  error
		o    Outcome
		want string
	}{
		{nil, Granted, ""},
		{lease.ErrBusy, Busy, "busy"},
		{fmt.Errorf("x: %w", lease.ErrClosed), Error, "closed"},
		{context.Canceled, Error, "canceled"},
		{errors.New("boom"), Granted, "*errors.errorString"},
	} {
		if got := ErrorType(tt.err, tt.o); got != tt.want {
			t.Errorf("ErrorType(%v, %v) = %q, want %q", tt.err, tt.o, got, tt.want)
		}
	}
}
