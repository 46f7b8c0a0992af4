// Package adv19genuser calls adv19generic's protected generic function
// from another package, with and without explicit instantiation. Found by round 19, fixed
// (false negative): adv19generic.Put[int](...) is not flagged, and use is
// taken to read the fencing token.
package adv19genuser

import (
	"context"

	"adv19generic"
)

func use(ctx context.Context) {
	_ = adv19generic.Put(ctx, "a", 1)      // want `call to Put bypasses its lease: call PutLocked instead`
	_ = adv19generic.Put[int](ctx, "a", 1) // want `call to Put bypasses its lease: call PutLocked instead`
	_ = adv19generic.PutLocked(ctx, "a", 1)
}
