package leaseobs

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/leasegen/leasegen/runtime/lease"
)

// The text exposition is read by Prometheus, which rejects a scrape whose
// label values are not UTF-8: one Spec.Name with a stray byte would make
// every metric of the process unreadable. Text labels such a name as
// leaseprom does (invalid bytes as U+FFFD), so the two stay identical.
// Before, the raw bytes were written.
func TestAdversary31c_TextNonUTF8NameStaysUTF8(t *testing.T) {
	var tx Text
	ctx := tx.StartCall(context.Background(), "k", lease.Spec{Name: "job-\xff"})
	now := time.Now()
	tx.Observe(lease.Event{Kind: lease.EventAcquired, Ctx: ctx, Name: "job-\xff", Key: "k", Start: now})
	tx.Observe(lease.Event{Kind: lease.EventDone, Ctx: ctx, Name: "job-\xff", Key: "k", Start: now})
	var b strings.Builder
	if err := tx.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !utf8.ValidString(out) {
		t.Errorf("the exposition is not UTF-8: %q", out)
	}
	if !strings.Contains(out, `lease_calls_total{lease_name="job-`+"\uFFFD"+`",lease_outcome="granted"} 1`) {
		t.Errorf("no granted call counted under lease_name=\"job-\\uFFFD\":\n%s", out)
	}
}
