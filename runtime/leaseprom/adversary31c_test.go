package leaseprom_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leaseprom"
)

// Spec.Name is any string (a caller of Do may build it from a job's
// configured name); client_golang panics on a label value that is not
// UTF-8. An observer must not crash the call it observes: the call runs
// as without the observer, and its series are counted under the name made
// valid (invalid bytes as U+FFFD). Before, StartCall panicked inside Do.
func TestAdversary31c_NonUTF8NameDoesNotPanic(t *testing.T) {
	reg := prometheus.NewRegistry()
	obs, err := leaseprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := lease.New(srv.Client(t), lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ran := false
	var doErr error
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("Do with Spec.Name %q panicked: %v", "job-\xff", p)
			}
		}()
		doErr = c.Do(context.Background(), "a31c:utf8", lease.Spec{Name: "job-\xff", TTL: time.Second, Deadline: 2 * time.Second},
			func(context.Context) error { ran = true; return nil })
	}()
	if doErr != nil || !ran {
		t.Fatalf("Do = %v, fn ran %v", doErr, ran)
	}
	gathered, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	fams := map[string]*dto.MetricFamily{}
	for _, f := range gathered {
		fams[f.GetName()] = f
	}
	wantCounter(t, fams, "lease_calls_total", 1, "lease_name=job-\uFFFD", "lease_outcome=granted")
}
