// Package genline has a directive and a //go:generate line but no generated
// file yet: running go generate is all it takes.
package genline

//go:generate go tool leasegen

import "context"

type Jobs struct{}

//lease:lock jobs:{id} deadline=5s
func (j *Jobs) run(ctx context.Context, id string) error { return nil } // want `no generated wrappers for this package's //lease: directives: run go generate$`
