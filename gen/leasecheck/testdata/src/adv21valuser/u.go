// Package adv21valuser uses adv21values's exported protected method and
// adv21valgen's function as values from another package.
package adv21valuser

import (
	"context"

	"adv21values"
)

func use(ctx context.Context, s *adv21values.S) {
	f := s.Exp // want `Exp used as a value bypasses its lease`
	_ = f
	m := (*adv21values.S).Exp // want `Exp used as a value bypasses its lease`
	_ = m
	_ = s.ExpLocked
}
