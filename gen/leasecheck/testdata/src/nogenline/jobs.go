// Package nogenline has a directive, no generated file and no //go:generate
// line: "run go generate" alone would do nothing, so the message says what
// to add.
package nogenline

import "context"

type Jobs struct{}

//lease:lock jobs:{id} deadline=5s
func (j *Jobs) run(ctx context.Context, id string) error { return nil } // want `no generated wrappers for this package's //lease: directives: run go generate \(no //go:generate line in this package runs leasegen: add //go:generate go tool leasegen to one of its files\)`
