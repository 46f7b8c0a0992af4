package leasecheck_test

import "testing"

// Adversary round 19. The testdata packages adv19* were generated with
// leasegen in GOPATH mode over testdata (cd testdata/src/adv19x &&
// GO111MODULE=off GOPATH=<abs>/testdata leasegen .), as the existing ones.
// Each package's doc comment says what it shows.

// Held: dot/renamed imports of the runtime, func values under fence,
// promoted methods, method expressions, defer and go of raw calls.
func TestAdversary19Held(t *testing.T) {
	runShared(t, "adv19held")
}

// Found by round 19, fixed: fence false positive when ctx is typed by an alias of
// context.Context (leasecheck.go isContext does not Unalias).
func TestAdversary19AliasContextFence(t *testing.T) {
	runShared(t, "adv19aliasctx")
}

// Found by round 19, fixed: escape false negative: goroutine given a context derived from
// the lease's (context.WithTimeout(ctx, ...)) is not looked at.
func TestAdversary19EscapeDerivedContext(t *testing.T) {
	runShared(t, "adv19derived")
}

// Found by round 19, fixed: escape false positive: for { select { case err := <-errc:
// return err; case <-ticker.C: } } waits before its only return.
func TestAdversary19EscapeSelectCaseReturn(t *testing.T) {
	runShared(t, "adv19heartbeat")
}

// Found by round 19, fixed: escape false positive: a go statement inside a func literal of
// the protected function is treated as unreachable, hence never awaited.
func TestAdversary19EscapeGoInClosure(t *testing.T) {
	runShared(t, "adv19closure")
}

// Found by round 19, fixed: escape false positive for the fan-in idiom (one receive per
// goroutine in a second loop).
func TestAdversary19EscapeFanIn(t *testing.T) {
	runShared(t, "adv19fanin")
}

// Found by round 19, fixed: order false positive: a call to another package's unrelated
// function named like a local wrapper (adv19ordother.Credit) counts as
// taking that wrapper's lease (checkOrder keys free functions by bare name).
func TestAdversary19OrderForeignSameName(t *testing.T) {
	runShared(t, "adv19ordname")
}

// Found by round 19, fixed: a real inversion between methods, one declared on an alias of
// the receiver type (wrapperKey does not Unalias the receiver).
func TestAdversary19OrderAliasReceiver(t *testing.T) {
	runShared(t, "adv19ordalias")
}

// Generic protected functions: implicit and explicit instantiation, with
// one and several type arguments, in the package and from another one.
func TestAdversary19GenericBypass(t *testing.T) {
	runShared(t, "adv19generic", "adv19genuser")
}

// found by round 19, fixed (false negative): the raw method handed out as a method value.
func TestAdversary19MethodValueBypass(t *testing.T) {
	runShared(t, "adv19methodvalue")
}
