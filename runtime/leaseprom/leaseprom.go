// Package leaseprom exports lease metrics with the Prometheus client
// (client_golang), for services that use it directly. It is a module of
// its own, so that the core module takes no Prometheus dependency.
//
//	obs, err := leaseprom.New(prometheus.DefaultRegisterer)
//	if err != nil { ... }
//	leases, err := lease.New(rdb, lease.WithObserver(obs))
//
// The metrics, their labels and buckets are those of runtime/leaseotel as
// OpenTelemetry's Prometheus exporter names them, so one dashboard serves
// both:
//
//	lease_acquire_duration_seconds    histogram  lease_name, lease_outcome (granted, busy, unknown, low_validity, refused, error)
//	lease_hold_duration_seconds       histogram  lease_name, lease_outcome (granted, lost, deadline)
//	lease_calls_total                 counter    lease_name, lease_outcome (granted, busy, skipped, unknown, low_validity, lost, deadline, refused, error)
//	lease_active                      gauge      lease_name
//	lease_waiting                     gauge      lease_name
//	lease_renewals_total              counter    lease_name, lease_result (renewed, unknown, refused, not_owner)
//	lease_releases_total              counter    lease_name, lease_result (confirmed, unconfirmed)
//	fence_stale_writes_total          counter    lease_name
//	lease_subscription_failures_total counter
//
// lease_name is Spec.Name (leasegen sets the target's qualified name;
// bytes that are not UTF-8 become U+FFFD); the concrete key is never a
// label. A call whose function returned an error
// under a lease that held is "granted": the outcome describes the lease.
// Every counter series of a name is created at zero when the name is first
// seen, so that rate() and increase() see a first loss.
package leaseprom

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasegen/leasegen/internal/leaseobs"
	"github.com/leasegen/leasegen/runtime/lease"
)

// Observer is a lease.CallObserver that updates Prometheus metrics. Give it
// to lease.New with lease.WithObserver (combine with others by
// lease.Observers).
type Observer struct {
	acquire, hold             *prometheus.HistogramVec
	calls, renewals, releases *prometheus.CounterVec
	stale                     *prometheus.CounterVec
	active, waiting           *prometheus.GaugeVec
	subErr                    prometheus.Counter

	names sync.Map // Spec.Name → *named
}

// New registers the lease metrics on reg (prometheus.DefaultRegisterer if
// nil) and returns an Observer that updates them. It fails if they are
// already registered there.
func New(reg prometheus.Registerer) (*Observer, error) {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	name := leaseobs.PromLabel(leaseobs.AttrName)
	outcome := []string{name, leaseobs.PromLabel(leaseobs.AttrOutcome)}
	result := []string{name, leaseobs.PromLabel(leaseobs.AttrResult)}
	hist := func(m leaseobs.Metric) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: m.Prom, Help: m.Help, Buckets: leaseobs.Buckets}, outcome)
	}
	counter := func(m leaseobs.Metric, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: m.Prom, Help: m.Help}, labels)
	}
	gauge := func(m leaseobs.Metric) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: m.Prom, Help: m.Help}, []string{name})
	}
	o := &Observer{
		acquire:  hist(leaseobs.AcquireDuration),
		hold:     hist(leaseobs.HoldDuration),
		calls:    counter(leaseobs.Calls, outcome...),
		renewals: counter(leaseobs.Renewals, result...),
		releases: counter(leaseobs.Releases, result...),
		stale:    counter(leaseobs.StaleWrites, name),
		active:   gauge(leaseobs.Active),
		waiting:  gauge(leaseobs.Waiting),
		subErr: prometheus.NewCounter(prometheus.CounterOpts{
			Name: leaseobs.SubscriptionFailures.Prom, Help: leaseobs.SubscriptionFailures.Help}),
	}
	cs := []prometheus.Collector{o.acquire, o.hold, o.calls, o.renewals, o.releases, o.stale, o.active, o.waiting, o.subErr}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			// All or nothing: a New that fails leaves reg as it was.
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return nil, err
		}
	}
	return o, nil
}

// named holds one lease name's series, resolved once.
type named struct {
	name            string // the label value
	calls           [leaseobs.NumOutcomes]prometheus.Counter
	results         [leaseobs.NumResults]prometheus.Counter
	stale           prometheus.Counter
	active, waiting prometheus.Gauge
}

func (o *Observer) named(name string) *named {
	if n, ok := o.names.Load(name); ok {
		return n.(*named)
	}
	// client_golang panics on a label value that is not UTF-8, and the
	// panic would end the observed call: such bytes become U+FFFD.
	label := strings.ToValidUTF8(name, "\uFFFD")
	n := &named{name: label}
	for i := range n.calls {
		n.calls[i] = o.calls.WithLabelValues(label, leaseobs.Outcome(i).String())
	}
	for _, r := range leaseobs.RenewalResults {
		n.results[r] = o.renewals.WithLabelValues(label, r.String())
	}
	for _, r := range leaseobs.ReleaseResults {
		n.results[r] = o.releases.WithLabelValues(label, r.String())
	}
	n.stale = o.stale.WithLabelValues(label)
	n.active = o.active.WithLabelValues(label)
	n.waiting = o.waiting.WithLabelValues(label)
	v, _ := o.names.LoadOrStore(name, n)
	return v.(*named)
}

// callKey keys a call's state by the Observer that follows it: two
// Observers combined with lease.Observers each keep their own.
type callKey struct{ o *Observer }

type call struct {
	*leaseobs.Call
	o *Observer
}

// StartCall keeps the call's state in its context.
func (o *Observer) StartCall(ctx context.Context, key string, spec lease.Spec) context.Context {
	name := spec.Name
	o.named(name)
	return context.WithValue(ctx, callKey{o}, &call{leaseobs.NewCall(name, key), o})
}

// Observe updates the metrics with e.
func (o *Observer) Observe(e lease.Event) {
	if e.Kind == lease.EventSubscriptionFailed {
		o.subErr.Inc()
		return
	}
	n := o.named(e.Name)
	if r, ok := leaseobs.ResultOf(e); ok {
		n.results[r].Inc()
	}
	if e.Kind == lease.EventStaleWriteRejected {
		n.stale.Inc()
	}
	c, _ := e.Ctx.Value(callKey{o}).(*call)
	if c == nil || c.o != o || c.Key != e.Key || c.Name != e.Name {
		return // not a call this Observer started: counters only
	}
	ch := c.Observe(e, time.Now())
	if ch.WaitStarted {
		n.waiting.Inc()
	}
	if ch.WaitEnded {
		n.waiting.Dec()
	}
	if ch.Entered {
		n.active.Inc()
	}
	if ch.Left {
		n.active.Dec()
	}
	if ch.AcquireEnded {
		o.acquire.WithLabelValues(n.name, ch.Acquire.String()).Observe(ch.AcquireTook.Seconds())
	}
	if ch.Done {
		n.calls[ch.Outcome].Inc()
		if ch.HeldValid {
			o.hold.WithLabelValues(n.name, ch.Outcome.String()).Observe(ch.Held.Seconds())
		}
	}
}
