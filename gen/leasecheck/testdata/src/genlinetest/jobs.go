// Package genlinetest runs leasegen from a //go:generate line in a _test.go
// file, which go generate runs too (it reads the test files).
package genlinetest

import "context"

type Jobs struct{}

//lease:lock jobs:{id} deadline=5s
func (j *Jobs) run(ctx context.Context, id string) error { return nil } // want `no generated wrappers for this package's //lease: directives: run go generate$`
