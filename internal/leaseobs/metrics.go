package leaseobs

// The metrics every adapter exports. OTel names use dots; Prometheus names
// are what OTel's Prometheus exporter would make of them (dots to
// underscores, "_seconds" for unit s, "_total" for counters), and so are the
// labels (lease.name → lease_name), so one dashboard serves both.

// Metric describes one exported metric.
type Metric struct {
	OTel  string // OpenTelemetry instrument name
	Prom  string // Prometheus metric name
	Unit  string // UCUM unit for OTel
	Help  string
	Label string // the second label besides lease.name: "lease.outcome", "lease.result" or ""
}

// The attribute (label) keys.
const (
	AttrName    = "lease.name"
	AttrOutcome = "lease.outcome"
	AttrResult  = "lease.result"
	AttrToken   = "lease.fence.token"
	AttrKey     = "lease.key"
	AttrTTL     = "lease.ttl"
	AttrError   = "error.type"
)

// PromLabel is the Prometheus label of an attribute key.
func PromLabel(attr string) string {
	b := []byte(attr)
	for i, c := range b {
		if c == '.' {
			b[i] = '_'
		}
	}
	return string(b)
}

// The metrics.
var (
	AcquireDuration = Metric{"lease.acquire.duration", "lease_acquire_duration_seconds", "s",
		"Time from a protected call's start until its acquire ended (granted and entered, busy, unknown, low validity, refused, or waiting stopped).", AttrOutcome}
	HoldDuration = Metric{"lease.hold.duration", "lease_hold_duration_seconds", "s",
		"Time a lease was held: from entry into the protected function to its release.", AttrOutcome}
	Calls = Metric{"lease.calls", "lease_calls_total", "{call}",
		"Protected calls by outcome.", AttrOutcome}
	Active = Metric{"lease.active", "lease_active", "{lease}",
		"Leases held now (entered, not yet released).", ""}
	Waiting = Metric{"lease.waiting", "lease_waiting", "{call}",
		"Calls waiting now for a busy lease.", ""}
	Renewals = Metric{"lease.renewals", "lease_renewals_total", "{renewal}",
		"Lease renewals by result: renewed, unknown (no reply: not extended), refused, not_owner (the lease was lost).", AttrResult}
	Releases = Metric{"lease.releases", "lease_releases_total", "{release}",
		"Lease releases by result: confirmed, unconfirmed (no reply or refused: the TTL ends the lease).", AttrResult}
	StaleWrites = Metric{"fence.stale_writes", "fence_stale_writes_total", "{write}",
		"Writes a fenced resource rejected because their fencing token was stale.", ""}
	SubscriptionFailures = Metric{"lease.subscription.failures", "lease_subscription_failures_total", "{failure}",
		"Interruptions of a Client's release-notification subscription (waiters re-check until it resumes).", ""}
)

// Buckets are the histogram bucket bounds in seconds: from a local
// round trip (1ms) to a long job's hold (5 minutes).
var Buckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// RenewalResults and ReleaseResults list the results of each counter.
var (
	RenewalResults = []Result{Renewed, RenewUnknown, RenewRefused, NotOwner}
	ReleaseResults = []Result{Confirmed, Unconfirmed}
)
