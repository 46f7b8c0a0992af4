package leaseslog_test

// Adversarial tests, round 20 (observability): the log/slog adapter.
// Run: go test ./runtime/leaseslog -run Adversary20 -race -count=1 -v

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leaseslog"
)

// The level table of the package doc, kind by kind.
func TestAdversary20LevelsAsDocumented(t *testing.T) {
	want := map[lease.EventKind]slog.Level{
		lease.EventLost: slog.LevelError, lease.EventRefused: slog.LevelError,
		lease.EventAcquireUnknown: slog.LevelWarn, lease.EventUnreplicated: slog.LevelWarn, lease.EventLowValidity: slog.LevelWarn,
		lease.EventRenewFailed: slog.LevelWarn, lease.EventReleaseUnconfirmed: slog.LevelWarn, lease.EventDeadlineExceeded: slog.LevelWarn,
		lease.EventStaleWriteRejected: slog.LevelWarn, lease.EventSubscriptionFailed: slog.LevelWarn,
		lease.EventBusy: slog.LevelInfo, lease.EventSkipped: slog.LevelInfo,
		lease.EventWaiting: slog.LevelDebug, lease.EventAcquired: slog.LevelDebug, lease.EventRenewed: slog.LevelDebug,
		lease.EventReleased: slog.LevelDebug, lease.EventDone: slog.LevelDebug,
	}
	for k := lease.EventKind(1); k <= lease.EventWaiting; k++ {
		w, ok := want[k]
		if !ok {
			t.Errorf("%v: not in the documented table", k)
			continue
		}
		if got := leaseslog.Level(k); got != w {
			t.Errorf("Level(%v) = %v, want %v", k, got, w)
		}
	}
}

// ctxHandler records each record's message, attributes and whether the
// context passed to the handler is the call's (carries a marker value).
type ctxHandler struct {
	mu   sync.Mutex
	recs []adv20Rec
}

type adv20Rec struct {
	msg     string
	level   slog.Level
	marked  bool
	outcome string
	attrs   map[string]string
}

type adv20Marker struct{}

func (h *ctxHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *ctxHandler) Handle(ctx context.Context, r slog.Record) error {
	rec := adv20Rec{msg: r.Message, level: r.Level, attrs: map[string]string{}}
	rec.marked = ctx.Value(adv20Marker{}) != nil
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "lease" {
			for _, g := range a.Value.Group() {
				rec.attrs[g.Key] = g.Value.String()
			}
		}
		return true
	})
	rec.outcome = rec.attrs["outcome"]
	h.mu.Lock()
	h.recs = append(h.recs, rec)
	h.mu.Unlock()
	return nil
}
func (h *ctxHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *ctxHandler) WithGroup(string) slog.Handler      { return h }

func (h *ctxHandler) all() []adv20Rec {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]adv20Rec(nil), h.recs...)
}

// The handler gets the call's context (trace correlation), and the done
// record has the outcome, the acquired record the wait.
func TestAdversary20ContextAndAttributes(t *testing.T) {
	h := &ctxHandler{}
	c, err := lease.New(srv.Client(t), lease.WithObserver(leaseslog.New(slog.New(h))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.WithValue(context.Background(), adv20Marker{}, true)
	key := fmt.Sprintf("adv20-ctx-%d", time.Now().UnixNano())
	if err := c.Do(ctx, key, lease.Spec{Name: "ctx", TTL: 300 * time.Millisecond, Deadline: time.Second, Fence: true}, func(context.Context) error {
		time.Sleep(250 * time.Millisecond) // a renewal or two, from the renewal goroutine
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var sawRenew, sawDone bool
	for _, r := range h.all() {
		if !r.marked {
			t.Errorf("%q: handler got a ctx that is not the call's", r.msg)
		}
		switch r.msg {
		case "lease renewed":
			sawRenew = true
			if r.attrs["result"] != "renewed" || r.attrs["took"] == "" {
				t.Errorf("renewed attrs %v", r.attrs)
			}
		case "lease acquired":
			if r.attrs["wait"] == "" || r.attrs["token"] == "" || r.attrs["key"] != key || r.attrs["name"] != "ctx" {
				t.Errorf("acquired attrs %v", r.attrs)
			}
		case "lease released":
			if r.attrs["held"] == "" || r.attrs["result"] != "confirmed" {
				t.Errorf("released attrs %v", r.attrs)
			}
		case "lease done":
			sawDone = true
			if r.outcome != "granted" {
				t.Errorf("done outcome %q", r.outcome)
			}
		}
	}
	if !sawRenew || !sawDone {
		t.Errorf("renewed %v done %v", sawRenew, sawDone)
	}
}

// A slow Observer before leaseslog stalls the call after EventAcquired;
// the entry check reports EventLowValidity and Do returns ErrLowValidity,
// fn not called.
//
// Found by round 20 (shared leaseobs.Call.outcome), fixed: the "lease done" record says
// outcome=granted for a call whose function never ran; the README's
// outcomes: low_validity is "granted too late to enter (ErrLowValidity)".
func TestAdversary20LowValidityAfterAcquiredOutcome(t *testing.T) {
	h := &ctxHandler{}
	slow := lease.ObserverFunc(func(e lease.Event) {
		if e.Kind == lease.EventAcquired {
			time.Sleep(300 * time.Millisecond)
		}
	})
	c, err := lease.New(srv.Client(t), lease.WithObserver(lease.Observers{slow, leaseslog.New(slog.New(h))}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := fmt.Sprintf("adv20-lowval-%d", time.Now().UnixNano())
	err = c.Do(context.Background(), key, lease.Spec{Name: "lowval", TTL: 500 * time.Millisecond, Deadline: 5 * time.Second, MinValidity: 300 * time.Millisecond},
		func(context.Context) error { t.Error("entered"); return nil })
	if !errors.Is(err, lease.ErrLowValidity) {
		t.Fatalf("setup: %v", err)
	}
	for _, r := range h.all() {
		if r.msg == "lease done" && r.outcome != "low_validity" {
			t.Errorf("done outcome %q, want low_validity (Do returned %v)", r.outcome, err)
		}
	}
}

// Two leaseslog Observers (a console and a file logger) combined with
// lease.Observers. Both follow the call under the same context key type;
// the second's StartCall shadows the first, both then feed the same
// leaseobs.Call, and the one that sees EventDone second gets no Change.
//
// Found by round 20 (minor), fixed: the second logger's "lease done" record has no outcome,
// which the package doc lists among the record's attributes ("outcome
// (done)").
func TestAdversary20TwoLoggersBothHaveOutcome(t *testing.T) {
	h1, h2 := &ctxHandler{}, &ctxHandler{}
	c, err := lease.New(srv.Client(t), lease.WithObserver(lease.Observers{leaseslog.New(slog.New(h1)), leaseslog.New(slog.New(h2))}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := fmt.Sprintf("adv20-two-%d", time.Now().UnixNano())
	if err := c.Do(context.Background(), key, lease.Spec{Name: "two", TTL: time.Second, Deadline: time.Second}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for i, h := range []*ctxHandler{h1, h2} {
		found := false
		for _, r := range h.all() {
			if r.msg == "lease done" {
				found = true
				if r.outcome != "granted" {
					t.Errorf("logger %d: done outcome %q, want granted", i+1, r.outcome)
				}
			}
		}
		if !found {
			t.Errorf("logger %d: no done record", i+1)
		}
	}
}
