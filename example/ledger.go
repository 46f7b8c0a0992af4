package main

import (
	"errors"
	"fmt"
	"sync"

	"github.com/leasegen/leasegen/runtime/lease"
)

// ErrStale is returned for a write carrying an older fencing token than one
// the ledger has already accepted.
var ErrStale = errors.New("stale fencing token")

// Ledger is a resource that checks fencing tokens atomically with each
// write, as a database would with "UPDATE ... WHERE fence < $token".
type Ledger struct {
	mu      sync.Mutex
	fence   map[string]lease.Token
	values  map[string]int64
	Rejects int
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{fence: map[string]lease.Token{}, values: map[string]int64{}}
}

// Write applies delta to key if tok is newer than every token seen for key.
func (l *Ledger) Write(key string, tok lease.Token, delta int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if tok < l.fence[key] {
		l.Rejects++
		return fmt.Errorf("ledger %s: token %d < %d: %w", key, tok, l.fence[key], ErrStale)
	}
	l.fence[key] = tok
	l.values[key] += delta
	return nil
}
