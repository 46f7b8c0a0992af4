package leasecheck_test

import (
	"testing"
)

// Adversary round 64c (was a false positive), README fence row: "`TokenFrom`/
// `fence.From` in a function no fenced lease reaches (it always finds no
// token)". A method reading the token that a fenced lease calls through
// an interface that is not a package-level type (a struct field's inline
// interface{ put(ctx) error }, a generic constraint
// [W interface{ stamp(ctx) error }]) is not reported. It was:
// checkUnreachedTokens took as interface methods only those of the
// package scope's named interfaces; it now takes every interface type
// expression of the package.
func TestAdversary64cFenceInlineInterfaceUnreached(t *testing.T) {
	t.Parallel()
	runShared(t, "adversary64cfence")
}
