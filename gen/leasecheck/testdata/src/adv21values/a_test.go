package adv21values

import (
	"context"
	"testing"
)

func TestValueInTest(t *testing.T) { // want TestValueInTest:"reads fencing token"
	s := &S{}
	f := s.charge // want `charge used as a value bypasses its lease`
	_ = f(context.Background(), "x")
}
