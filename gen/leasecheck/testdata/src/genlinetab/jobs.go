// Package genlinetab runs leasegen from a //go:generate line whose command
// follows a tab, which go generate accepts as it does a space.
package genlinetab

//go:generate	go tool leasegen

import "context"

type Jobs struct{}

//lease:lock jobs:{id} deadline=5s
func (j *Jobs) run(ctx context.Context, id string) error { return nil } // want `no generated wrappers for this package's //lease: directives: run go generate$`
