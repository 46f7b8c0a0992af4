package leasecheck_test

import "testing"

// Adversary round 64c: the escape check. The testdata packages
// adversary64c* were generated with leasegen in GOPATH mode over testdata
// (cd testdata/src/adversary64cx && GO111MODULE=off GOPATH=<abs>/testdata
// leasegen .), as the existing ones, and are checked in the shared run
// (testdataPackages, shared_test.go).
//
// README (escape): "`go f(ctx)` … inside a protected function … that some
// path leaves without waiting for it (a `sync.WaitGroup`, errgroup, or a
// channel the goroutine closes or sends on, received before return …)".

// No finding: a goroutine's func literal that is given its WaitGroup
// (go func(wg *sync.WaitGroup){ defer wg.Done() … }(&wg)) or its channel
// (go func(out chan<- error){ out <- … }(errc)) as an argument, waited for
// before return. It was reported: signals took the literal's
// Done/send/close on its parameter objects, which never match the
// caller's wg/errc; it now maps each parameter to its argument.
func TestAdversary64cEscapeSignalHandedAsArgument(t *testing.T) {
	t.Parallel()
	runShared(t, "adversary64cescarg")
}

// No finding: a goroutine started in a closure and waited for inside the
// same closure (a fan-out with wg.Wait() inside an errgroup task, a call
// helper that returns <-errc). It was reported: awaited looked for the
// wait in the outer function only; checkEscape now follows the paths of
// the innermost closure around the go statement first.
func TestAdversary64cEscapeWaitInsideClosure(t *testing.T) {
	t.Parallel()
	runShared(t, "adversary64cescclosure")
}

// No finding: go w.run(ctx), where run does defer close(w.done), then
// <-w.done before return: "a channel the goroutine closes … received
// before return". It was reported: signals took only the channels and
// WaitGroups among a named function's arguments; it now reads the body of
// the package's function or method the goroutine runs.
func TestAdversary64cEscapeMethodClosesReceiverChannel(t *testing.T) {
	t.Parallel()
	runShared(t, "adversary64cescmethod")
}

// No finding: go s.audit(reqID(ctx), id) and
// go func(rid string){…}(reqID(ctx)): a go statement's arguments are
// evaluated by the protected function before the goroutine starts, and
// the goroutine gets a string. They were reported: the whole call was
// searched for ctx; goUses now skips arguments of basic types.
func TestAdversary64cEscapeArgumentComputedFromContext(t *testing.T) {
	t.Parallel()
	runShared(t, "adversary64cescargval")
}

// Finding: README limits: "A receive loop that can return or break early
// … do not count as waiting for all the goroutines." A
// for r := range results { if r.err == nil { return r.v, nil } } (or
// break) after a spawning loop waits for one goroutine: the others still
// sending (or blocked on the unbuffered send) outlive the lease. It was
// missed: waitsOn took the range statement's X for a full wait; awaited
// now marks ranges whose body can leave early as partial.
func TestAdversary64cEscapeRangeLoopEarlyExit(t *testing.T) {
	t.Parallel()
	runShared(t, "adversary64cescrange")
}

// Held (no finding): a waiter goroutine closing the results channel that
// is ranged over, a select loop whose every case receives, an AfterFunc
// stopped and waited for when Stop says it started, a top-level deferred
// Wait before a loop that returns early, //lease:ignore fence between the
// lock directive and func.
func TestAdversary64cHeld(t *testing.T) {
	t.Parallel()
	runShared(t, "adversary64cheld")
}
