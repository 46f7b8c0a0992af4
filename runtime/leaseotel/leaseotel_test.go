package leaseotel_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leaseotel"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

var srv *leasetest.Server

func TestMain(m *testing.M) { os.Exit(leasetest.RunTests(m, &srv)) }

// harness is a lease Client reporting to an OTel SDK whose spans and
// metrics stay in memory.
type harness struct {
	t      *testing.T
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	c      *lease.Client
	direct *redis.Client // to the server, bypassing any proxy
}

func newHarness(t *testing.T, rdb *redis.Client, opts ...leaseotel.Option) *harness {
	t.Helper()
	h := &harness{t: t, spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(), direct: srv.Client(t)}
	h.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	t.Cleanup(func() {
		_ = h.tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	obs, err := leaseotel.New(append([]leaseotel.Option{leaseotel.WithTracerProvider(h.tp), leaseotel.WithMeterProvider(mp), leaseotel.WithPhaseSpans()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if rdb == nil {
		rdb = srv.Client(t)
	}
	h.c, err = lease.New(rdb, lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.c.Close() })
	return h
}

func (h *harness) collect() metricdata.ResourceMetrics {
	h.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		h.t.Fatal(err)
	}
	return rm
}

func find(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// labels builds an attribute set from "key=value" pairs.
func labels(kv ...string) attribute.Set {
	var attrs []attribute.KeyValue
	for _, p := range kv {
		k, v, _ := strings.Cut(p, "=")
		attrs = append(attrs, attribute.String(k, v))
	}
	return attribute.NewSet(attrs...)
}

// value is the value of an Int64 sum's series; ok is false when it does
// not exist.
func (h *harness) value(name string, kv ...string) (int64, bool) {
	h.t.Helper()
	m, ok := find(h.collect(), name)
	if !ok {
		return 0, false
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		h.t.Fatalf("%s is a %T, want an int64 sum", name, m.Data)
	}
	want := labels(kv...)
	for _, dp := range sum.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value, true
		}
	}
	return 0, false
}

func (h *harness) wantValue(name string, want int64, kv ...string) {
	h.t.Helper()
	got, ok := h.value(name, kv...)
	if !ok || got != want {
		h.t.Errorf("%s%v = %d (exists: %v), want %d", name, kv, got, ok, want)
	}
}

// histogram returns the count and sum of a histogram's series.
func (h *harness) histogram(name string, kv ...string) (uint64, float64) {
	h.t.Helper()
	m, ok := find(h.collect(), name)
	if !ok {
		return 0, 0
	}
	hist, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		h.t.Fatalf("%s is a %T, want a float64 histogram", name, m.Data)
	}
	if m.Unit != "s" {
		h.t.Errorf("%s has unit %q, want s", name, m.Unit)
	}
	want := labels(kv...)
	for _, dp := range hist.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Count, dp.Sum
		}
	}
	return 0, 0
}

func (h *harness) wantCount(name string, want uint64, kv ...string) {
	h.t.Helper()
	if got, _ := h.histogram(name, kv...); got != want {
		h.t.Errorf("%s%v count = %d, want %d", name, kv, got, want)
	}
}

// call returns the span of the protected call named name; it fails unless
// there is exactly one.
func (h *harness) call(name string) sdktrace.ReadOnlySpan {
	h.t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range h.spans.Ended() {
		if s.Name() == "lease "+name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		h.t.Fatalf("%d ended spans %q, want 1 (all: %v)", len(found), "lease "+name, spanNames(h.spans.Ended()))
	}
	return found[0]
}

// children returns the ended spans whose parent is s, by name.
func (h *harness) children(s sdktrace.ReadOnlySpan) map[string]sdktrace.ReadOnlySpan {
	kids := map[string]sdktrace.ReadOnlySpan{}
	for _, k := range h.spans.Ended() {
		if k.Parent().SpanID() == s.SpanContext().SpanID() {
			if _, dup := kids[k.Name()]; dup {
				h.t.Errorf("two children %q of %q", k.Name(), s.Name())
			}
			kids[k.Name()] = k
		}
	}
	return kids
}

func spanNames(spans []sdktrace.ReadOnlySpan) []string {
	var names []string
	for _, s := range spans {
		names = append(names, s.Name())
	}
	return names
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// wantAttrs checks string attributes of s; a value "-" means absent.
func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, kv ...string) {
	t.Helper()
	got := attrs(s)
	for _, p := range kv {
		k, v, _ := strings.Cut(p, "=")
		a, ok := got[attribute.Key(k)]
		switch {
		case v == "-" && ok:
			t.Errorf("span %q has %s=%s, want none", s.Name(), k, a.Emit())
		case v != "-" && (!ok || a.Emit() != v):
			t.Errorf("span %q: %s=%q (set: %v), want %q", s.Name(), k, a.Emit(), ok, v)
		}
	}
}

func wantStatus(t *testing.T, s sdktrace.ReadOnlySpan, code codes.Code) {
	t.Helper()
	if s.Status().Code != code {
		t.Errorf("span %q status %v (%q), want %v", s.Name(), s.Status().Code, s.Status().Description, code)
	}
}

func eventNames(s sdktrace.ReadOnlySpan) []string {
	var names []string
	for _, e := range s.Events() {
		names = append(names, e.Name)
	}
	return names
}

// within checks that child lies inside parent's time span.
func within(t *testing.T, child, parent sdktrace.ReadOnlySpan) {
	t.Helper()
	if child.StartTime().Before(parent.StartTime()) || child.EndTime().After(parent.EndTime()) {
		t.Errorf("span %q [%v, %v] is not within %q [%v, %v]", child.Name(), child.StartTime(), child.EndTime(),
			parent.Name(), parent.StartTime(), parent.EndTime())
	}
}

var nop = func(context.Context) error { return nil }

// A granted call: the call span parents the caller's work, has an acquire
// and a release child inside it, and carries name, outcome and token; the
// metrics count one granted call, one hold, one confirmed release, and the
// lease as active only while the function runs.
func TestGranted(t *testing.T) {
	h := newHarness(t, nil)
	const name = "orders.(*Server).charge"
	ctx, parent := h.tp.Tracer("test").Start(context.Background(), "request")
	var tok lease.Token
	var activeInside int64
	err := h.c.Do(ctx, "orders:1", lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Fence: true, Name: name}, func(ctx context.Context) error {
		tok, _ = lease.TokenFrom(ctx)
		_, work := h.tp.Tracer("test").Start(ctx, "work")
		time.Sleep(20 * time.Millisecond)
		work.End()
		activeInside, _ = h.value("lease.active", "lease.name="+name)
		return nil
	})
	parent.End()
	if err != nil {
		t.Fatal(err)
	}
	call := h.call(name)
	if call.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("call span's parent is %v, want the caller's span", call.Parent().SpanID())
	}
	if call.SpanKind() != trace.SpanKindInternal {
		t.Errorf("call span kind %v, want internal", call.SpanKind())
	}
	wantAttrs(t, call, "lease.name="+name, "lease.outcome=granted", "lease.key=-", "error.type=-")
	if got := attrs(call)["lease.fence.token"]; got.AsInt64() != int64(tok) || tok == 0 {
		t.Errorf("lease.fence.token = %v, want the grant's %d", got.Emit(), tok)
	}
	wantStatus(t, call, codes.Unset)
	kids := h.children(call)
	for _, n := range []string{"lease.acquire", "lease.release", "work"} {
		k, ok := kids[n]
		if !ok {
			t.Fatalf("call span has no child %q (children: %v)", n, kids)
		}
		within(t, k, call)
	}
	wantAttrs(t, kids["lease.acquire"], "lease.outcome=granted", "lease.name="+name)
	wantAttrs(t, kids["lease.release"], "lease.result=confirmed")
	if !kids["lease.acquire"].EndTime().After(kids["lease.acquire"].StartTime()) ||
		kids["lease.acquire"].EndTime().After(kids["work"].StartTime()) ||
		kids["lease.release"].StartTime().Before(kids["work"].EndTime()) {
		t.Errorf("acquire [%v, %v], work [%v, %v], release [%v, %v]: want acquire before work before release",
			kids["lease.acquire"].StartTime(), kids["lease.acquire"].EndTime(), kids["work"].StartTime(), kids["work"].EndTime(),
			kids["lease.release"].StartTime(), kids["lease.release"].EndTime())
	}

	if activeInside != 1 {
		t.Errorf("lease.active inside the function = %d, want 1", activeInside)
	}
	h.wantValue("lease.active", 0, "lease.name="+name)
	h.wantValue("lease.waiting", 0, "lease.name="+name)
	h.wantValue("lease.calls", 1, "lease.name="+name, "lease.outcome=granted")
	for _, o := range []string{"busy", "skipped", "unknown", "low_validity", "lost", "deadline", "refused", "error"} {
		h.wantValue("lease.calls", 0, "lease.name="+name, "lease.outcome="+o) // present at zero
	}
	h.wantValue("lease.releases", 1, "lease.name="+name, "lease.result=confirmed")
	h.wantValue("lease.releases", 0, "lease.name="+name, "lease.result=unconfirmed")
	h.wantValue("lease.renewals", 0, "lease.name="+name, "lease.result=not_owner")
	h.wantValue("fence.stale_writes", 0, "lease.name="+name)
	h.wantCount("lease.acquire.duration", 1, "lease.name="+name, "lease.outcome=granted")
	if n, sum := h.histogram("lease.hold.duration", "lease.name="+name, "lease.outcome=granted"); n != 1 || sum < 0.02 || sum > 1 {
		t.Errorf("lease.hold.duration: count %d sum %vs, want one hold of about 20ms", n, sum)
	}
}

// WithKey adds the concrete key and the error's text; without it neither
// appears (the busy error names the key).
func TestKeyOnlyWhenOptedIn(t *testing.T) {
	for _, withKey := range []bool{false, true} {
		var opts []leaseotel.Option
		if withKey {
			opts = append(opts, leaseotel.WithKey())
		}
		h := newHarness(t, nil, opts...)
		free := hold(t, "customers:alice")
		err := h.c.Do(context.Background(), "customers:alice", lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Name: "keyed"}, nop)
		free()
		if !errors.Is(err, lease.ErrBusy) || !strings.Contains(err.Error(), "alice") {
			t.Fatalf("got %v, want an ErrBusy naming the key", err)
		}
		call := h.call("keyed")
		if withKey {
			wantAttrs(t, call, "lease.key=customers:alice")
			if !strings.Contains(call.Status().Description, "customers:alice") {
				t.Errorf("status description %q does not give the error's text", call.Status().Description)
			}
			continue
		}
		wantAttrs(t, call, "lease.key=-")
		for _, s := range h.spans.Ended() {
			for _, kv := range s.Attributes() {
				if strings.Contains(kv.Value.Emit(), "alice") {
					t.Errorf("span %q records the key in %s", s.Name(), kv.Key)
				}
			}
			if strings.Contains(s.Status().Description, "alice") {
				t.Errorf("span %q records the key in its status %q", s.Name(), s.Status().Description)
			}
		}
	}
}

// hold keeps key held by another Client until the returned func is called.
func hold(t *testing.T, key string) func() {
	t.Helper()
	other, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	held, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- other.Do(context.Background(), key, lease.Spec{TTL: 10 * time.Second, Deadline: 20 * time.Second}, func(context.Context) error {
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	return func() {
		close(release)
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// Busy, skipped and waited-for calls: busy fails with error.type busy and
// has no release; skipped is not an error; a waiter is counted in
// lease.waiting while it waits and then granted.
func TestBusySkippedWaiting(t *testing.T) {
	h := newHarness(t, nil)
	free := hold(t, "jobs:settle")
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Name: "busy"}
	if err := h.c.Do(context.Background(), "jobs:settle", s, nop); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("got %v, want ErrBusy", err)
	}
	s.Name, s.Busy = "skip", lease.BusySkip
	if err := h.c.Do(context.Background(), "jobs:settle", s, nop); err != nil {
		t.Fatalf("skipped call: %v", err)
	}
	s.Name, s.Busy, s.Wait = "wait", lease.BusyError, 3*time.Second
	waited := make(chan error, 1)
	go func() { waited <- h.c.Do(context.Background(), "jobs:settle", s, nop) }()
	deadline := time.Now().Add(2 * time.Second)
	for {
		if n, _ := h.value("lease.waiting", "lease.name=wait"); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lease.waiting never reached 1")
		}
		time.Sleep(5 * time.Millisecond)
	}
	freed := time.Now()
	free()
	if err := <-waited; err != nil {
		t.Fatalf("waiter: %v", err)
	}

	busy := h.call("busy")
	wantAttrs(t, busy, "lease.outcome=busy", "error.type=busy")
	wantStatus(t, busy, codes.Error)
	kids := h.children(busy)
	if _, ok := kids["lease.release"]; ok || len(kids) != 1 {
		t.Errorf("busy call's children %v, want only lease.acquire", kids)
	}
	wantAttrs(t, kids["lease.acquire"], "lease.outcome=busy", "error.type=busy")

	skip := h.call("skip")
	wantAttrs(t, skip, "lease.outcome=skipped", "error.type=-")
	wantStatus(t, skip, codes.Unset)
	wantAttrs(t, h.children(skip)["lease.acquire"], "lease.outcome=busy")

	wait := h.call("wait")
	wantAttrs(t, wait, "lease.outcome=granted")
	acq := h.children(wait)["lease.acquire"]
	if acq == nil || !acq.StartTime().Before(freed) || !acq.EndTime().After(freed) {
		t.Errorf("waiter's acquire span does not cover its wait until the holder released at %v", freed)
	}

	h.wantValue("lease.calls", 1, "lease.name=busy", "lease.outcome=busy")
	h.wantValue("lease.calls", 1, "lease.name=skip", "lease.outcome=skipped")
	h.wantValue("lease.calls", 1, "lease.name=wait", "lease.outcome=granted")
	h.wantValue("lease.waiting", 0, "lease.name=wait")
	h.wantValue("lease.active", 0, "lease.name=wait")
	h.wantCount("lease.acquire.duration", 1, "lease.name=busy", "lease.outcome=busy")
	h.wantCount("lease.acquire.duration", 1, "lease.name=skip", "lease.outcome=busy")
	h.wantCount("lease.acquire.duration", 1, "lease.name=wait", "lease.outcome=granted")
	h.wantCount("lease.hold.duration", 0, "lease.name=busy", "lease.outcome=busy")
}

// A blackholed acquire reply: unknown, the function not entered, and the
// release of the possible grant unconfirmed.
func TestUnknown(t *testing.T) {
	p := leasetest.StartProxy(t, srv.Addr())
	h := newHarness(t, srv.Client(t, func(o *redis.Options) { o.Addr = p.Addr() }))
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Name: "unknown"}
	key := fmt.Sprintf("unknown:%d", time.Now().UnixNano())           // its possible grant outlives the test
	if err := h.c.Do(context.Background(), key, s, nop); err != nil { // warm the pool and the scripts
		t.Fatal(err)
	}
	p.Set(leasetest.Blackhole)
	s.Deadline = 300 * time.Millisecond
	err := h.c.Do(context.Background(), key, s, func(context.Context) error {
		t.Error("entered on an unknown acquire")
		return nil
	})
	if !errors.Is(err, lease.ErrUnknown) {
		t.Fatalf("got %v, want ErrUnknown", err)
	}
	var call sdktrace.ReadOnlySpan
	for _, sp := range h.spans.Ended() {
		if sp.Name() == "lease unknown" && attrs(sp)["lease.outcome"].AsString() == "unknown" {
			call = sp
		}
	}
	if call == nil {
		t.Fatalf("no call span with outcome unknown among %v", spanNames(h.spans.Ended()))
	}
	wantAttrs(t, call, "error.type=unknown", "lease.fence.token=-")
	wantStatus(t, call, codes.Error)
	kids := h.children(call)
	wantAttrs(t, kids["lease.acquire"], "lease.outcome=unknown", "error.type=unknown")
	wantAttrs(t, kids["lease.release"], "lease.result=unconfirmed", "error.type=unknown")
	wantStatus(t, kids["lease.release"], codes.Error)
	h.wantValue("lease.calls", 1, "lease.name=unknown", "lease.outcome=unknown")
	h.wantValue("lease.releases", 1, "lease.name=unknown", "lease.result=unconfirmed")
	h.wantValue("lease.active", 0, "lease.name=unknown")
	h.wantCount("lease.acquire.duration", 1, "lease.name=unknown", "lease.outcome=unknown")
	h.wantCount("lease.hold.duration", 0, "lease.name=unknown", "lease.outcome=unknown")
}

// The key is deleted from outside while the function runs: the renewal
// finds it not ours, the lease is lost, and the span says so with events.
// The function takes 50ms to wind down after its context is cancelled, as
// real work does: the runtime cancels the context before it reports the
// failed renewal (see TestLostReturnAtOnce).
func TestLost(t *testing.T) {
	h := newHarness(t, nil)
	s := lease.Spec{TTL: 300 * time.Millisecond, Deadline: 5 * time.Second, Name: "lost"}
	err := h.c.Do(context.Background(), "lost", s, func(ctx context.Context) error {
		if err := h.direct.Del(ctx, "lease:{lost}:l").Err(); err != nil {
			return err
		}
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond)
		return nil
	})
	if !errors.Is(err, lease.ErrLost) {
		t.Fatalf("got %v, want ErrLost", err)
	}
	call := h.call("lost")
	wantAttrs(t, call, "lease.outcome=lost", "error.type=lost")
	wantStatus(t, call, codes.Error)
	if ev := eventNames(call); !slices.Equal(ev, []string{"lease.renew_failed", "lease.lost"}) {
		t.Errorf("call span events %v, want lease.renew_failed and lease.lost", ev)
	}
	for _, e := range call.Events() {
		if e.Name == "lease.renew_failed" {
			for _, kv := range e.Attributes {
				if kv.Key == "lease.result" && kv.Value.AsString() != "not_owner" {
					t.Errorf("renew_failed result %q, want not_owner", kv.Value.AsString())
				}
			}
		}
	}
	h.wantValue("lease.renewals", 1, "lease.name=lost", "lease.result=not_owner")
	h.wantValue("lease.calls", 1, "lease.name=lost", "lease.outcome=lost")
	h.wantValue("lease.active", 0, "lease.name=lost")
	h.wantCount("lease.hold.duration", 1, "lease.name=lost", "lease.outcome=lost")
	h.wantCount("lease.acquire.duration", 1, "lease.name=lost", "lease.outcome=granted")
}

// A function that returns the moment its context is cancelled may return
// before the runtime reports the loss (the renewal goroutine cancels, then
// reports): the outcome comes from Do's error, the span still gets its
// lease.lost event, and the late events still count in the metrics.
func TestLostReturnAtOnce(t *testing.T) {
	h := newHarness(t, nil)
	s := lease.Spec{TTL: 300 * time.Millisecond, Deadline: 5 * time.Second, Name: "lost"}
	err := h.c.Do(context.Background(), "lost-at-once", s, func(ctx context.Context) error {
		if err := h.direct.Del(ctx, "lease:{lost-at-once}:l").Err(); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, lease.ErrLost) {
		t.Fatalf("got %v, want ErrLost", err)
	}
	call := h.call("lost")
	wantAttrs(t, call, "lease.outcome=lost", "error.type=lost")
	if ev := eventNames(call); !slices.Contains(ev, "lease.lost") {
		t.Errorf("call span events %v, want lease.lost", ev)
	}
	h.wantValue("lease.calls", 1, "lease.name=lost", "lease.outcome=lost")
	for deadline := time.Now().Add(time.Second); ; time.Sleep(5 * time.Millisecond) {
		if n, _ := h.value("lease.renewals", "lease.name=lost", "lease.result=not_owner"); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the failed renewal was never counted")
		}
	}
}

// The total budget runs out while the function runs.
func TestDeadline(t *testing.T) {
	h := newHarness(t, nil)
	s := lease.Spec{TTL: 2 * time.Second, Deadline: 200 * time.Millisecond, MinValidity: 100 * time.Millisecond, Name: "deadline"}
	err := h.c.Do(context.Background(), "deadline", s, func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, lease.ErrDeadline) {
		t.Fatalf("got %v, want ErrDeadline", err)
	}
	call := h.call("deadline")
	wantAttrs(t, call, "lease.outcome=deadline", "error.type=deadline")
	wantStatus(t, call, codes.Error)
	if _, ok := h.children(call)["lease.release"]; !ok {
		t.Error("no release span after the deadline")
	}
	h.wantValue("lease.calls", 1, "lease.name=deadline", "lease.outcome=deadline")
	h.wantCount("lease.hold.duration", 1, "lease.name=deadline", "lease.outcome=deadline")
}

// A fenced resource rejects a write with a stale token: counted, and an
// event on the call span; the lease itself was granted.
func TestStaleWrite(t *testing.T) {
	h := newHarness(t, nil)
	store := fence.NewMemory[int]()
	if err := store.Set(fence.Stamp{Token: 1 << 62, Owner: "newer"}, "stock:7", 5); err != nil {
		t.Fatal(err)
	}
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Fence: true, Name: "stale"}
	err := h.c.Do(context.Background(), "stock:7", s, func(ctx context.Context) error {
		st, err := fence.From(ctx)
		if err != nil {
			return err
		}
		return store.Set(st, "stock:7", 4)
	})
	if !errors.Is(err, fence.ErrStale) {
		t.Fatalf("got %v, want fence.ErrStale", err)
	}
	call := h.call("stale")
	wantAttrs(t, call, "lease.outcome=granted", "error.type=stale_write")
	wantStatus(t, call, codes.Error)
	if ev := eventNames(call); !slices.Contains(ev, "lease.stale_write_rejected") {
		t.Errorf("call span events %v, want lease.stale_write_rejected", ev)
	}
	h.wantValue("fence.stale_writes", 1, "lease.name=stale")
	h.wantValue("lease.calls", 1, "lease.name=stale", "lease.outcome=granted")
}

// A server that refuses writes (out of memory): refused, no release.
func TestRefused(t *testing.T) {
	own := leasetest.StartRedis(t)
	rdb := own.Client(t)
	h := newHarness(t, rdb)
	if err := rdb.ConfigSet(context.Background(), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	err := h.c.Do(context.Background(), "refused", lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Name: "refused"}, nop)
	if !errors.Is(err, lease.ErrRefused) {
		t.Fatalf("got %v, want ErrRefused", err)
	}
	call := h.call("refused")
	wantAttrs(t, call, "lease.outcome=refused", "error.type=refused")
	if kids := h.children(call); len(kids) != 1 || kids["lease.acquire"] == nil {
		t.Errorf("refused call's children %v, want only lease.acquire", kids)
	}
	h.wantValue("lease.calls", 1, "lease.name=refused", "lease.outcome=refused")
	h.wantValue("lease.releases", 0, "lease.name=refused", "lease.result=unconfirmed")
}

// A nested call on the same key reuses the lease: its span says so and has
// no acquire or release of its own.
func TestReentered(t *testing.T) {
	h := newHarness(t, nil)
	s := lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Name: "outer"}
	err := h.c.Do(context.Background(), "reenter", s, func(ctx context.Context) error {
		return h.c.Do(ctx, "reenter", lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Name: "inner"}, nop)
	})
	if err != nil {
		t.Fatal(err)
	}
	outer, inner := h.call("outer"), h.call("inner")
	if inner.Parent().SpanID() != outer.SpanContext().SpanID() {
		t.Error("the nested call's span is not a child of the outer call's")
	}
	wantAttrs(t, inner, "lease.outcome=granted", "lease.reentered=true")
	if kids := h.children(inner); len(kids) != 0 {
		t.Errorf("nested call's children %v, want none", kids)
	}
	h.wantValue("lease.calls", 1, "lease.name=inner", "lease.outcome=granted")
	h.wantValue("lease.active", 0, "lease.name=outer")
	h.wantCount("lease.hold.duration", 0, "lease.name=inner", "lease.outcome=granted")
}

// Under an unsampled caller, no lease span is recorded, the caller's
// sampling decision is kept for the work, and the metrics still count.
func TestUnsampled(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	obs, err := leaseotel.New(leaseotel.WithTracerProvider(tp), leaseotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	c, err := lease.New(srv.Client(t), lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	err = c.Do(context.Background(), "unsampled", lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Name: "unsampled"}, func(ctx context.Context) error {
		if trace.SpanFromContext(ctx).IsRecording() {
			t.Error("the work runs under a recording span")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(spans.Started()); n != 0 {
		t.Errorf("%d spans recorded, want none: %v", n, spanNames(spans.Ended()))
	}
	h := &harness{t: t, reader: reader}
	h.wantValue("lease.calls", 1, "lease.name=unsampled", "lease.outcome=granted")
	h.wantValue("lease.releases", 1, "lease.name=unsampled", "lease.result=confirmed")
	h.wantCount("lease.acquire.duration", 1, "lease.name=unsampled", "lease.outcome=granted")
	h.wantCount("lease.hold.duration", 1, "lease.name=unsampled", "lease.outcome=granted")
}
