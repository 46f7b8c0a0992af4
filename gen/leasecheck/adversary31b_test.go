package leasecheck_test

import "testing"

// Adversary round 31b. The testdata packages adv31b* were generated with
// leasegen in GOPATH mode over testdata (cd testdata/src/adv31bx &&
// GO111MODULE=off GOPATH=<abs>/testdata leasegen .), as the existing ones.

// Found by round 31b (false negative): a deferred wait counted for every
// return, also the returns before the defer statement runs; a goroutine
// started before an early return outlived the lease unreported. Deferred
// waits registered on every path (before the go statement, or on the
// path, a deferred func literal too) are still no finding.
func TestAdversary31bEscapeEarlyReturnBeforeDefer(t *testing.T) {
	runShared(t, "adv31bescdefer")
}

// Found by round 31b (false positive): a fenced function that reads its
// token through the Lease (lease.FromContext(ctx), then l.Token(), in its
// body or a helper) was told it never reads one.
func TestAdversary31bFenceReadThroughLease(t *testing.T) {
	runShared(t, "adv31bfencelease")
}

// Found by round 31b (false negative): a fan-in loop that continues before
// its receive on some iterations was taken to receive once per goroutine.
func TestAdversary31bEscapeFanInContinue(t *testing.T) {
	runShared(t, "adv31bescfanincontinue")
}

// Found by round 31b: an internal test file declaring lease or time at
// package level makes leasegen import those packages under other names;
// the analyzer rendered them so only in the test variant (whose scope has
// the test's names), and found lease_gen.go stale in the package itself.
func TestAdversary31bImportNamesOfTestDecls(t *testing.T) {
	runShared(t, "adv31bimporttestdecl")
}

// Found by round 31b (false negative): TokenFrom on a context derived from
// the ctx of a lease without fence was not reported (only ctx itself was).
func TestAdversary31bFenceDerivedContext(t *testing.T) {
	runShared(t, "adv31bfencederived")
}

// Round 33 (false negative, noted by round 31b and left then): a function
// given to time.AfterFunc that uses the lease's context runs after the
// protected function returned, unreported.
func TestAdversary33EscapeAfterFunc(t *testing.T) {
	runShared(t, "adv33afterfunc")
}
