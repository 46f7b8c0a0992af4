package leaseotel_test

// Adversarial tests, round 20 (observability): the OpenTelemetry adapter
// against real redis-server processes and fault proxies.
// Run: go test ./runtime/leaseotel -run Adversary20 -race -count=1 -v

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leaseotel"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// adv20Ends counts OnStart and OnEnd per span, to find spans ended twice
// or never.
type adv20Ends struct {
	mu      sync.Mutex
	started map[trace.SpanID]string
	ended   map[trace.SpanID]int
}

func newAdv20Ends() *adv20Ends {
	return &adv20Ends{started: map[trace.SpanID]string{}, ended: map[trace.SpanID]int{}}
}

func (a *adv20Ends) OnStart(_ context.Context, s sdktrace.ReadWriteSpan) {
	a.mu.Lock()
	a.started[s.SpanContext().SpanID()] = s.Name()
	a.mu.Unlock()
}
func (a *adv20Ends) OnEnd(s sdktrace.ReadOnlySpan) {
	a.mu.Lock()
	a.ended[s.SpanContext().SpanID()]++
	a.mu.Unlock()
}
func (a *adv20Ends) Shutdown(context.Context) error   { return nil }
func (a *adv20Ends) ForceFlush(context.Context) error { return nil }

// check reports spans never ended or ended more than once.
func (a *adv20Ends) check(t *testing.T) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, name := range a.started {
		if n := a.ended[id]; n != 1 {
			t.Errorf("span %q %v ended %d times, want 1", name, id, n)
		}
	}
	for id := range a.ended {
		if _, ok := a.started[id]; !ok {
			t.Errorf("span %v ended, never started", id)
		}
	}
}

func (a *adv20Ends) count() (started, ended int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id := range a.started {
		if a.ended[id] > 0 {
			ended++
		}
	}
	return len(a.started), ended
}

// A slow Observer ahead of leaseotel stalls the call between EventAcquired
// and fn's entry: the entry check reports EventLowValidity and Do returns
// ErrLowValidity without calling fn.
//
// Found by round 20, fixed: the span says lease.outcome=granted (with error.type the Go type
// of the error, "*fmt.wrapError") and lease.calls counts a granted call;
// the README says low_validity is the outcome of a call "granted too late
// to enter (ErrLowValidity)", and leaseotel's doc "'granted' means the
// function ran under a lease that held to the end".
func TestAdversary20LowValidityAfterAcquiredSpanGranted(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer tp.Shutdown(context.Background())
	defer mp.Shutdown(context.Background())
	obs, err := leaseotel.New(leaseotel.WithTracerProvider(tp), leaseotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	slow := lease.ObserverFunc(func(e lease.Event) {
		if e.Kind == lease.EventAcquired {
			time.Sleep(300 * time.Millisecond)
		}
	})
	c, err := lease.New(srv.Client(t), lease.WithObserver(lease.Observers{slow, obs}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := &harness{t: t, spans: spans, tp: tp, reader: reader, c: c}
	key := fmt.Sprintf("adv20-lowval-%d", time.Now().UnixNano())
	s := lease.Spec{Name: "lowval", TTL: 500 * time.Millisecond, Deadline: 5 * time.Second, MinValidity: 300 * time.Millisecond}
	err = c.Do(context.Background(), key, s, func(context.Context) error { t.Error("entered"); return nil })
	if !errors.Is(err, lease.ErrLowValidity) {
		t.Fatalf("setup: Do = %v, want ErrLowValidity", err)
	}
	call := h.call("lowval")
	wantAttrs(t, call, "lease.outcome=low_validity", "error.type=low_validity")
	wantStatus(t, call, codes.Error)
	h.wantValue("lease.calls", 1, "lease.name=lowval", "lease.outcome=low_validity")
	h.wantValue("lease.calls", 0, "lease.name=lowval", "lease.outcome=granted")
}

// Two leaseotel Observers (say, two TracerProviders) combined with
// lease.Observers, as the README allows ("Combine several with
// lease.Observers{a, b}").
//
// Found by round 20, fixed: both keep the call under the same context key type
// (leaseotel.callKey{}); the second StartCall shadows the first, the first
// Observer then drops the call's events as "another observer's call"
// (leaseotel.go:258) and never ends the span it started: the first
// provider never exports the call's span, and counts no lease.calls.
func TestAdversary20TwoOtelObserversSpanNeverEnds(t *testing.T) {
	ends1, ends2 := newAdv20Ends(), newAdv20Ends()
	tp1 := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(ends1))
	tp2 := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(ends2))
	defer tp1.Shutdown(context.Background())
	defer tp2.Shutdown(context.Background())
	o1, err := leaseotel.New(leaseotel.WithTracerProvider(tp1))
	if err != nil {
		t.Fatal(err)
	}
	o2, err := leaseotel.New(leaseotel.WithTracerProvider(tp2))
	if err != nil {
		t.Fatal(err)
	}
	c, err := lease.New(srv.Client(t), lease.WithObserver(lease.Observers{o1, o2}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := fmt.Sprintf("adv20-two-%d", time.Now().UnixNano())
	if err := c.Do(context.Background(), key, lease.Spec{Name: "two", TTL: time.Second, Deadline: 2 * time.Second}, nop); err != nil {
		t.Fatal(err)
	}
	t.Log("provider 2:")
	ends2.check(t)
	t.Log("provider 1:")
	ends1.check(t)
}

// Spans under concurrency and faults: every span started is ended exactly
// once, every call span is a child of the caller's span, failures carry
// status Error, and after Close no goroutine of the runtime is left and no
// span is started by background work (kept-lease releases, renewals).
func TestAdversary20SpansEndedOnceParentedUnderFaults(t *testing.T) {
	ends := newAdv20Ends()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(ends), sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	obs, err := leaseotel.New(leaseotel.WithTracerProvider(tp), leaseotel.WithPhaseSpans())
	if err != nil {
		t.Fatal(err)
	}
	p := leasetest.StartProxy(t, srv.Addr())
	c, err := lease.New(srv.Client(t, func(o *redis.Options) { o.Addr = p.Addr() }), lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	direct := srv.Client(t)
	uniq := fmt.Sprint(time.Now().UnixNano())
	tracer := tp.Tracer("caller")

	var wg sync.WaitGroup
	type res struct {
		parent trace.SpanID
		err    error
		kind   int
	}
	results := make(chan res, 200)
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, root := tracer.Start(context.Background(), "caller")
			defer root.End()
			key := fmt.Sprintf("adv20-sp-%s-%d", uniq, i%12) // contention
			s := lease.Spec{Name: fmt.Sprintf("n%d", i%4), TTL: 400 * time.Millisecond, Deadline: 2 * time.Second, Wait: time.Duration(i%3) * 200 * time.Millisecond}
			if i%5 == 0 {
				s.Keep = 2 * time.Second
			}
			if i%7 == 0 {
				s.Busy = lease.BusySkip
			}
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						err = fmt.Errorf("panicked: %v", r)
					}
				}()
				err = c.Do(ctx, key, s, func(ctx context.Context) error {
					_, child := tracer.Start(ctx, "work")
					defer child.End()
					switch i % 6 {
					case 1:
						panic("fn panics")
					case 2:
						return errors.New("fn failed")
					case 3:
						_ = direct.Del(ctx, "lease:{"+key+"}:l").Err()
						select {
						case <-ctx.Done():
						case <-time.After(time.Second):
						}
					case 4: // nested on the same key and another
						_ = c.Do(ctx, key, lease.Spec{Name: "nested", TTL: time.Second, Deadline: time.Second}, nop)
						_ = c.Do(ctx, key+"-in", lease.Spec{Name: "nested", TTL: time.Second, Deadline: time.Second}, nop)
					default:
						time.Sleep(20 * time.Millisecond)
					}
					return nil
				})
			}()
			results <- res{root.SpanContext().SpanID(), err, i % 6}
		}()
		if i == 30 {
			p.SetDelay(150 * time.Millisecond) // renewals and acquires slow down mid-run
		}
	}
	wg.Wait()
	p.Set(leasetest.Pass)
	close(results)
	for r := range results {
		_ = r
	}
	// Lead: two terms, cut by a loss then by ctx.
	lroot, lspan := tracer.Start(context.Background(), "caller")
	lctx, lcancel := context.WithCancel(lroot)
	terms := 0
	lerr := c.Lead(lctx, "adv20-sp-lead-"+uniq, lease.LeadSpec{Name: "lead", TTL: 400 * time.Millisecond, Backoff: 10 * time.Millisecond}, func(ctx context.Context) error {
		terms++
		if terms == 1 {
			_ = direct.Del(ctx, "lease:{adv20-sp-lead-"+uniq+"}:l").Err()
		} else {
			lcancel()
		}
		<-ctx.Done()
		return nil
	})
	if lerr != nil {
		t.Errorf("Lead: %v", lerr)
	}
	lspan.End()
	c.Close()
	time.Sleep(300 * time.Millisecond)
	s0, e0 := ends.count()
	time.Sleep(500 * time.Millisecond)
	s1, e1 := ends.count()
	if s1 != s0 || e1 != e0 {
		t.Errorf("spans started/ended after Close: %d/%d then %d/%d", s0, e0, s1, e1)
	}
	ends.check(t)

	// parenting and status
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byID[s.SpanContext().SpanID()] = s
	}
	calls := 0
	for _, s := range rec.Ended() {
		if !strings.HasPrefix(s.Name(), "lease ") {
			continue
		}
		calls++
		parent, ok := byID[s.Parent().SpanID()]
		if !ok || (parent.Name() != "caller" && parent.Name() != "work") {
			t.Errorf("call span %q has parent %v (%v)", s.Name(), s.Parent().SpanID(), ok)
		}
		out := attrs(s)["lease.outcome"].AsString()
		if out != "granted" && out != "skipped" && s.Status().Code != codes.Error {
			t.Errorf("call span %q outcome %s with status %v", s.Name(), out, s.Status().Code)
		}
		if out == "" {
			t.Errorf("call span %q without outcome", s.Name())
		}
	}
	if calls < 60 {
		t.Errorf("%d call spans, want at least 60", calls)
	}
}
