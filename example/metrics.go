package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/leasegen/leasegen/internal/leaseobs"
)

// The example serves its lease metrics (-metrics ADDR) in the Prometheus
// text format with leaseobs.Text, the core module's dependency-free
// exposition: the same names, labels and buckets as runtime/leaseprom,
// without adding client_golang to the core module's go.mod. A service
// would use leaseprom or leaseotel (see the README's "Observe it").

// serveMetrics serves h at http://addr/metrics until stop is called.
func serveMetrics(addr string, h http.Handler) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("-metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Println("metrics server:", err)
		}
	}()
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}
	return "http://" + ln.Addr().String() + "/metrics", stop, nil
}

// printDashboard writes what a dashboard over these metrics shows: calls
// by outcome and latency per lease name, renewals, releases, stale writes,
// and the alert on lost or unknown calls.
func printDashboard(w io.Writer, m *leaseobs.Text) {
	fmt.Fprintln(w, "\nDashboard (the /metrics series of this run):")
	fmt.Fprintf(w, "  %-30s %5s %7s %4s %7s %7s %4s %8s %5s %11s %9s\n",
		"lease", "calls", "granted", "busy", "skipped", "unknown", "lost", "deadline", "other", "acquire p95", "hold p95")
	var total leaseobs.Summary
	for _, s := range m.Summaries() {
		name := s.Name
		if name == "" {
			name = "(unnamed)"
		}
		var calls int64
		for o, n := range s.Calls {
			calls += n
			total.Calls[o] += n
		}
		other := s.Calls[leaseobs.LowValidity] + s.Calls[leaseobs.Refused] + s.Calls[leaseobs.Error]
		fmt.Fprintf(w, "  %-30s %5d %7d %4d %7d %7d %4d %8d %5d %11v %9v\n", name, calls,
			s.Calls[leaseobs.Granted], s.Calls[leaseobs.Busy], s.Calls[leaseobs.Skipped], s.Calls[leaseobs.Unknown],
			s.Calls[leaseobs.Lost], s.Calls[leaseobs.Deadline], other, round(s.AcquireP95), round(s.HoldP95))
		for r, n := range s.Results {
			total.Results[r] += n
		}
		total.StaleWrites += s.StaleWrites
		total.Active += s.Active
		total.Waiting += s.Waiting
	}
	r := total.Results
	fmt.Fprintf(w, "  renewals: %d renewed, %d unknown, %d refused, %d not owner; releases: %d confirmed, %d unconfirmed\n",
		r[leaseobs.Renewed], r[leaseobs.RenewUnknown], r[leaseobs.RenewRefused], r[leaseobs.NotOwner], r[leaseobs.Confirmed], r[leaseobs.Unconfirmed])
	fmt.Fprintf(w, "  stale writes rejected: %d; held now: %d; waiting now: %d\n", total.StaleWrites, total.Active, total.Waiting)
	var firing []string
	for _, o := range []leaseobs.Outcome{leaseobs.Lost, leaseobs.Unknown} {
		if n := total.Calls[o]; n > 0 {
			firing = append(firing, fmt.Sprintf("%d %s", n, o))
		}
	}
	if len(firing) > 0 {
		fmt.Fprintf(w, "  alert LeaseLostOrUnknown: firing (%s)\n", strings.Join(firing, ", "))
	} else {
		fmt.Fprintln(w, "  alert LeaseLostOrUnknown: ok")
	}
}

func round(d time.Duration) time.Duration {
	if d >= 10*time.Millisecond {
		return d.Round(time.Millisecond)
	}
	return d.Round(10 * time.Microsecond)
}
