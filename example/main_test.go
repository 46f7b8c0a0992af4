package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasegen/leasegen/runtime/leasetest"
)

// The example checks its own story (one charge, skips, a rejected late
// write, a cut-off export, one settlement leader at a time) and fails on
// any deviation; run it against a
// real redis-server and against the embedded default.
func TestExampleOnRealRedis(t *testing.T) {
	srv := leasetest.StartRedis(t)
	if err := run(context.Background(), config{redisURL: "redis://" + srv.Addr() + "/0"}); err != nil {
		t.Fatal(err)
	}
	// The run deleted its keys, fence counters included.
	if n := srv.Client(t).DBSize(context.Background()).Val(); n != 0 {
		keys := srv.Client(t).Keys(context.Background(), "*").Val()
		t.Fatalf("%d keys left in Redis after the run: %q", n, keys)
	}
}

func TestExampleOnEmbeddedRedis(t *testing.T) {
	if err := run(context.Background(), config{}); err != nil {
		t.Fatal(err)
	}
}

// cleanup deletes the keys under the prefix and no others, also when the
// prefix holds glob characters.
func TestCleanupDeletesOnlyThePrefix(t *testing.T) {
	ctx := context.Background()
	rdb := leasetest.StartRedis(t).Client(t)
	prefix := `run[1]*?\:`
	var mine []string
	for i := range 1200 { // more than one SCAN batch and one UNLINK batch
		mine = append(mine, fmt.Sprintf("%s{orders:%d}:f", prefix, i))
	}
	others := []string{"run1:{orders:1}:f", `run[1]x?\:{a}:l`, "lease:{orders:1}:l", "other"}
	for _, k := range append(append([]string{}, mine...), others...) {
		if err := rdb.Set(ctx, k, "1", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	n, err := cleanup(ctx, rdb, prefix)
	if err != nil || n != len(mine) {
		t.Fatalf("cleanup = %d, %v; want %d deleted", n, err, len(mine))
	}
	left := rdb.Keys(ctx, "*").Val()
	sort.Strings(left)
	sort.Strings(others)
	if !slices.Equal(left, others) {
		t.Fatalf("keys left: %q, want %q", left, others)
	}
}

func TestExampleWithPostgresLedger(t *testing.T) {
	srv := leasetest.StartRedis(t)
	url := os.Getenv("LEASETEST_POSTGRES_URL")
	if url == "" {
		url = "postgres://postgres:postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	if err := run(context.Background(), config{redisURL: "redis://" + srv.Addr(), dbURL: url}); err != nil {
		t.Fatal(err)
	}
}

// With -metrics, the run serves its lease metrics over HTTP while it
// lasts: a scrape at its end counts the story's calls by outcome.
func TestExampleServesMetrics(t *testing.T) {
	srv := leasetest.StartRedis(t)
	var scraped map[string]float64
	cfg := config{redisURL: "redis://" + srv.Addr(), metrics: "127.0.0.1:0", beforeStop: func(url string) error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
			return fmt.Errorf("Content-Type %q", ct)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		scraped, err = sumSeries(string(body))
		return err
	}}
	if err := run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	for series, want := range map[string]float64{
		`lease_calls_total{lease_outcome="lost"}`:                 1,  // node A
		`lease_calls_total{lease_outcome="deadline"}`:             1,  // the export
		`lease_calls_total{lease_outcome="skipped"}`:              2,  // two settlement nodes
		`lease_calls_total{lease_outcome="granted"}`:              10, // 5 charges, 1 settlement, node B, 3 leader terms
		`lease_calls_total{lease_outcome="unknown"}`:              0,
		`fence_stale_writes_total{}`:                              1,
		`lease_active{}`:                                          0,
		`lease_waiting{}`:                                         0,
		`lease_releases_total{lease_result="confirmed"}`:          11,
		`lease_hold_duration_seconds_count{lease_outcome="lost"}`: 1,
	} {
		if got, ok := scraped[series]; !ok || got != want {
			t.Errorf("%s = %v (present: %v), want %v", series, got, ok, want)
		}
	}
}

// sumSeries parses a Prometheus text exposition and sums each metric's
// samples over lease_name (which the generator sets per function), keyed
// as name{other labels}.
func sumSeries(text string) (map[string]float64, error) {
	sums := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("malformed sample %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("malformed sample %q: %v", line, err)
		}
		name, labels, _ := strings.Cut(line[:i], "{")
		var keep []string
		for _, l := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
			if l != "" && !strings.HasPrefix(l, "lease_name=") {
				keep = append(keep, l)
			}
		}
		sums[name+"{"+strings.Join(keep, ",")+"}"] += v
	}
	return sums, nil
}
