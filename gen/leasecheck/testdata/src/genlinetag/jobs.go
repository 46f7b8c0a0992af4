// Package genlinetag runs leasegen from a //go:generate line in a file
// built only with the "generate" tag, which go generate sets.
package genlinetag

import "context"

type Jobs struct{}

//lease:lock jobs:{id} deadline=5s
func (j *Jobs) run(ctx context.Context, id string) error { return nil } // want `no generated wrappers for this package's //lease: directives: run go generate$`
