package leaseslog_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasegen/leasegen/internal/leaseobs"
	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leaseslog"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

// a31cCallID tags each call's context, so the log handler can tell whose
// record it writes.
type a31cCallID struct{}

// a31cTagger is the CallObserver that tags the calls.
type a31cTagger struct{ n atomic.Int64 }

func (g *a31cTagger) StartCall(ctx context.Context, _ string, _ lease.Spec) context.Context {
	return context.WithValue(ctx, a31cCallID{}, g.n.Add(1))
}
func (g *a31cTagger) Observe(lease.Event) {}

// a31cHandler keeps, per call, the level and outcome of its "lease done"
// records, and the levels of everything else.
type a31cHandler struct {
	mu    sync.Mutex
	done  map[int64][]string // call → outcomes logged at done
	other map[string]int     // "level msg" → count
}

func (h *a31cHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *a31cHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *a31cHandler) WithGroup(string) slog.Handler            { return h }
func (h *a31cHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	id, _ := ctx.Value(a31cCallID{}).(int64)
	if r.Message != "lease done" {
		h.other[r.Level.String()+" "+r.Message]++
		return nil
	}
	outcome := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "lease" {
			for _, g := range a.Value.Group() {
				if g.Key == "outcome" {
					outcome = g.Value.String()
				}
			}
		}
		return true
	})
	h.done[id] = append(h.done[id], outcome)
	return nil
}

// Calls through a Sentinel failover (forced, while they run): each call
// is logged done exactly once, with the outcome class of the error Do
// returned (unknown stays unknown, refused refused, lost lost), and
// nothing is logged for a call after it is done but its late renewals.
func TestAdversary31c_FailoverOneDoneRecordPerCallMatchingDo(t *testing.T) {
	sn := leasetest.StartSentinel(t)
	h := &a31cHandler{done: map[int64][]string{}, other: map[string]int{}}
	tag := &a31cTagger{}
	c, err := lease.New(sn.FailoverClient(t), lease.WithObserver(lease.Observers{tag, leaseslog.New(slog.New(h))}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	type result struct {
		id  int64
		err error
	}
	var (
		mu      sync.Mutex
		results []result
		stop    atomic.Bool
		wg      sync.WaitGroup
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				var id int64
				err := c.Do(context.Background(), fmt.Sprintf("fo:%d", i%3), lease.Spec{Name: "fo", TTL: 900 * time.Millisecond, Deadline: 1500 * time.Millisecond, Wait: 300 * time.Millisecond},
					func(ctx context.Context) error {
						id, _ = ctx.Value(a31cCallID{}).(int64)
						time.Sleep(time.Duration(10+w*7) * time.Millisecond)
						return nil
					})
				if id == 0 { // fn not entered: the id is the call's all the same
					id = -1
				}
				mu.Lock()
				results = append(results, result{id, err})
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
	c.Close()

	h.mu.Lock()
	defer h.mu.Unlock()
	if calls := int(tag.n.Load()); len(h.done) != calls || len(results) != calls {
		t.Errorf("%d calls started, %d returned, %d logged done", calls, len(results), len(h.done))
	}
	classes := map[string]int{}
	for _, r := range results {
		want := leaseobs.Classify(r.err).String()
		classes[want]++
		if r.id < 0 {
			continue // not entered: matched below by counts
		}
		if got := h.done[r.id]; len(got) != 1 || got[0] != want {
			t.Errorf("call %d returned %v; logged done %q, want once %q", r.id, r.err, got, want)
		}
	}
	logged := map[string]int{}
	for _, outs := range h.done {
		for _, o := range outs {
			logged[o]++
		}
		if len(outs) != 1 {
			t.Errorf("a call logged done %d times: %q", len(outs), outs)
		}
	}
	for class, n := range classes {
		if logged[class] != n {
			t.Errorf("Do returned %d %s, %d logged done %s (returned %v, logged %v)", n, class, logged[class], class, classes, logged)
		}
	}
	t.Logf("outcomes %v; other records %v", classes, h.other)
}
