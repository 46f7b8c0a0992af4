// Package adv74a holds annotated functions whose generated wrappers (in
// lease_gen.go) adversarial tests call against real redis-servers.
//
//lease:defaults deadline=3s ttl=1500ms
package adv74a

//go:generate go run github.com/leasegen/leasegen/cmd/leasegen

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/leasegen/leasegen/runtime/lease"
)

// Calls counts entries into the protected functions.
var Calls atomic.Int64

// Body is what a probe function runs under its lease.
type Body func(ctx context.Context) error

func run(ctx context.Context, body Body) error {
	Calls.Add(1)
	if body == nil {
		return nil
	}
	return body(ctx)
}

func keyOf(ctx context.Context) string {
	l, ok := lease.FromContext(ctx)
	if !ok {
		return "<no lease>"
	}
	return l.Key()
}

// pair reports the key its two string parts build.
//
//lease:lock adv:{x}:{y} allow-empty
func pair(ctx context.Context, c *lease.Client, x, y string) (string, error) {
	Calls.Add(1)
	return keyOf(ctx), nil
}

// triple mixes separators in its literal text.
//
//lease:lock t/{x}|{y}={z} allow-empty
func triple(ctx context.Context, c *lease.Client, x, y, z string) (string, error) {
	Calls.Add(1)
	return keyOf(ctx), nil
}

// resA holds res:{id} until release is closed.
//
//lease:lock res:{id}
func resA(ctx context.Context, c *lease.Client, id string, entered chan<- struct{}, release <-chan struct{}) error {
	Calls.Add(1)
	close(entered)
	<-release
	return nil
}

// resB has the same template as resA.
//
//lease:lock res:{id}
func resB(ctx context.Context, c *lease.Client, id string) (string, error) {
	Calls.Add(1)
	return keyOf(ctx), nil
}

// resInt has the same template with an integer part.
//
//lease:lock res:{n}
func resInt(ctx context.Context, c *lease.Client, n int64) (string, error) {
	Calls.Add(1)
	return keyOf(ctx), nil
}

// Color is a named string type with a String method: the value is used.
type Color string

// String is not what the key uses.
func (c Color) String() string { return "color-" + string(c) }

// Counted counts the calls of its String method.
type Counted struct {
	N *atomic.Int64
	V string
}

// String counts and returns V.
func (c Counted) String() string {
	c.N.Add(1)
	return c.V
}

// TM is a TextMarshaler that may fail.
type TM struct {
	V   string
	Err error
}

// MarshalText returns V or Err.
func (t TM) MarshalText() ([]byte, error) {
	if t.Err != nil {
		return nil, t.Err
	}
	return []byte(t.V), nil
}

// ErrMarshal is returned by a failing TM.
var ErrMarshal = errors.New("adv74a: marshal failed")

// kinds takes one part of many kinds.
//
//lease:lock kinds:{col}:{cnt}:{tm}:{u}:{b}:{i8}:{i}
func kinds(ctx context.Context, c *lease.Client, col Color, cnt Counted, tm TM, u uint64, b bool, i8 int8, i int64) (string, error) {
	Calls.Add(1)
	return keyOf(ctx), nil
}

// pstr takes a pointer to a string as its key part.
//
//lease:lock pstr:{p}
func pstr(ctx context.Context, c *lease.Client, p *string) (string, error) {
	Calls.Add(1)
	return keyOf(ctx), nil
}

// optTTL probes ttl.
//
//lease:lock opt:ttl:{id} ttl=900ms deadline=2s
func optTTL(ctx context.Context, c *lease.Client, id string, body Body) error {
	return run(ctx, body)
}

// optDefault takes ttl and deadline from the package defaults.
//
//lease:lock opt:def:{id}
func optDefault(ctx context.Context, c *lease.Client, id string, body Body) error {
	return run(ctx, body)
}

// optDeadline probes deadline.
//
//lease:lock opt:deadline:{id} ttl=1s deadline=700ms min-validity=100ms
func optDeadline(ctx context.Context, c *lease.Client, id string, body Body) error {
	return run(ctx, body)
}

// optWait probes wait.
//
//lease:lock opt:wait:{id} wait=700ms
func optWait(ctx context.Context, c *lease.Client, id string, body Body) error {
	return run(ctx, body)
}

// optFence probes fence.
//
//lease:lock opt:fence:{id} fence
func optFence(ctx context.Context, c *lease.Client, id string, body Body) (lease.Token, error) {
	tok, _ := lease.TokenFrom(ctx)
	return tok, run(ctx, body)
}

// optHold probes hold-min.
//
//lease:lock opt:hold:{id} hold-min=800ms
func optHold(ctx context.Context, c *lease.Client, id string, body Body) error {
	return run(ctx, body)
}

// optKeep probes keep.
//
//lease:lock opt:keep:{id} keep=2500ms fence
func optKeep(ctx context.Context, c *lease.Client, id string, body Body) (lease.Token, error) {
	tok, _ := lease.TokenFrom(ctx)
	return tok, run(ctx, body)
}

// optSkip probes busy=skip; its results are non-zero when it runs.
//
//lease:lock opt:skip:{id} busy=skip
func optSkip(ctx context.Context, c *lease.Client, id string, body Body) (int, string, error) {
	return 7, "ran", run(ctx, body)
}

// optName probes name=.
//
//lease:lock opt:name:{id} name=CustomName
func optName(ctx context.Context, c *lease.Client, id string, body Body) error {
	return run(ctx, body)
}

// Svc has two lease clients; client= picks B.
type Svc struct {
	A, B *lease.Client
}

// viaB must use the field B.
//
//lease:lock svc:{id} client=B
func (s Svc) viaB(ctx context.Context, id string, body Body) error {
	return run(ctx, body)
}

// Global is the package-level client of viaGlobal.
var Global *lease.Client

// viaGlobal uses the package variable.
//
//lease:lock glob:{id} client=Global
func viaGlobal(ctx context.Context, id string, body Body) error {
	return run(ctx, body)
}

// added has no client: the wrapper adds a parameter.
//
//lease:lock added:{id}
func added(ctx context.Context, id string, body Body) error {
	return run(ctx, body)
}

// multi returns named results, also alongside an error.
//
//lease:lock multi:{id}
func multi(ctx context.Context, c *lease.Client, id string, fail error) (n int, s string, m map[string]int, err error) {
	Calls.Add(1)
	return 42, "answer", map[string]int{"k": 1}, fail
}

// panicky panics under its lease.
//
//lease:lock panic:{id}
func panicky(ctx context.Context, c *lease.Client, id string) error {
	Calls.Add(1)
	panic("adv74a boom")
}

// fault is called through a fault proxy.
//
//lease:lock fault:{id} ttl=600ms deadline=1200ms
func fault(ctx context.Context, c *lease.Client, id string, body Body) error {
	return run(ctx, body)
}

// generic echoes its value under the lease.
//
//lease:lock gen:{id}
func generic[T any](ctx context.Context, c *lease.Client, id string, v T) (T, error) {
	Calls.Add(1)
	return v, nil
}

// Node is a leader candidate.
type Node struct {
	Leases *lease.Client
	Name   string
}

// lead runs one term.
//
//lease:leader adv74a:leader:{shard} ttl=600ms identity=Name
func (n *Node) lead(ctx context.Context, shard int, body Body) error {
	return run(ctx, body)
}

// slowMulti ignores its context and sleeps past its deadline, then
// returns results.
//
//lease:lock slow:{id} ttl=2s deadline=400ms min-validity=100ms
func slowMulti(ctx context.Context, c *lease.Client, id string, body Body) (n int, s []string, err error) {
	err = run(ctx, body)
	return 99, []string{"late"}, err
}

// resBody holds res:{id} unfenced and runs body.
//
//lease:lock res:{id}
func resBody(ctx context.Context, c *lease.Client, id string, body Body) error {
	return run(ctx, body)
}

// resFenced shares res:{id} with a fence.
//
//lease:lock res:{id} fence wait=200ms
func resFenced(ctx context.Context, c *lease.Client, id string, body Body) (lease.Token, error) {
	tok, _ := lease.TokenFrom(ctx)
	return tok, run(ctx, body)
}

// skipFault skips when busy; it is called through a fault proxy.
//
//lease:lock skipf:{id} ttl=600ms deadline=1200ms busy=skip
func skipFault(ctx context.Context, c *lease.Client, id string, body Body) (int, error) {
	return 1, run(ctx, body)
}

// keepPanic keeps its lease and panics when asked.
//
//lease:lock keeppanic:{id} keep=2s
func keepPanic(ctx context.Context, c *lease.Client, id string, boom bool) error {
	Calls.Add(1)
	if boom {
		panic("adv74a keep boom")
	}
	return nil
}

// Store is decorated: Put runs under a fenced lease that waits.
type Store interface {
	//lease:lock store:{key} fence wait=300ms
	Put(ctx context.Context, key string, body Body) (lease.Token, error)
	Get(ctx context.Context, key string) (string, error)
}

// keepPlain keeps an unfenced lease on kk:{id}.
//
//lease:lock kk:{id} keep=2s
func keepPlain(ctx context.Context, c *lease.Client, id string, body Body) error {
	return run(ctx, body)
}

// keepFenced is a fenced call on the same key.
//
//lease:lock kk:{id} fence
func keepFenced(ctx context.Context, c *lease.Client, id string, body Body) (lease.Token, bool, error) {
	tok, ok := lease.TokenFrom(ctx)
	return tok, ok, run(ctx, body)
}

// keepFencedKeep keeps a fenced lease on kf:{id}.
//
//lease:lock kf:{id} keep=2s fence
func keepFencedKeep(ctx context.Context, c *lease.Client, id string, body Body) (lease.Token, error) {
	tok, _ := lease.TokenFrom(ctx)
	return tok, run(ctx, body)
}

// keepFencedPlain is an unfenced call on kf:{id}; the test's body looks
// for a token.
//
//lease:lock kf:{id}
func keepFencedPlain(ctx context.Context, c *lease.Client, id string, body Body) error {
	return run(ctx, body)
}
