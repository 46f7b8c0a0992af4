package leaseotel_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leaseotel"
)

// discard is a span exporter that drops what the batcher hands it: the
// cost measured is the adapter's and the SDK's, not an exporter's.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkDo is one uncontended protected call (acquire, enter, release)
// against one redis-server, without an observer and with the OTel adapter
// on an SDK that aggregates every metric and samples every span (otel) or
// none (otel-unsampled: metrics only, as for the unsampled majority of
// calls under a ratio sampler); sampled spans are batched to a discarding
// exporter. Compare with benchstat -col /observer.
func BenchmarkDo(b *testing.B) {
	for _, observer := range []string{"none", "otel", "otel-unsampled"} {
		b.Run("observer="+observer, func(b *testing.B) {
			var opts []lease.Option
			if observer != "none" {
				sampler := sdktrace.AlwaysSample()
				if observer == "otel-unsampled" {
					sampler = sdktrace.NeverSample()
				}
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithBatcher(discard{}))
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				b.Cleanup(func() {
					_ = tp.Shutdown(context.Background())
					_ = mp.Shutdown(context.Background())
				})
				obs, err := leaseotel.New(leaseotel.WithTracerProvider(tp), leaseotel.WithMeterProvider(mp))
				if err != nil {
					b.Fatal(err)
				}
				opts = append(opts, lease.WithObserver(obs))
			}
			c, err := lease.New(srv.Client(b), opts...)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			s := lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Name: "bench.Do"}
			ctx := context.Background()
			nop := func(context.Context) error { return nil }
			b.ReportAllocs()
			for b.Loop() {
				if err := c.Do(ctx, "bench:do", s, nop); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkObserverCall is the adapter's own cost per protected call: the
// StartCall and the events of an uncontended Do (acquired, released, done),
// without Redis, with every span sampled or none. Divided by
// BenchmarkDo/observer=none it is the overhead on Do, free of the
// network's noise.
func BenchmarkObserverCall(b *testing.B) {
	for _, v := range []struct {
		sampled, phaseSpans bool
	}{{true, false}, {true, true}, {false, false}} {
		sampled := v.sampled
		b.Run(fmt.Sprintf("sampled=%v/phasespans=%v", sampled, v.phaseSpans), func(b *testing.B) {
			sampler := sdktrace.AlwaysSample()
			if !sampled {
				sampler = sdktrace.NeverSample()
			}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithBatcher(discard{}))
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			b.Cleanup(func() {
				_ = tp.Shutdown(context.Background())
				_ = mp.Shutdown(context.Background())
			})
			opts := []leaseotel.Option{leaseotel.WithTracerProvider(tp), leaseotel.WithMeterProvider(mp)}
			if v.phaseSpans {
				opts = append(opts, leaseotel.WithPhaseSpans())
			}
			obs, err := leaseotel.New(opts...)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				ctx := obs.StartCall(context.Background(), "bench:do", lease.Spec{Name: "bench.Do", TTL: 10 * time.Second, Deadline: time.Minute})
				e := lease.Event{Ctx: ctx, Name: "bench.Do", Key: "bench:do", Start: start}
				e.Kind, e.Wait = lease.EventAcquired, 50*time.Microsecond
				obs.Observe(e)
				e.Kind, e.Wait, e.Took, e.Held = lease.EventReleased, 0, 40*time.Microsecond, 10*time.Microsecond
				obs.Observe(e)
				e.Kind, e.Took, e.Held = lease.EventDone, 0, 0
				obs.Observe(e)
			}
		})
	}
}
