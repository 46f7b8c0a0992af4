// Package fence makes resources reject late writes from stale lease
// holders. A lease cannot stop a paused holder from writing after its lease
// ended; only the resource can, by comparing the writer's fencing token with
// the newest it has accepted, atomically with the write.
//
// A write carries a Stamp: the lease's token and owner identity. It is
// accepted when its token is greater than the stored one, or equal and from
// the same owner (one holder may write several times under one grant); it
// is refused with ErrStale otherwise, writes nothing, and is reported to the
// lease's observer.
//
// Backends: Memory (examples and tests), Table (SQL, PostgreSQL syntax, via
// database/sql with SQL or pgx with fencepgx) and Redis (one script per
// write, Cluster-safe: one key per record).
package fence

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasegen/leasegen/runtime/lease"
)

// ErrStale is returned for a write whose stamp is older than the
// resource's. Nothing was written.
var ErrStale = errors.New("fence: stale fencing token")

// ErrNoLease is returned by From when ctx holds no fenced lease.
var ErrNoLease = errors.New("fence: no fenced lease in the context (use the fence option)")

// Stamp identifies the grant a write is made under.
type Stamp struct {
	Token lease.Token
	Owner string

	lease *lease.Lease // for reporting rejections; nil for hand-made stamps
}

// From returns the stamp of the innermost fenced lease in ctx.
//
// Tokens are ordered per lease key: with fenced leases nested on
// different keys, From returns the inner lease's stamp, which says nothing
// about the outer key's later holders (a late holder of the outer key
// that takes an inner lease gets a token above theirs). Write the outer
// key's resource with FromKey(ctx, outerKey), or a stamp taken before the
// nested call.
func From(ctx context.Context) (Stamp, error) {
	l, ok := lease.FencedFrom(ctx)
	if !ok {
		return Stamp{}, ErrNoLease
	}
	return Stamp{Token: l.Token(), Owner: l.Owner(), lease: l}, nil
}

// FromKey returns the stamp of the innermost fenced lease in ctx on key
// (the key passed to Do): the one whose token the resource key protects
// must be checked against, even inside a nested fenced lease on another
// key.
func FromKey(ctx context.Context, key string) (Stamp, error) {
	l, ok := lease.FencedFromKey(ctx, key)
	if !ok {
		return Stamp{}, fmt.Errorf("fence: no fenced lease on %q in the context: %w", key, ErrNoLease)
	}
	return Stamp{Token: l.Token(), Owner: l.Owner(), lease: l}, nil
}

// Admits reports whether a write stamped s may replace state stamped cur.
func (s Stamp) Admits(cur Stamp) bool {
	return s.Token > cur.Token || (s.Token == cur.Token && s.Owner == cur.Owner)
}

// stale builds the ErrStale error for a refused write and reports it.
func (s Stamp) stale(resource string, cur Stamp) error {
	return s.report(s.staleErr(resource, cur))
}

// staleErr builds the ErrStale error for a refused write, unreported.
func (s Stamp) staleErr(resource string, cur Stamp) error {
	if cur.Token == s.Token {
		return fmt.Errorf("%s: token %d was granted to another owner: %w", resource, s.Token, ErrStale)
	}
	return fmt.Errorf("%s: token %d is older than the accepted %d: %w", resource, s.Token, cur.Token, ErrStale)
}

// staleSince builds the ErrStale error for a write a row's stamp refused
// when that stamp can no longer be read (what says why), and reports it.
func (s Stamp) staleSince(resource, what string) error {
	return s.report(fmt.Errorf("%s: token %d was refused by the row's stamp at the write; %s: %w", resource, s.Token, what, ErrStale))
}

// report tells the lease's observer of a refused write (err) and returns it.
func (s Stamp) report(err error) error {
	if s.lease != nil {
		s.lease.ReportStaleWrite(err)
	}
	return err
}

func (s Stamp) check() error {
	if s.Token == 0 {
		return errors.New("fence: zero token: the write is not made under a fenced lease")
	}
	return nil
}

func tokenOf(v int64) lease.Token { return lease.Token(uint64(v)) }
