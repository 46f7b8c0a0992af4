package gen

import (
	"fmt"
	"strings"
	"time"

	"github.com/leasegen/leasegen/gen/directive"
	"github.com/leasegen/leasegen/runtime/lease"
	"github.com/leasegen/leasegen/templates"
)

// The lease.Spec a directive stands for, checked as the runtime checks it.

// spec is the lease.Spec of a checked directive. name is the target's
// qualified name (see qualifiedName), the lease's label in observer events.
func spec(d *directive.Directive, name string) templates.Spec {
	return templates.Spec{
		TTL: d.TTL.V, Deadline: d.Deadline.V, Wait: d.Wait.V, MinValidity: d.MinValidity.V, HoldMin: d.HoldMin.V, Keep: d.Keep.V,
		Skip: d.Busy.V == "skip", Fence: d.Fence.Set(), Name: name,
	}
}

// leadSpec is the lease.LeadSpec of a checked //lease:leader directive;
// owner is the Go expression of the candidate's name ("" for the
// runtime's default).
func leadSpec(d *directive.Directive, name, owner string) *templates.LeadSpec {
	return &templates.LeadSpec{TTL: d.TTL.V, MinValidity: d.MinValidity.V, Owner: owner, Name: name}
}

// leaseSpec is the runtime's value of the same spec.
func leaseSpec(d *directive.Directive) lease.Spec {
	s := lease.Spec{TTL: d.TTL.V, Deadline: d.Deadline.V, Wait: d.Wait.V, MinValidity: d.MinValidity.V, HoldMin: d.HoldMin.V, Keep: d.Keep.V, Fence: d.Fence.Set()}
	if d.Busy.V == "skip" {
		s.Busy = lease.BusySkip
	}
	return s
}

// checkSpec refuses at generate time what lease.Client.Do would refuse at
// run time, with the runtime's own reason. It runs after the directive's
// checks passed (those name the offending option more precisely), so one
// problem is reported once.
func (g *pkgGen) checkSpec(d *directive.Directive) bool {
	check := leaseSpec(d).Check
	if d.Name == directive.Leader {
		check = lease.LeadSpec{TTL: d.TTL.V, MinValidity: d.MinValidity.V}.Check
	}
	if err := check(); err != nil {
		g.errorf(d.Slash, "the runtime would refuse this lease: %s", strings.TrimPrefix(err.Error(), "lease: "))
		return false
	}
	return true
}

// defaultReleaseTimeout is the runtime's default release bound
// (lease.WithReleaseTimeout). Do reserves min(it, Deadline/10) of every
// call's budget for the release.
const defaultReleaseTimeout = 250 * time.Millisecond

// waitCap is how long Do waits for a busy lease at most with the default
// release timeout: waiting stops in time to leave the work MinValidity and
// the release its reserve within the deadline.
func waitCap(s lease.Spec) (limit, reserve time.Duration) {
	reserve = min(defaultReleaseTimeout, s.Deadline/10)
	return s.Deadline - s.MinValidity - reserve, reserve
}

// warnWait warns when wait= can never be used in full: the runtime stops
// waiting earlier and reports busy, so the option promises more than it
// gives. It is a warning, not an error: the lease works, only the wait is
// shorter than written. raw is the directive as written, d merged with the
// package defaults.
func (g *pkgGen) warnWait(raw, d *directive.Directive) {
	s := leaseSpec(d)
	limit, reserve := waitCap(s)
	if s.Wait <= 0 || s.Wait <= limit {
		return
	}
	pos, from := raw.Wait.Pos, ""
	if !raw.Wait.Set() {
		pos, from = raw.Slash, " (from //lease:defaults)"
	}
	budget := fmt.Sprintf("deadline %v − min-validity %v − release reserve %v", s.Deadline, s.MinValidity, reserve)
	if limit <= 0 {
		g.errs.warn(pos, fmt.Sprintf("lease: wait %v%s can never be used: %s leaves no time to wait, so one attempt is made and a busy lease is reported at once; raise deadline, lower min-validity, or drop wait", s.Wait, from, budget))
		return
	}
	g.errs.warn(pos, fmt.Sprintf("lease: wait %v%s can never be used in full: waiting stops after %v = %s, so that the work still gets min-validity within the deadline; lower wait to %v or raise deadline", s.Wait, from, limit, budget, limit))
}
