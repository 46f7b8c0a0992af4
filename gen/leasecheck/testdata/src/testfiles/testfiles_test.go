package testfiles

import "context"

/* want `//lease:lock in a test file: leasegen generates wrappers from non-test files only` */ //lease:lock fixtures:{name} deadline=5s
func load(ctx context.Context, name string) error {
	return nil
}
