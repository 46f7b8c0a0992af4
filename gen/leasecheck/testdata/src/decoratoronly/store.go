// Package decoratoronly has only an interface decorator and no generated
// file yet: the stale check says so (it used to panic).
package decoratoronly // want `no generated wrappers for this package's //lease: directives: run go generate`

import "context"

type Store interface {
	//lease:lock items:{id} deadline=5s
	Save(ctx context.Context, id string) error
}
