package leasecheck_test

import (
	"testing"
)

// Adversary round 65a: the escape check after round 64c. The testdata
// packages adversary65a* were generated with leasegen in GOPATH mode over
// testdata (cd testdata/src/adversary65ax && GO111MODULE=off
// GOPATH=<abs>/testdata leasegen .), as the adversary64c ones.

// Finding (false negative since 64c), README escape row: "`go f(ctx)` …
// inside a protected function … that some path leaves without waiting for
// it". A goroutine started in a closure that waits for it is accepted
// ("has ended when the closure returns"), but the closure itself may not
// have returned when the protected function does: an errgroup task whose
// g.Wait() is never called, a closure run by go start(). The go statement
// inside was reported before 64c (no wait in the protected function);
// now nothing is. Likely cause: escape.go checkEscape accepts the go
// statement when awaited(...) holds in the innermost closure, without
// asking whether that closure runs (and returns) before the protected
// function returns (it is only called synchronously, or deferred).
func TestAdversary65aEscapeClosureRunAsynchronously(t *testing.T) {
	t.Parallel()
	runShared(t, "adversary65aescasync")
}

// No finding (false positive since 64c), README limits: "A receive loop
// that can return or break early … do not count as waiting for all the
// goroutines." A range over the results channel (closed by a waiter
// goroutine after wg.Wait()) whose body breaks out of an inner loop, or
// out of a switch case, cannot leave the range early: it receives every
// result and waits for all. It is reported: escape.go exitsEarly counts
// any break in the range body, also one that leaves a nested loop, switch
// or select, and awaited marks the range partial.
func TestAdversary65aEscapeRangeInnerBreak(t *testing.T) {
	t.Parallel()
	runShared(t, "adversary65aescinnerbreak")
}

// No finding (false positive), README escape row: "a channel the
// goroutine closes or sends on, also one handed to its func literal as an
// argument or a field of the receiver of the package's method it runs,
// received before return". go d.run(ctx) where d is a named channel type
// and run does defer close(d), then <-d; go w.run(ctx) where run does
// defer w.finish() and finish does close(w.done), then <-w.done. Both
// goroutines close the channel received before return; both are reported.
// Likely cause: escape.go signals maps only the parameters (ftype.Params),
// not the method's receiver (fd.Recv), to the go statement's operands,
// and reads the body of the function the goroutine runs but not of the
// package's functions and methods that body calls.
func TestAdversary65aEscapeMethodSignalNotSeen(t *testing.T) {
	t.Parallel()
	runShared(t, "adversary65aescsignal")
}

// Held (a finding each): a func literal's WaitGroup or channel parameter
// is its argument by position, not by name: given &wg2 while wg1 is
// waited for, or go func(b, a chan error){ b <- … }(a, b) while b is
// received from, the goroutine is not waited for.
func TestAdversary65aEscapeParameterMappedByPosition(t *testing.T) {
	t.Parallel()
	runShared(t, "adversary65aheld")
}
