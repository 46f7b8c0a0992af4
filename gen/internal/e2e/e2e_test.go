package e2e

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/runtime/leasetest"
)

var srv *leasetest.Server

func TestMain(m *testing.M) { os.Exit(leasetest.RunTests(m, &srv)) }

func client(t *testing.T) *lease.Client {
	t.Helper()
	c, err := lease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestWrapperPassesResultsTokenAndKey(t *testing.T) {
	a := &Account{Leases: client(t)}
	t1, k1, err := a.Transfer(context.Background(), "alice", "bob", 100)
	if err != nil {
		t.Fatal(err)
	}
	t2, _, err := a.Transfer(context.Background(), "alice", "bob", 100)
	if err != nil {
		t.Fatal(err)
	}
	if k1 != "acct:alice:bob" || t1 == 0 || t2 <= t1 {
		t.Fatalf("key %q tokens %d, %d; want acct:alice:bob and increasing tokens", k1, t1, t2)
	}
}

// Values that would collide under naive concatenation give different keys.
func TestKeysAreInjective(t *testing.T) {
	a := &Account{Leases: client(t)}
	_, k1, err1 := a.Transfer(context.Background(), "1:2", "3", 1)
	_, k2, err2 := a.Transfer(context.Background(), "1", "2:3", 1)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if k1 == k2 {
		t.Fatalf("both calls used key %q", k1)
	}
}

func TestWrapperBusyAndSkip(t *testing.T) {
	c := client(t)
	a := &Account{Leases: c}
	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- a.Hold(context.Background(), 7, entered, release) }()
	<-entered
	before := Calls.Load()
	err := a.Hold(context.Background(), 7, make(chan struct{}), release)
	if !errors.Is(err, lease.ErrBusy) || Calls.Load() != before {
		t.Fatalf("second Hold = %v (calls %d -> %d); want ErrBusy and no call", err, before, Calls.Load())
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// busy=skip returns zero results and nil while another holds the key.
	ctx := context.Background()
	errc := make(chan error, 1)
	held := make(chan struct{})
	go func() {
		errc <- c.Do(ctx, "orders:9", lease.Spec{Deadline: 5 * time.Second}, func(context.Context) error {
			close(held)
			time.Sleep(300 * time.Millisecond)
			return nil
		})
	}()
	<-held
	n, err := Process(ctx, c, &Req{Order: &Order{ID: 9}})
	if err != nil || n != 0 {
		t.Fatalf("Process while busy = %d, %v; want 0, nil (skipped)", n, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if n, err := Process(ctx, c, &Req{Order: &Order{ID: 9}}); err != nil || n != 18 {
		t.Fatalf("Process = %d, %v; want 18, nil", n, err)
	}
}

func TestNilKeyPathIsBadKey(t *testing.T) {
	c := client(t)
	before := Calls.Load()
	for _, r := range []*Req{nil, {}} {
		if _, err := Process(context.Background(), c, r); !errors.Is(err, lease.ErrBadKey) {
			t.Fatalf("Process(%v) = %v, want ErrBadKey", r, err)
		}
	}
	if Calls.Load() != before {
		t.Fatal("function called with a nil key path")
	}
}

// A busy=skip wrapper returns zero results and nil both when it ran and
// when it skipped; lease.WithSkipReport tells them apart, and the observer
// sees EventSkipped, as the wrapper's doc says.
func TestSkipReport(t *testing.T) {
	rec := &leasetest.Recorder{}
	c, err := lease.New(srv.Client(t), lease.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	held, release := make(chan struct{}), make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- c.Do(context.Background(), "orders:11", lease.Spec{Deadline: 5 * time.Second}, func(context.Context) error {
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	before := Calls.Load()
	ctx, skipped := lease.WithSkipReport(context.Background())
	n, err := Process(ctx, c, &Req{Order: &Order{ID: 11}})
	if err != nil || n != 0 || !skipped() || Calls.Load() != before {
		t.Fatalf("Process while held = %d, %v, skipped %v, entered %v; want 0, nil, skipped, not entered", n, err, skipped(), Calls.Load() != before)
	}
	if got := rec.Count(lease.EventSkipped); got != 1 {
		t.Fatalf("%d EventSkipped, want 1", got)
	}
	for _, e := range rec.Events() {
		if e.Kind == lease.EventSkipped && (e.Name != "e2e.process" || e.Key != "orders:11") {
			t.Fatalf("EventSkipped names %q key %q; want e2e.process, orders:11", e.Name, e.Key)
		}
	}
	close(release)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}

	ctx, skipped = lease.WithSkipReport(context.Background())
	if n, err := Process(ctx, c, &Req{Order: &Order{ID: 11}}); err != nil || n != 22 || skipped() {
		t.Fatalf("Process when free = %d, %v, skipped %v; want 22, nil, not skipped", n, err, skipped())
	}
	if got := rec.Count(lease.EventSkipped); got != 1 {
		t.Fatalf("%d EventSkipped after a call that ran, want still 1", got)
	}
}

// An empty key value is a bad key (one lease would serve every empty id),
// unless the directive says allow-empty.
func TestEmptyKeyPartIsBadKey(t *testing.T) {
	c := client(t)
	a := &Account{Leases: c}
	before := Calls.Load()
	if _, _, err := a.Transfer(context.Background(), "", "bob", 1); !errors.Is(err, lease.ErrBadKey) {
		t.Fatalf("Transfer from \"\" = %v, want ErrBadKey", err)
	}
	if Calls.Load() != before {
		t.Fatal("function called with an empty key part")
	}
	key, err := Label(context.Background(), c, "")
	if err != nil || key != "labels:" {
		t.Fatalf("Label(\"\") = %q, %v; want the key labels: (allow-empty)", key, err)
	}
}

type mapStore struct{ m map[string]string }

func (s *mapStore) Put(ctx context.Context, key, val string) error {
	if _, ok := lease.TokenFrom(ctx); !ok {
		return errors.New("Put called without a fenced lease")
	}
	s.m[key] = val
	return nil
}

func (s *mapStore) Get(ctx context.Context, key string) (string, error) {
	if _, ok := lease.FromContext(ctx); ok {
		return "", errors.New("Get is not annotated but ran under a lease")
	}
	return s.m[key], nil
}

func TestDecorator(t *testing.T) {
	s := NewLeasedStore(&mapStore{m: map[string]string{}}, client(t))
	if err := s.Put(context.Background(), "k", "v"); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get(context.Background(), "k"); err != nil || v != "v" {
		t.Fatalf("Get = %q, %v", v, err)
	}
}

// The generated leader wrapper campaigns until ctx ends: one node leads
// the shard at a time, its owner is stored, a graceful stop hands over
// with a greater term, and the wrapper returns nil when stopped.
func TestLeaderWrapper(t *testing.T) {
	a := &Node{Leases: client(t), Name: "node-a", Terms: make(chan lease.Token, 4)}
	b := &Node{Leases: client(t), Name: "node-b", Terms: make(chan lease.Token, 4)}
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopB()
	doneA, doneB := make(chan error, 1), make(chan error, 1)
	go func() { doneA <- a.RunAsLeader(ctxA, 7) }()
	var ta lease.Token
	select {
	case ta = <-a.Terms:
	case <-time.After(5 * time.Second):
		t.Fatal("node a did not lead")
	}
	go func() { doneB <- b.RunAsLeader(ctxB, 7) }()
	l, err := a.Leases.Leader(context.Background(), "e2e:shards:7")
	if err != nil || l.Owner != "node-a" || l.Term != ta {
		t.Fatalf("Leader = %+v, %v; want node-a with term %d", l, err, ta)
	}
	time.Sleep(100 * time.Millisecond) // b waits in the queue
	select {
	case tb := <-b.Terms:
		t.Fatalf("node b led (term %d) while node a leads", tb)
	default:
	}
	stopA()
	if err := <-doneA; err != nil {
		t.Fatalf("a's RunAsLeader after its ctx ended = %v, want nil", err)
	}
	select {
	case tb := <-b.Terms:
		if tb <= ta {
			t.Fatalf("b's term %d is not greater than a's %d", tb, ta)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("node b did not take over after a stopped")
	}
	if l, _ := b.Leases.Leader(context.Background(), "e2e:shards:7"); l.Owner != "node-b" {
		t.Fatalf("Leader = %+v, want node-b", l)
	}
	stopB()
	if err := <-doneB; err != nil {
		t.Fatalf("b's RunAsLeader = %v, want nil", err)
	}
}

type name string

func (n name) Name() string { return string(n) }

// Adversary round 22: a nil interface or embedded pointer on a key path
// is a bad key, as a nil pointer is; the wrappers panicked.
func TestNilInterfaceOrEmbeddedOnKeyPathIsBadKey(t *testing.T) {
	c := client(t)
	before := Calls.Load()
	call := func(what string, f func() error) {
		t.Helper()
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s: the wrapper panicked: %v", what, r)
			}
		}()
		if err := f(); !errors.Is(err, lease.ErrBadKey) {
			t.Errorf("%s = %v, want ErrBadKey", what, err)
		}
	}
	call("ViaIface(nil)", func() error { return ViaIface(context.Background(), c, nil) })
	call("ViaEmbedded(no Inner)", func() error { return ViaEmbedded(context.Background(), c, Wrapped{Named: name("x")}) })
	call("ViaEmbedded(no Named)", func() error { return ViaEmbedded(context.Background(), c, Wrapped{Inner: &Inner{ID: "1"}}) })
	if Calls.Load() != before {
		t.Fatal("function called with a nil key path")
	}
	if err := ViaEmbedded(context.Background(), c, Wrapped{Inner: &Inner{ID: "1"}, Named: name("x")}); err != nil {
		t.Fatal(err)
	}
}
