// Package lease is a stub of the runtime for the analyzer's tests.
package lease

import (
	"context"
	"errors"
	"time"
)

type Token uint64

type BusyPolicy uint8

const (
	BusyError BusyPolicy = iota
	BusySkip
)

type Spec struct {
	TTL, Deadline, Wait, MinValidity, HoldMin, Keep time.Duration
	Busy                                            BusyPolicy
	Fence                                           bool
	Name                                            string
}

type LeadSpec struct {
	TTL, MinValidity, Backoff time.Duration
	Owner, Name               string
}

type Client struct{}

func (c *Client) Do(ctx context.Context, key string, spec Spec, fn func(ctx context.Context) error) error {
	return fn(ctx)
}

func (c *Client) Lead(ctx context.Context, key string, spec LeadSpec, fn func(ctx context.Context) error) error {
	return fn(ctx)
}

type Lease struct{}

func (l *Lease) Token() Token { return 0 }

var ErrBadKey = errors.New("bad key")

func KeyPart(s string) string                        { return s }
func TokenFrom(ctx context.Context) (Token, bool)    { return 0, false }
func FencedFrom(ctx context.Context) (*Lease, bool)  { return nil, false }
func FromContext(ctx context.Context) (*Lease, bool) { return nil, false }
