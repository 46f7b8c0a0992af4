package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/fence"
)

// A holder that lost its lease (a stale stamp) may write between the new
// holder's read of a balance and its write: the ledger must then either
// refuse the stale write or count it in the new holder's sum. A read and
// a separate conditional write lost it: the stale delta was accepted
// (nil) and then overwritten by the new holder's sum from before it. So
// also where the server's default isolation is stricter (a setting of the
// database, the role or the DSN): REPEATABLE READ or SERIALIZABLE failed
// racing Adds with a serialization error instead (adversary round 57).
func TestPGLedgerLosesNoUpdateToAStaleWriter(t *testing.T) {
	base := os.Getenv("LEASETEST_POSTGRES_URL")
	if base == "" {
		base = "postgres://postgres:postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	for _, isolation := range []string{"", "repeatable%20read", "serializable"} {
		name := "default isolation " + isolation
		if isolation == "" {
			name = "the server's default isolation"
		}
		t.Run(name, func(t *testing.T) {
			url := base
			if isolation != "" {
				url += "&default_transaction_isolation=" + isolation
			}
			pgLedgerStaleWriterRace(t, url)
		})
	}
}

func pgLedgerStaleWriterRace(t *testing.T, url string) {
	ctx := context.Background()
	table := fmt.Sprintf("ledger_stale_%d", time.Now().UnixNano())
	l, err := newPGLedger(ctx, url, table)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	old := fence.Stamp{Token: 1, Owner: "old"}
	cur := fence.Stamp{Token: 2, Owner: "new"}
	for trial := range 40 {
		key := fmt.Sprintf("acct:%d", trial)
		var (
			wg      sync.WaitGroup
			oldOK   int64
			oldErrs []error
			curErr  error
		)
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			for range 8 {
				switch err := l.Add(ctx, old, key, 1); {
				case err == nil:
					oldOK++
				case !errors.Is(err, fence.ErrStale):
					oldErrs = append(oldErrs, err)
				}
			}
		}()
		go func() {
			defer wg.Done()
			<-start
			curErr = l.Add(ctx, cur, key, 100)
		}()
		close(start)
		wg.Wait()
		if curErr != nil || len(oldErrs) > 0 {
			t.Fatalf("trial %d: the current holder's Add: %v; the stale holder's errors other than ErrStale: %v", trial, curErr, oldErrs)
		}
		got, err := l.Value(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if want := 100 + oldOK; got != want {
			t.Fatalf("trial %d: balance %d, want %d (the current holder's 100 and the %d stale writes the ledger accepted): an accepted write was lost", trial, got, want, oldOK)
		}
	}
}
