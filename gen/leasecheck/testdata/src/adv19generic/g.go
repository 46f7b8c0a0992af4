// Package adv19generic: generic protected functions. Found by round 19, fixed (false
// negative): explicit instantiation with several type arguments
// (pair[int, string]) is not recognised as a call of pair: no bypass, and
// local is taken to read the fencing token (callee unknown, ctx passed).
package adv19generic

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

var lc *lease.Client

//lease:lock g:{id} deadline=5s client=lc name=PutLocked
func Put[T any](ctx context.Context, id string, v T) error { return nil } // want Put:"protected by PutLocked"

//lease:lock h:{id} deadline=5s client=lc
func pair[K comparable, V any](ctx context.Context, id string, k K, v V) error { return nil }

func local(ctx context.Context) {
	_ = pair(ctx, "a", 1, "x")              // want `call to pair bypasses its lease: call Pair instead`
	_ = pair[int, string](ctx, "a", 1, "x") // want `call to pair bypasses its lease: call Pair instead`
	_ = Put[int](ctx, "a", 1)               // want `call to Put bypasses its lease: call PutLocked instead`
	_ = Pair[int](ctx, "a", 1, "x")
}
