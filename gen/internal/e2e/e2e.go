// Package e2e holds annotated functions whose generated wrappers (in
// lease_gen.go) the tests call against a real redis-server.
//
//lease:defaults deadline=5s ttl=2s
package e2e

//go:generate go run github.com/leasegen/leasegen/cmd/leasegen

import (
	"context"
	"sync/atomic"

	"github.com/leasegen/leasegen/runtime/lease"
)

// Calls counts entries into the protected functions.
var Calls atomic.Int64

// Account has a lease client field, used by its wrappers.
type Account struct {
	Leases *lease.Client
	Seen   []string // keys seen inside, for injectivity checks
}

// transfer moves money; its token and key are reported back.
//
//lease:lock acct:{from}:{to} fence wait=1s
func (a *Account) transfer(ctx context.Context, from, to string, cents int64) (lease.Token, string, error) {
	Calls.Add(1)
	l, _ := lease.FromContext(ctx)
	tok, _ := lease.TokenFrom(ctx)
	a.Seen = append(a.Seen, l.Key())
	return tok, l.Key(), nil
}

// hold keeps its lease until release is closed.
//
//lease:lock hold:{id}
func (a *Account) hold(ctx context.Context, id int, entered chan<- struct{}, release <-chan struct{}) error {
	Calls.Add(1)
	close(entered)
	<-release
	return nil
}

// Req is a request whose nested fields build keys.
type Req struct {
	Order *Order
}

// Order is part of Req.
type Order struct{ ID int64 }

// process takes the client as a parameter (no receiver).
//
//lease:lock orders:{req.Order.ID} busy=skip
func process(ctx context.Context, req *Req) (int64, error) {
	Calls.Add(1)
	return req.Order.ID * 2, nil
}

// label opts in to empty key values: "" is a valid label.
//
//lease:lock labels:{label} allow-empty
func label(ctx context.Context, c *lease.Client, label string) (string, error) {
	Calls.Add(1)
	l, _ := lease.FromContext(ctx)
	return l.Key(), nil
}

// Store is decorated: Put runs under a lease, Get passes through.
type Store interface {
	//lease:lock store:{key} fence
	Put(ctx context.Context, key string, val string) error
	Get(ctx context.Context, key string) (string, error)
}

// Node is a candidate for the leadership of a shard's job.
type Node struct {
	Leases *lease.Client
	Name   string
	Terms  chan lease.Token // each term's token, as it starts
}

// run runs one term: it reports the term's token and holds leadership
// until its context ends.
//
//lease:leader e2e:shards:{shard} ttl=1s identity=Name
func (n *Node) run(ctx context.Context, shard int) error {
	Calls.Add(1)
	tok, _ := lease.TokenFrom(ctx)
	n.Terms <- tok
	<-ctx.Done()
	return nil
}

// Namer names something; a nil Namer on a key path is a bad key.
type Namer interface{ Name() string }

// Inner is embedded by pointer in Wrapped.
type Inner struct{ ID string }

// Key is promoted to Wrapped through its embedded *Inner.
func (i Inner) Key() string { return i.ID }

// Wrapped reaches its key through values that may be nil.
type Wrapped struct {
	*Inner
	Named Namer
}

// viaIface calls a method of an interface parameter on its key path.
//
//lease:lock e2e:iface:{n.Name()}
func viaIface(ctx context.Context, c *lease.Client, n Namer) error {
	Calls.Add(1)
	return nil
}

// viaEmbedded reaches its key through an embedded pointer and an
// interface field.
//
//lease:lock e2e:embedded:{w.Key()}:{w.Named.Name()}
func viaEmbedded(ctx context.Context, c *lease.Client, w Wrapped) error {
	Calls.Add(1)
	return nil
}
