package leaseprom_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/internal/leaseobs"
	"github.com/leasegen/leasegen/runtime/fence"
	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leaseprom"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

var srv *leasetest.Server

func TestMain(m *testing.M) { os.Exit(leasetest.RunTests(m, &srv)) }

// scrape GETs url and parses the Prometheus text exposition.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("GET %s: Content-Type %q, want the text format", url, ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return fams
}

// serve serves reg's metrics over HTTP for the test.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL + "/metrics"
}

// series finds the series of family name with exactly the labels kv
// ("label=value" pairs).
func series(t *testing.T, fams map[string]*dto.MetricFamily, name string, kv ...string) *dto.Metric {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("no family %s", name)
	}
	for _, m := range f.Metric {
		if labelsAre(m, kv) {
			return m
		}
	}
	return nil
}

func labelsAre(m *dto.Metric, kv []string) bool {
	if len(m.Label) != len(kv) {
		return false
	}
	for _, p := range kv {
		k, v, _ := strings.Cut(p, "=")
		if !slices.ContainsFunc(m.Label, func(l *dto.LabelPair) bool { return l.GetName() == k && l.GetValue() == v }) {
			return false
		}
	}
	return true
}

func wantCounter(t *testing.T, fams map[string]*dto.MetricFamily, name string, want float64, kv ...string) {
	t.Helper()
	m := series(t, fams, name, kv...)
	switch {
	case m == nil:
		t.Errorf("%s%v: no series", name, kv)
	case fams[name].GetType() == dto.MetricType_COUNTER && m.Counter.GetValue() != want:
		t.Errorf("%s%v = %v, want %v", name, kv, m.Counter.GetValue(), want)
	case fams[name].GetType() == dto.MetricType_GAUGE && m.Gauge.GetValue() != want:
		t.Errorf("%s%v = %v, want %v", name, kv, m.Gauge.GetValue(), want)
	}
}

func wantHistogramCount(t *testing.T, fams map[string]*dto.MetricFamily, name string, want uint64, kv ...string) {
	t.Helper()
	m := series(t, fams, name, kv...)
	var got uint64
	if m != nil {
		got = m.Histogram.GetSampleCount()
	}
	if got != want {
		t.Errorf("%s%v count = %d, want %d", name, kv, got, want)
	}
}

// scenarios runs a granted, a busy, a skipped, a waited-for, a lost, a
// deadline, a stale-write and an unknown call on a Client observed by obs;
// its Redis connections go through a proxy that blackholes the last one.
func scenarios(t *testing.T, obs lease.Observer) {
	t.Helper()
	ctx := context.Background()
	p := leasetest.StartProxy(t, srv.Addr())
	c, err := lease.New(srv.Client(t, func(o *redis.Options) { o.Addr = p.Addr() }), lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	direct := srv.Client(t)
	other, err := lease.New(direct)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	run := func(name, key string, s lease.Spec, fn func(context.Context) error, want error) {
		t.Helper()
		s.Name = name
		if s.TTL == 0 {
			s.TTL, s.Deadline = 5*time.Second, 5*time.Second
		}
		if fn == nil {
			fn = func(context.Context) error { time.Sleep(5 * time.Millisecond); return nil }
		}
		if err := c.Do(ctx, key, s, fn); !errors.Is(err, want) || (want == nil && err != nil) {
			t.Fatalf("%s: got %v, want %v", name, err, want)
		}
	}
	uniq := fmt.Sprint(time.Now().UnixNano())

	run("charge", "orders:"+uniq, lease.Spec{Fence: true}, nil, nil)
	run("charge", "orders:"+uniq, lease.Spec{Fence: true}, nil, nil)

	held, free, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- other.Do(ctx, "jobs:"+uniq, lease.Spec{TTL: 10 * time.Second, Deadline: 20 * time.Second}, func(context.Context) error {
			close(held)
			<-free
			return nil
		})
	}()
	<-held
	run("settle", "jobs:"+uniq, lease.Spec{}, nil, lease.ErrBusy)
	run("settle", "jobs:"+uniq, lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Busy: lease.BusySkip}, nil, nil)
	time.AfterFunc(50*time.Millisecond, func() { close(free) })
	run("settle", "jobs:"+uniq, lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Wait: 3 * time.Second}, nil, nil)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	run("stock", "stock:"+uniq, lease.Spec{TTL: 300 * time.Millisecond, Deadline: 5 * time.Second}, func(ctx context.Context) error {
		if err := direct.Del(ctx, "lease:{stock:"+uniq+"}:l").Err(); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}, lease.ErrLost)
	run("export", "exports:"+uniq, lease.Spec{TTL: 2 * time.Second, Deadline: 200 * time.Millisecond, MinValidity: 100 * time.Millisecond}, func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}, lease.ErrDeadline)

	store := fence.NewMemory[int]()
	if err := store.Set(fence.Stamp{Token: 1 << 62, Owner: "newer"}, "sku", 1); err != nil {
		t.Fatal(err)
	}
	run("stock", "stock:"+uniq, lease.Spec{Fence: true}, func(ctx context.Context) error {
		st, err := fence.From(ctx)
		if err != nil {
			return err
		}
		return store.Set(st, "sku", 2)
	}, fence.ErrStale)

	p.Set(leasetest.Blackhole)
	run("charge", "orders:"+uniq, lease.Spec{TTL: 5 * time.Second, Deadline: 300 * time.Millisecond}, func(context.Context) error {
		t.Error("entered on an unknown acquire")
		return nil
	}, lease.ErrUnknown)
}

// The metrics, scraped over HTTP and parsed, count each scenario under
// its name and outcome.
func TestScrape(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	obs, err := leaseprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	before := scrape(t, url)
	if _, ok := before["lease_calls_total"]; ok {
		t.Error("lease_calls_total has series before any call")
	}
	scenarios(t, obs)
	fams := scrape(t, url)

	calls := map[string]map[string]float64{
		"charge": {"granted": 2, "unknown": 1},
		"settle": {"busy": 1, "skipped": 1, "granted": 1},
		"stock":  {"lost": 1, "granted": 1},
		"export": {"deadline": 1},
	}
	for name, byOutcome := range calls {
		for o := range leaseobs.NumOutcomes {
			wantCounter(t, fams, "lease_calls_total", byOutcome[o.String()], "lease_name="+name, "lease_outcome="+o.String())
		}
		wantCounter(t, fams, "lease_active", 0, "lease_name="+name)
		wantCounter(t, fams, "lease_waiting", 0, "lease_name="+name)
	}
	wantHistogramCount(t, fams, "lease_acquire_duration_seconds", 2, "lease_name=charge", "lease_outcome=granted")
	wantHistogramCount(t, fams, "lease_acquire_duration_seconds", 1, "lease_name=charge", "lease_outcome=unknown")
	wantHistogramCount(t, fams, "lease_acquire_duration_seconds", 2, "lease_name=settle", "lease_outcome=busy")
	wantHistogramCount(t, fams, "lease_hold_duration_seconds", 2, "lease_name=charge", "lease_outcome=granted")
	wantHistogramCount(t, fams, "lease_hold_duration_seconds", 1, "lease_name=stock", "lease_outcome=lost")
	wantHistogramCount(t, fams, "lease_hold_duration_seconds", 1, "lease_name=export", "lease_outcome=deadline")
	wantCounter(t, fams, "lease_renewals_total", 1, "lease_name=stock", "lease_result=not_owner")
	wantCounter(t, fams, "lease_releases_total", 2, "lease_name=charge", "lease_result=confirmed")
	wantCounter(t, fams, "lease_releases_total", 1, "lease_name=charge", "lease_result=unconfirmed")
	wantCounter(t, fams, "fence_stale_writes_total", 1, "lease_name=stock")
	wantCounter(t, fams, "fence_stale_writes_total", 0, "lease_name=charge")
	wantCounter(t, fams, "lease_subscription_failures_total", 0)

	// The buckets are in seconds: a 5ms hold lands at or below 0.25s.
	h := series(t, fams, "lease_hold_duration_seconds", "lease_name=charge", "lease_outcome=granted").Histogram
	for _, b := range h.Bucket {
		if b.GetUpperBound() == 0.25 && b.GetCumulativeCount() != 2 {
			t.Errorf("hold bucket le=0.25 has %d, want both 5ms holds", b.GetCumulativeCount())
		}
	}
	if s := h.GetSampleSum(); s < 0.01 || s > 1 {
		t.Errorf("hold sum %vs, want about 2×5ms", s)
	}
}

// Registering twice on one registry fails rather than double counting.
func TestNewTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := leaseprom.New(reg); err != nil {
		t.Fatal(err)
	}
	var already prometheus.AlreadyRegisteredError
	if _, err := leaseprom.New(reg); !errors.As(err, &already) {
		t.Fatalf("second New: %v, want AlreadyRegisteredError", err)
	}
}

// The core module's dependency-free exposition (leaseobs.Text, served by
// the example's -metrics) is the same as client_golang's: families, help,
// types, series, values and bucket bounds.
func TestTextMatchesClientGolang(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	obs, err := leaseprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	text := &leaseobs.Text{}
	scenarios(t, lease.Observers{obs, text})
	want := scrape(t, serve(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	got := scrape(t, serve(t, text))

	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("text has no family %s", name)
			continue
		}
		if g.GetHelp() != w.GetHelp() || g.GetType() != w.GetType() {
			t.Errorf("%s: help %q type %v, want %q %v", name, g.GetHelp(), g.GetType(), w.GetHelp(), w.GetType())
		}
		if len(g.Metric) != len(w.Metric) {
			t.Errorf("%s: %d series, want %d", name, len(g.Metric), len(w.Metric))
		}
		for _, wm := range w.Metric {
			var kv []string
			for _, l := range wm.Label {
				kv = append(kv, l.GetName()+"="+l.GetValue())
			}
			gm := series(t, got, name, kv...)
			if gm == nil {
				t.Errorf("%s%v: missing in text", name, kv)
				continue
			}
			switch w.GetType() {
			case dto.MetricType_COUNTER:
				if gm.Counter.GetValue() != wm.Counter.GetValue() {
					t.Errorf("%s%v = %v, want %v", name, kv, gm.Counter.GetValue(), wm.Counter.GetValue())
				}
			case dto.MetricType_GAUGE:
				if gm.Gauge.GetValue() != wm.Gauge.GetValue() {
					t.Errorf("%s%v = %v, want %v", name, kv, gm.Gauge.GetValue(), wm.Gauge.GetValue())
				}
			case dto.MetricType_HISTOGRAM:
				gh, wh := gm.Histogram, wm.Histogram
				// Each observer reads the clock itself: counts agree, sums
				// nearly.
				if gh.GetSampleCount() != wh.GetSampleCount() || math.Abs(gh.GetSampleSum()-wh.GetSampleSum()) > 0.005 {
					t.Errorf("%s%v: count %d sum %v, want %d %v", name, kv, gh.GetSampleCount(), gh.GetSampleSum(), wh.GetSampleCount(), wh.GetSampleSum())
				}
				if len(gh.Bucket) != len(wh.Bucket) {
					t.Errorf("%s%v: %d buckets, want %d", name, kv, len(gh.Bucket), len(wh.Bucket))
					continue
				}
				for i := range wh.Bucket {
					if gh.Bucket[i].GetUpperBound() != wh.Bucket[i].GetUpperBound() {
						t.Errorf("%s%v: bucket %d bound %v, want %v", name, kv, i, gh.Bucket[i].GetUpperBound(), wh.Bucket[i].GetUpperBound())
					}
				}
			}
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("text has family %s, client_golang does not", name)
		}
	}
}
