// Package genlinextest runs leasegen from a //go:generate line in its
// external test package's file, which go generate runs too.
package genlinextest

import "context"

type Jobs struct{}

//lease:lock jobs:{id} deadline=5s
func (j *Jobs) run(ctx context.Context, id string) error { return nil } // want `no generated wrappers for this package's //lease: directives: run go generate$`
