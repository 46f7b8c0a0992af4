package leaseslog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leaseslog"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

var srv *leasetest.Server

func TestMain(m *testing.M) { os.Exit(leasetest.RunTests(m, &srv)) }

// syncBuffer is a bytes.Buffer safe for the renewal goroutine's records.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

type record struct {
	Level string `json:"level"`
	Msg   string `json:"msg"`
	Lease struct {
		Name    string `json:"name"`
		Key     string `json:"key"`
		Token   uint64 `json:"token"`
		Result  string `json:"result"`
		Outcome string `json:"outcome"`
		Err     string `json:"err"`
	} `json:"lease"`
}

func (s *syncBuffer) records(t *testing.T) []record {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []record
	for _, line := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		if line == "" {
			continue
		}
		var r record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// Each scenario logs its events at the documented levels, with the
// lease's name and key.
func TestLevels(t *testing.T) {
	ctx := context.Background()
	var buf syncBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p := leasetest.StartProxy(t, srv.Addr())
	c, err := lease.New(srv.Client(t, func(o *redis.Options) { o.Addr = p.Addr() }), lease.WithObserver(leaseslog.New(logger)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	direct := srv.Client(t)
	uniq := fmt.Sprint(time.Now().UnixNano())
	s := func(name string) lease.Spec {
		return lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Name: name}
	}

	if err := c.Do(ctx, "a:"+uniq, lease.Spec{TTL: 5 * time.Second, Deadline: 5 * time.Second, Fence: true, Name: "ok"}, func(ctx context.Context) error {
		busy := c.Do(context.WithoutCancel(context.Background()), "a:"+uniq, s("busy"), func(context.Context) error { return nil })
		if !errors.Is(busy, lease.ErrBusy) {
			return fmt.Errorf("inner call: %v, want busy", busy)
		}
		skip := s("skip")
		skip.Busy = lease.BusySkip
		return c.Do(context.Background(), "a:"+uniq, skip, func(context.Context) error { return errors.New("ran") })
	}); err != nil {
		t.Fatal(err)
	}
	lost := lease.Spec{TTL: 300 * time.Millisecond, Deadline: 5 * time.Second, Name: "lost"}
	if err := c.Do(ctx, "b:"+uniq, lost, func(ctx context.Context) error {
		direct.Del(ctx, "lease:{b:"+uniq+"}:l")
		<-ctx.Done()
		return nil
	}); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("got %v, want ErrLost", err)
	}
	p.Set(leasetest.Blackhole)
	unknown := s("unknown")
	unknown.Deadline = 300 * time.Millisecond
	if err := c.Do(ctx, "c:"+uniq, unknown, func(context.Context) error { return nil }); !errors.Is(err, lease.ErrUnknown) {
		t.Fatalf("got %v, want ErrUnknown", err)
	}

	type want struct{ name, msg, level string }
	wants := []want{
		{"ok", "lease acquired", "DEBUG"},
		{"busy", "lease busy", "INFO"},
		{"skip", "lease skipped", "INFO"},
		{"ok", "lease released", "DEBUG"},
		{"lost", "lease renew_failed", "WARN"},
		{"lost", "lease lost", "ERROR"},
		{"unknown", "lease acquire_unknown", "WARN"},
		{"unknown", "lease release_unconfirmed", "WARN"},
	}
	recs := buf.records(t)
	for _, w := range wants {
		found := false
		for _, r := range recs {
			if r.Lease.Name == w.name && r.Msg == w.msg {
				found = true
				if r.Level != w.level {
					t.Errorf("%s %q at %s, want %s", w.name, w.msg, r.Level, w.level)
				}
				if !strings.Contains(r.Lease.Key, uniq) {
					t.Errorf("%s %q: key %q", w.name, w.msg, r.Lease.Key)
				}
			}
		}
		if !found {
			t.Errorf("no record %q for %s", w.msg, w.name)
		}
	}
	outcomes := map[string]string{}
	for _, r := range recs {
		switch {
		case r.Msg == "lease done":
			outcomes[r.Lease.Name] = r.Lease.Outcome
		case r.Msg == "lease acquired" && r.Lease.Name == "ok" && r.Lease.Token == 0:
			t.Error("fenced grant logged without its token")
		case r.Msg == "lease renew_failed" && r.Lease.Result != "not_owner":
			t.Errorf("renew_failed result %q, want not_owner", r.Lease.Result)
		case r.Msg == "lease lost" && r.Lease.Err == "":
			t.Error("lost without its cause")
		}
	}
	for name, o := range map[string]string{"ok": "granted", "busy": "busy", "skip": "skipped", "lost": "lost", "unknown": "unknown"} {
		if outcomes[name] != o {
			t.Errorf("%s done with outcome %q, want %q", name, outcomes[name], o)
		}
	}
}

// At Info, routine events are not logged at all.
func TestInfoLeavesOutRoutine(t *testing.T) {
	var buf syncBuffer
	obs := leaseslog.New(slog.New(slog.NewJSONHandler(&buf, nil)))
	c, err := lease.New(srv.Client(t), lease.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for range 3 {
		if err := c.Do(context.Background(), "quiet", lease.Spec{TTL: time.Second, Deadline: time.Second, Name: "quiet"}, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if recs := buf.records(t); len(recs) != 0 {
		t.Fatalf("%d records at Info for granted calls, want none: %+v", len(recs), recs)
	}
}
