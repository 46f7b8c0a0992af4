// Package adv31bimporttestdecl: found by round 31b. Its internal test file
// declares lease and time at package level, so leasegen imports those
// packages under other names (lease1, time1): go test compiles the test
// file with lease_gen.go. The analyzer renders the same file in the
// package and in its test variant, so neither finds it stale.
package adv31bimporttestdecl

import "context"

//lease:lock a:{id} deadline=5s
func work(ctx context.Context, id string) error { return nil }
