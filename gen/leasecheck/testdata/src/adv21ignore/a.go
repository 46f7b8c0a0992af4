// Package adv21ignore: a used //lease:ignore in a non-test file is not
// reported by the package nor its test variant; an unused one in the test
// file is reported by the test variant. (An unused one in a.go would be
// expected by analysistest in both variants, which the design does not
// do; cmd/leasecheck -test reports it once, checked by hand in round 21.)
package adv21ignore

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

var lc *lease.Client

//lease:lock f:{id} deadline=5s client=lc
func free(ctx context.Context, id string) error { return nil }

func used(ctx context.Context) error {
	//lease:ignore bypass the migration runs before any other node starts
	return free(ctx, "x")
}
