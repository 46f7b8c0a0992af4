package leaseotel_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/leasegen/leasegen/internal/leaseobs"
	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// Calls through a forced Sentinel failover: every call's span ends, once,
// with lease.outcome the class of the error Do returned, and lease.calls
// counts the same outcomes; lease.active and lease.waiting are back to 0.
func TestAdversary31c_FailoverSpansMatchDo(t *testing.T) {
	sn := leasetest.StartSentinel(t)
	h := newHarness(t, sn.FailoverClient(t))
	var (
		mu      sync.Mutex
		outcome = map[trace.SpanID]string{} // the class of what Do returned, by the call's span
		classes = map[string]int64{}
		stop    atomic.Bool
		wg      sync.WaitGroup
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				var id trace.SpanID
				spec := lease.Spec{Name: "fo", TTL: 900 * time.Millisecond, Deadline: 1500 * time.Millisecond, Wait: 300 * time.Millisecond}
				err := h.c.Do(context.Background(), fmt.Sprintf("fo:%d", i%3), spec, func(ctx context.Context) error {
					id = trace.SpanContextFromContext(ctx).SpanID()
					time.Sleep(time.Duration(10+w*7) * time.Millisecond)
					return nil
				})
				class := leaseobs.Classify(err).String()
				mu.Lock()
				classes[class]++
				if id.IsValid() {
					outcome[id] = class
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := sn.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	h.c.Close()

	var calls int64
	for _, n := range classes {
		calls += n
	}
	ended := map[trace.SpanID]int{}
	spanClasses := map[string]int64{}
	for _, s := range h.spans.Ended() {
		if s.Name() != "lease fo" {
			continue
		}
		ended[s.SpanContext().SpanID()]++
		got := attrs(s)["lease.outcome"].AsString()
		spanClasses[got]++
		if want, ok := outcome[s.SpanContext().SpanID()]; ok && got != want {
			t.Errorf("span %v: lease.outcome %q, Do returned %s", s.SpanContext().SpanID(), got, want)
		}
	}
	if int64(len(ended)) != calls || len(h.spans.Started()) < len(ended) {
		t.Errorf("%d calls, %d call spans ended (%d spans started)", calls, len(ended), len(h.spans.Started()))
	}
	for id, n := range ended {
		if n != 1 {
			t.Errorf("span %v ended %d times", id, n)
		}
	}
	for class, n := range classes {
		if spanClasses[class] != n {
			t.Errorf("Do returned %d %s, spans say %d (Do %v, spans %v)", n, class, spanClasses[class], classes, spanClasses)
		}
		h.wantValue("lease.calls", n, "lease.name=fo", "lease.outcome="+class)
	}
	h.wantValue("lease.active", 0, "lease.name=fo")
	h.wantValue("lease.waiting", 0, "lease.name=fo")
	t.Logf("outcomes %v", classes)
}
