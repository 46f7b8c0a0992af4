package lease

import (
	"fmt"
	"time"
)

// BusyPolicy says what Do does when the lease stays busy for the whole wait.
type BusyPolicy uint8

const (
	// BusyError returns an error wrapping ErrBusy (the zero value).
	BusyError BusyPolicy = iota
	// BusySkip skips the call and returns nil: for scheduled jobs where
	// another node running the job is as good as running it here.
	BusySkip
)

func (p BusyPolicy) String() string {
	switch p {
	case BusyError:
		return "error"
	case BusySkip:
		return "skip"
	}
	return fmt.Sprintf("BusyPolicy(%d)", uint8(p))
}

// Spec describes one protected call. Zero values take defaults (TTL 30s,
// MinValidity TTL/2, Wait 0, HoldMin 0), except Deadline: every call states
// its worst case.
type Spec struct {
	// TTL is the lease length; the lease is renewed every TTL/3 while fn runs.
	TTL time.Duration
	// Deadline is the total budget of one call: waiting + work + release.
	Deadline time.Duration
	// Wait bounds how long a busy lease is waited for (0: try once).
	Wait time.Duration
	// MinValidity is the least lease time that must remain after the grant
	// for fn to be entered.
	MinValidity time.Duration
	// HoldMin keeps the lease at least this long after the grant, even when
	// fn returns earlier.
	HoldMin time.Duration
	// Busy selects what happens when the lease stays busy.
	Busy BusyPolicy
	// Fence mints a fencing token for each grant (see TokenFrom).
	Fence bool
	// Keep keeps the lease after fn returns, renewed, for up to this long:
	// the next call on the key in the same Client enters at once, with the
	// same fencing token, if the lease has MinValidity left. A waiter in
	// another process makes the Client release it as soon as no call uses
	// it. 0: release when fn returns. A call without Fence may take a
	// lease kept by a fenced one, and then runs under that fenced grant:
	// TokenFrom and Lease.Token report its token, as in a call nested in
	// a fenced one; a call with Fence takes only a fenced lease.
	//
	// The price of no round trip: a call that ends by keeping its lease
	// does not ask Redis whether the key is still its own, as a release
	// does. A lease released from outside (ForceRelease) or handed over is
	// known within a notification's latency and one round trip (the
	// notice is checked against the key), and its calls get ErrLost from
	// then on (the first call of a keep, before the Client hears the key's
	// notifications, asks Redis instead, as a release would). A kept call
	// that begins or ends while the notice is on its way (ForceRelease
	// may have returned already) runs on the released lease and may
	// return nil, even while a new holder runs: the loss is reported by
	// an EventLost when the notice arrives. One
	// deleted from outside without notice, or lost in a restart or
	// failover, is known at the next renewal (within TTL/3) or when the
	// subscription comes back (until the key has been checked after that,
	// a reuse asks Redis, one round trip) or, after a failover that left
	// it connected to the demoted node, when its probe finds that out: a
	// kept call that begins before that runs on the lost lease, beside the
	// new primary's holder, until it is told, and one that ends before
	// that may return nil. Fence what such a call writes, or do not keep
	// leases where keys are deleted from outside.
	Keep time.Duration
	// Name is a low-cardinality name for the protected operation, carried
	// by every Event (metric labels, span names). The generator sets the
	// target's qualified name, such as "orders.(*Server).chargeOrder".
	// Empty is allowed; the concrete key is never a good label.
	Name string
}

// DefaultTTL is the lease length used when Spec.TTL is zero.
const DefaultTTL = 30 * time.Second

// Check reports whether Do would accept s, with the same message Do would
// return. leasegen calls it at generate time, so a directive that the
// runtime would refuse is refused there too.
func (s Spec) Check() error {
	_, err := s.normalize()
	return err
}

// minEntryWindow is the least time a grant must leave between its entry
// threshold (MinValidity) and the end of its validity (TTL − drift): the
// reply of the acquire has to arrive within it. A spec with a smaller window
// could never be entered.
const minEntryWindow = time.Millisecond

// normalize fills defaults and checks the spec; it is the only validation,
// and runs before anything is sent to Redis.
func (s Spec) normalize() (Spec, error) {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"TTL", s.TTL}, {"Deadline", s.Deadline}, {"Wait", s.Wait}, {"MinValidity", s.MinValidity}, {"HoldMin", s.HoldMin}, {"Keep", s.Keep}} {
		if d.v < 0 {
			return s, fmt.Errorf("lease: Spec.%s is negative (%v)", d.name, d.v)
		}
	}
	if s.Deadline == 0 {
		return s, fmt.Errorf("lease: Spec.Deadline is zero: every protected call needs a total budget")
	}
	if s.TTL == 0 {
		s.TTL = DefaultTTL
	}
	if s.MinValidity == 0 {
		s.MinValidity = s.TTL / 2
	}
	if s.MinValidity >= s.TTL {
		return s, fmt.Errorf("lease: Spec.MinValidity %v must be less than TTL %v", s.MinValidity, s.TTL)
	}
	if v := s.TTL - drift(s.TTL); v-s.MinValidity < minEntryWindow {
		return s, fmt.Errorf("lease: Spec.TTL %v cannot be entered with MinValidity %v: a grant is trusted for TTL − drift (1%% + 2ms) = %v, which leaves less than %v for the acquire's reply; use a longer TTL or a smaller MinValidity", s.TTL, s.MinValidity, v, minEntryWindow)
	}
	if s.Wait > 0 && s.Wait >= s.Deadline {
		return s, fmt.Errorf("lease: Spec.Wait %v must be less than Deadline %v", s.Wait, s.Deadline)
	}
	if s.HoldMin > s.Deadline {
		return s, fmt.Errorf("lease: Spec.HoldMin %v must not exceed Deadline %v", s.HoldMin, s.Deadline)
	}
	if s.Busy > BusySkip {
		return s, fmt.Errorf("lease: unknown Spec.Busy %v", s.Busy)
	}
	return s, nil
}

// drift is the allowance for clock rate differences between this process
// and Redis: 1% of the TTL plus 2ms.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }
