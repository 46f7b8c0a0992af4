//go:build race

package lease_test

// raceEnabled: the race detector slows the process several times and
// stops every goroutine now and then (a second has been seen on two
// cores), so load tests scale down under it.
const raceEnabled = true
