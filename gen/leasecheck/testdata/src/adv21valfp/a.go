// Package adv21valfp: found by round 21 (contrived false positives of the
// value check): mentions of a protected function that call nothing: a
// comparison with nil, a hand-written compile-time tie to its signature,
// taking its name for a log line. The two that are not comparisons are
// still reported (documented in the README: answer them with
// //lease:ignore bypass and the reason).
package adv21valfp

import (
	"context"
	"reflect"
	"runtime"

	"github.com/leasegen/leasegen/runtime/lease"
)

var lc *lease.Client

//lease:lock f:{id} deadline=5s client=lc
func free(ctx context.Context, id string) error { return nil }

type S struct{ c *lease.Client }

//lease:lock k:{id} deadline=5s
func (s *S) charge(ctx context.Context, id string) error { return nil }

var _ func(*S, context.Context, string) error = (*S).charge // want `charge used as a value`

func names(s *S) string {
	if free == nil {
		return ""
	}
	return runtime.FuncForPC(reflect.ValueOf(s.charge).Pointer()).Name() // want `charge used as a value`
}
