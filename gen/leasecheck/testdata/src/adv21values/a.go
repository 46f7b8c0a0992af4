// Package adv21values: protected functions used as values (round 21).
// Every value use that can later run the function unprotected is a
// bypass; calls (also deferred, go) are reported once; the function's
// own body and the generated file are left alone.
package adv21values

import (
	"context"

	"github.com/leasegen/leasegen/runtime/lease"
)

type S struct{ c *lease.Client }

var lc *lease.Client

//lease:lock k:{id} deadline=5s
func (s *S) charge(ctx context.Context, id string) error {
	// Self-reference as a value: recursion under the same lease.
	self := s.charge
	_ = self
	again := func() error { return s.charge(ctx, id+"x") }
	_ = again
	return nil
}

//lease:lock f:{id} deadline=5s client=lc
func free(ctx context.Context, id string) error { return nil }

//lease:lock g:{id} deadline=5s client=lc
func gen[V any](ctx context.Context, id string, v V) error { return nil }

//lease:lock Exp:{id} deadline=5s name=ExpLocked
func (s *S) Exp(ctx context.Context, id string) error { return nil } // want Exp:"protected by ExpLocked"

//lease:leader jobs:x
func (s *S) lead(ctx context.Context) error { return nil }

type holder struct {
	fn func(context.Context, string) error
}

type T struct{ *S }

type handlerFunc func(context.Context, string) error

func deferred(ctx context.Context, s *S) {
	defer s.charge(ctx, "a")  // want `call to charge bypasses its lease: call Charge instead`
	go s.charge(ctx, "b")     // want `call to charge bypasses its lease: call Charge instead`
	defer free(ctx, "c")      // want `call to free bypasses its lease: call Free instead`
	(s.charge)(ctx, "d")      // want `call to charge bypasses its lease: call Charge instead`
	(*S).charge(s, ctx, "e")  // want `call to charge bypasses its lease: call Charge instead`
	_ = gen[int](ctx, "f", 1) // want `call to gen bypasses its lease: call Gen instead`
}

func values(ctx context.Context, s *S, t T) {
	f := s.charge // want `charge used as a value bypasses its lease`
	_ = f
	m := (*S).charge // want `charge used as a value bypasses its lease`
	_ = m
	h := holder{fn: s.charge} // want `charge used as a value bypasses its lease`
	_ = h
	h2 := holder{fn: free} // want `free used as a value bypasses its lease`
	_ = h2
	g := gen[int] // want `gen used as a value bypasses its lease`
	_ = g
	g2 := (gen[string]) // want `gen used as a value bypasses its lease`
	_ = g2
	p := t.charge // want `charge used as a value bypasses its lease`
	_ = p
	hf := handlerFunc(s.charge) // want `charge used as a value bypasses its lease`
	_ = hf
	e := s.Exp // want `Exp used as a value bypasses its lease`
	_ = e
	l := s.lead // want `lead used as a value bypasses its lease`
	_ = l
	// The wrappers as values are fine.
	_ = holder{fn: s.Charge}
	_ = holder{fn: Free}
	_ = Gen[int]
	_ = s.ExpLocked
}
