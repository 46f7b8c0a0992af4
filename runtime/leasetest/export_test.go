package leasetest

import "time"

// SetStartTimeout sets how long a started server has to answer, for tests
// of servers that never do; the returned func restores it.
func SetStartTimeout(d time.Duration) (restore func()) {
	old := startTimeout
	startTimeout = d
	return func() { startTimeout = old }
}
