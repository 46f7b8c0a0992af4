package leaseobs

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
)

// Text is a lease.CallObserver that aggregates events into the metrics
// runtime/leaseprom exports (same names, labels, buckets and series) and
// serves them in the Prometheus text format, without client_golang: for
// programs of the core module, which takes no metrics dependency (the
// example's -metrics flag). Services should use leaseprom or leaseotel.
type Text struct {
	mu     sync.Mutex
	names  map[string]*textSeries
	subErr int64
}

type textSeries struct {
	calls    [NumOutcomes]int64
	acquire  [NumOutcomes]*textHist
	hold     [NumOutcomes]*textHist
	active   int64
	waiting  int64
	results  [NumResults]int64
	stale    int64
	hasStale bool
}

type textHist struct {
	counts []uint64 // per bucket, not cumulative; the last is +Inf
	sum    float64
	n      uint64
}

func (h *textHist) observe(v float64) {
	i, _ := slices.BinarySearch(Buckets, v) // le: v ≤ bound
	h.counts[i]++
	h.sum += v
	h.n++
}

type textKey struct{ t *Text } // per Text: two combined keep their own

// StartCall keeps the call's state in its context.
func (t *Text) StartCall(ctx context.Context, key string, spec lease.Spec) context.Context {
	name := spec.Name
	t.mu.Lock()
	t.series(name) // as leaseprom: a name's series exist from its first call
	t.mu.Unlock()
	return context.WithValue(ctx, textKey{t}, NewCall(name, key))
}

// Observe records e.
func (t *Text) Observe(e lease.Event) {
	var ch Change
	if c, ok := e.Ctx.Value(textKey{t}).(*Call); ok && c.Key == e.Key && c.Name == e.Name {
		ch = c.Observe(e, time.Now())
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.Kind == lease.EventSubscriptionFailed {
		t.subErr++
		return
	}
	s := t.series(e.Name)
	if r, ok := ResultOf(e); ok {
		s.results[r]++
	}
	if e.Kind == lease.EventStaleWriteRejected {
		s.stale++
	}
	if ch.WaitStarted {
		s.waiting++
	}
	if ch.WaitEnded {
		s.waiting--
	}
	if ch.Entered {
		s.active++
	}
	if ch.Left {
		s.active--
	}
	if ch.AcquireEnded {
		hist(&s.acquire[ch.Acquire]).observe(ch.AcquireTook.Seconds())
	}
	if ch.Done {
		s.calls[ch.Outcome]++
		if ch.HeldValid {
			hist(&s.hold[ch.Outcome]).observe(ch.Held.Seconds())
		}
	}
}

func hist(p **textHist) *textHist {
	if *p == nil {
		*p = &textHist{counts: make([]uint64, len(Buckets)+1)}
	}
	return *p
}

// series returns the series of the lease name, labelled as leaseprom
// labels it: bytes that are not UTF-8 as U+FFFD (Prometheus rejects a
// scrape with such a label value), names that differ only there sharing
// one series.
func (t *Text) series(name string) *textSeries {
	name = strings.ToValidUTF8(name, "\uFFFD")
	if t.names == nil {
		t.names = map[string]*textSeries{}
	}
	s := t.names[name]
	if s == nil {
		s = &textSeries{}
		t.names[name] = s
	}
	return s
}

// ServeHTTP writes the metrics in the Prometheus text format.
func (t *Text) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_ = t.WriteText(w)
}

// WriteText writes the metrics in the Prometheus text format (0.0.4),
// families sorted by name, series by label values. Every name seen has all
// its counter series (zeros included, so that rate() and increase() see the
// first increment), its gauges, and the histogram series of the outcomes
// that occurred — as leaseprom does.
func (t *Text) WriteText(w io.Writer) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	bw := bufio.NewWriter(w)
	var body strings.Builder // the samples of the family being written
	names := make([]string, 0, len(t.names))
	for n := range t.names {
		names = append(names, n)
	}
	slices.Sort(names)
	nameLabel := PromLabel(AttrName)
	outLabel := PromLabel(AttrOutcome)
	resLabel := PromLabel(AttrResult)

	type family struct {
		m     Metric
		kind  string
		write func(m Metric)
	}
	sample := func(name, labels string, v string) {
		fmt.Fprintf(&body, "%s{%s} %s\n", name, labels, v)
	}
	pair := func(k, v string) string { return k + `="` + escape(v) + `"` }
	histograms := func(m Metric, get func(*textSeries) *[NumOutcomes]*textHist) {
		for _, n := range names {
			for o, h := range get(t.names[n]) {
				if h == nil {
					continue
				}
				base := pair(nameLabel, n) + "," + pair(outLabel, Outcome(o).String())
				var cum uint64
				for i, b := range Buckets {
					cum += h.counts[i]
					sample(m.Prom+"_bucket", base+","+pair("le", formatFloat(b)), strconv.FormatUint(cum, 10))
				}
				sample(m.Prom+"_bucket", base+`,le="+Inf"`, strconv.FormatUint(h.n, 10))
				sample(m.Prom+"_sum", base, formatFloat(h.sum))
				sample(m.Prom+"_count", base, strconv.FormatUint(h.n, 10))
			}
		}
	}
	results := func(m Metric, rs []Result) {
		for _, n := range names {
			for _, r := range rs {
				sample(m.Prom, pair(nameLabel, n)+","+pair(resLabel, r.String()), strconv.FormatInt(t.names[n].results[r], 10))
			}
		}
	}
	perName := func(m Metric, get func(*textSeries) int64) {
		for _, n := range names {
			sample(m.Prom, pair(nameLabel, n), strconv.FormatInt(get(t.names[n]), 10))
		}
	}
	families := []family{
		{AcquireDuration, "histogram", func(m Metric) {
			histograms(m, func(s *textSeries) *[NumOutcomes]*textHist { return &s.acquire })
		}},
		{Active, "gauge", func(m Metric) { perName(m, func(s *textSeries) int64 { return s.active }) }},
		{Calls, "counter", func(m Metric) {
			for _, n := range names {
				for o := range NumOutcomes {
					sample(m.Prom, pair(nameLabel, n)+","+pair(outLabel, o.String()), strconv.FormatInt(t.names[n].calls[o], 10))
				}
			}
		}},
		{HoldDuration, "histogram", func(m Metric) {
			histograms(m, func(s *textSeries) *[NumOutcomes]*textHist { return &s.hold })
		}},
		{Releases, "counter", func(m Metric) { results(m, ReleaseResults) }},
		{Renewals, "counter", func(m Metric) { results(m, RenewalResults) }},
		{SubscriptionFailures, "counter", func(m Metric) { fmt.Fprintf(&body, "%s %d\n", m.Prom, t.subErr) }},
		{Waiting, "gauge", func(m Metric) { perName(m, func(s *textSeries) int64 { return s.waiting }) }},
		{StaleWrites, "counter", func(m Metric) { perName(m, func(s *textSeries) int64 { return s.stale }) }},
	}
	slices.SortFunc(families, func(a, b family) int { return strings.Compare(a.m.Prom, b.m.Prom) })
	for _, f := range families {
		body.Reset()
		if f.write(f.m); body.Len() == 0 {
			continue // no series: client_golang writes no family either
		}
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", f.m.Prom, escapeHelp(f.m.Help), f.m.Prom, f.kind)
		bw.WriteString(body.String())
	}
	return bw.Flush()
}

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

func escape(s string) string     { return labelEscaper.Replace(s) }
func escapeHelp(s string) string { return helpEscaper.Replace(s) }

// Summary is one lease name's totals: what a dashboard over these metrics
// would show.
type Summary struct {
	Name            string
	Calls           [NumOutcomes]int64
	Active, Waiting int64
	Results         [NumResults]int64
	StaleWrites     int64
	// AcquireP95 and HoldP95 estimate the 95th percentile over all outcomes
	// from the buckets, as PromQL's histogram_quantile does.
	AcquireP95, HoldP95 time.Duration
}

// Summaries returns the totals of each name seen, sorted by name.
func (t *Text) Summaries() []Summary {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Summary
	for n, s := range t.names {
		out = append(out, Summary{
			Name: n, Calls: s.calls, Active: s.active, Waiting: s.waiting, Results: s.results, StaleWrites: s.stale,
			AcquireP95: quantile(0.95, s.acquire[:]), HoldP95: quantile(0.95, s.hold[:]),
		})
	}
	slices.SortFunc(out, func(a, b Summary) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// quantile estimates the q-quantile of the merged histograms hs by linear
// interpolation within the bucket that holds it (0 without observations).
func quantile(q float64, hs []*textHist) time.Duration {
	counts := make([]uint64, len(Buckets)+1)
	var total uint64
	for _, h := range hs {
		if h == nil {
			continue
		}
		for i, c := range h.counts {
			counts[i] += c
		}
		total += h.n
	}
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var cum uint64
	for i, c := range counts {
		if c > 0 && float64(cum+c) >= rank {
			if i == len(Buckets) { // +Inf: the highest finite bound, as histogram_quantile
				return seconds(Buckets[len(Buckets)-1])
			}
			lo := 0.0
			if i > 0 {
				lo = Buckets[i-1]
			}
			return seconds(lo + (Buckets[i]-lo)*(rank-float64(cum))/float64(c))
		}
		cum += c
	}
	return seconds(Buckets[len(Buckets)-1])
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
