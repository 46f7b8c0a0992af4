package leasetest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The helpers' clients and watchers must be gone when their tests end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
