package leaseprom_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leaseprom"
)

// BenchmarkDo is one uncontended protected call (acquire, enter, release)
// against one redis-server, without an observer and with the Prometheus
// adapter: compare with benchstat -col /observer.
func BenchmarkDo(b *testing.B) {
	for _, observer := range []string{"none", "prom"} {
		b.Run("observer="+observer, func(b *testing.B) {
			var opts []lease.Option
			if observer == "prom" {
				obs, err := leaseprom.New(prometheus.NewRegistry())
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
