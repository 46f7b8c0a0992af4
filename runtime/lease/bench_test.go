package lease_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasegen/leasegen/runtime/lease"
)

func benchClient(b *testing.B) (*lease.Client, *redis.Client) {
	b.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr(), ContextTimeoutEnabled: true})
	c, err := lease.New(rdb)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(); rdb.Close() })
	return c, rdb
}

func nop(context.Context) error { return nil }

// BenchmarkDo is one uncontended protected call: acquire, enter, release.
func BenchmarkDo(b *testing.B) {
	c, _ := benchClient(b)
	s := lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Do(ctx, "bench:do", s, nop); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDoKept is a loop of calls on one key whose lease the Client
// keeps between them (Spec.Keep): after the first, no round trip.
func BenchmarkDoKept(b *testing.B) {
	c, _ := benchClient(b)
	s := lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Keep: time.Second, Fence: true}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Do(ctx, "bench:kept", s, nop); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDoFenced adds fencing-token minting to BenchmarkDo.
func BenchmarkDoFenced(b *testing.B) {
	c, _ := benchClient(b)
	s := lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Fence: true}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Do(ctx, "bench:fenced", s, nop); err != nil {
			b.Fatal(err)
		}
	}
}

var rawRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// BenchmarkRawSetNXEvalDel is the floor: SET NX PX with a new random
// identity (as any lock must mint, and cmd/leasebench's raw lock does),
// then a compare-delete script by EVALSHA (two round trips, no waiting,
// renewal or tokens).
func BenchmarkRawSetNXEvalDel(b *testing.B) {
	_, rdb := benchClient(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := rawLock(ctx, rdb, "bench:raw"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDoVsRaw is the uncontended ratio in one benchmark: each
// iteration runs the raw floor, lease.Do, a fenced lease.Do and a fenced
// lease.Do that may wait (a generated wrapper's shape) once each, in a
// new random order, and the medians are reported as ratios to the
// floor's (do/raw, fenced/raw, wrapper/raw). Benchmarks run one after
// another do not separate on a shared machine, whose speed drifts by more
// than their difference; interleaved, the drift falls on all four alike.
// ns/op is the time of the four. Compare runs with benchstat:
//
//	go test ./runtime/lease -run '^$' -bench DoVsRaw -count 8 | benchstat -
func BenchmarkDoVsRaw(b *testing.B) {
	c, rdb := benchClient(b)
	ctx := context.Background()
	s, fs, ws := uncontendedSpecs()
	runs := []func() error{
		func() error { return rawLock(ctx, rdb, "bench:vs:raw") },
		func() error { return c.Do(ctx, "bench:vs:do", s, nop) },
		func() error { return c.Do(ctx, "bench:vs:fenced", fs, nop) },
		func() error { return c.Do(ctx, "bench:vs:wrapper", ws, nop) },
	}
	interleave(b, runs, "do/raw", "fenced/raw", "wrapper/raw")
}

// interleave runs runs once each per iteration, in a new random order,
// and reports the median of each after the first as a ratio to the
// first's (names[i] for runs[i+1]). It returns the medians.
func interleave(b *testing.B, runs []func() error, names ...string) []time.Duration {
	for _, run := range runs { // warm: connections, scripts
		if err := run(); err != nil {
			b.Fatal(err)
		}
	}
	took := make([][]time.Duration, len(runs))
	order := make([]int, len(runs))
	for i := range order {
		order[i] = i
	}
	for b.Loop() {
		mrand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			start := time.Now()
			if err := runs[i](); err != nil {
				b.Fatal(err)
			}
			took[i] = append(took[i], time.Since(start))
		}
	}
	medians := make([]time.Duration, len(runs))
	for i := range took {
		medians[i] = median(took[i])
	}
	for i, name := range names {
		b.ReportMetric(float64(medians[i+1])/float64(medians[0]), name)
	}
	return medians
}

// BenchmarkUncontendedGap splits lease.Do's uncontended gap to the raw
// floor, in one run, into what the server does and what the client does.
// Each iteration runs, in a new random order:
//
//   - raw: the floor (SET NX PX, then a compare-delete script with one key
//     and one argument);
//   - args: the same, with the compare-delete sent the release's 6 keys
//     and 7 arguments;
//   - commands: that, with the commands a release with nobody queued adds
//     (the tombstone's SET, the queue's head);
//   - script: SET NX PX and the runtime's own release script, sent by
//     go-redis as any script is (what the server does for a lease.Do);
//   - do: lease.Do.
//
// The medians are reported as ratios to the floor's; do/script is what
// the client side costs beyond the server's work.
//
//	go test ./runtime/lease -run '^$' -bench UncontendedGap -benchtime 2000x -count 6
func BenchmarkUncontendedGap(b *testing.B) {
	c, rdb := benchClient(b)
	ctx := context.Background()
	s, _, _ := uncontendedSpecs()
	runs := []func() error{
		func() error { return rawLock(ctx, rdb, "bench:gap:raw") },
		func() error { return gapLock(ctx, rdb, "bench:gap:args", gapArgs) },
		func() error { return gapLock(ctx, rdb, "bench:gap:cmds", gapCommands) },
		func() error { return gapLock(ctx, rdb, "bench:gap:script", lease.ReleaseScript) },
		func() error { return c.Do(ctx, "bench:gap:do", s, nop) },
	}
	m := interleave(b, runs, "args/raw", "commands/raw", "script/raw", "do/raw")
	b.ReportMetric(float64(m[4])/float64(m[3]), "do/script")
}

// gapArgs is the floor's compare-delete with a release's arguments;
// gapCommands adds the commands of a release with nobody queued.
var (
	gapArgs = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] .. ':0' then return 0 end
redis.call('DEL', KEYS[1])
return 1`)
	gapCommands = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] .. ':0' then return 0 end
redis.call('SET', KEYS[3], ARGV[7], 'PX', ARGV[4])
redis.call('ZRANGE', KEYS[5], 0, 0)
redis.call('DEL', KEYS[1])
return 1`)
)

// gapLock is SET NX PX, then release run with a lease.Do release's keys
// and arguments.
func gapLock(ctx context.Context, rdb *redis.Client, key string, release *redis.Script) error {
	var id [16]byte
	_, _ = rand.Read(id[:])
	v := hex.EncodeToString(id[:])
	k := "{" + key + "}"
	ok, err := rdb.SetNX(ctx, k, v+":0", 10*time.Second).Result()
	if err != nil || !ok {
		return fmt.Errorf("SET NX: %v %v", ok, err)
	}
	keys := []string{k, k + ":ch", k + ":r:" + v, k + ":f", k + ":q", k + ":qx"}
	n, err := release.Run(ctx, rdb, keys, v, "0", "PUBLISH", "5000", "60000", "", "1").Int64()
	if err == nil && n != 1 {
		err = fmt.Errorf("release answered %d", n)
	}
	return err
}

// uncontendedSpecs are the shapes compared with the raw floor: a plain
// lease, a fenced one, and a fenced one that may wait (a generated
// wrapper's).
func uncontendedSpecs() (plain, fenced, waiting lease.Spec) {
	plain = lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute}
	fenced = plain
	fenced.Fence = true
	waiting = fenced
	waiting.Wait = 30 * time.Second
	return plain, fenced, waiting
}

func median(d []time.Duration) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}

// rawLock is one cycle of the raw floor.
func rawLock(ctx context.Context, rdb *redis.Client, key string) error {
	var id [16]byte
	_, _ = rand.Read(id[:])
	v := hex.EncodeToString(id[:])
	ok, err := rdb.SetNX(ctx, key, v, 10*time.Second).Result()
	if err != nil || !ok {
		return fmt.Errorf("raw SET NX: %v %v", ok, err)
	}
	return rawRelease.Run(ctx, rdb, []string{key}, v).Err()
}

// Allocations are counted, not timed: an uncontended Do may allocate at
// most 10 more objects than the raw floor (issue #15), fenced or not, and
// with a wait (the shape of a generated wrapper: the acquire script and a
// queue member) too. Counted on the same go-redis client in one run, so
// that go-redis's own allocations (connection checks, replies) cancel out.
func TestDoAllocatesAtMostTenMoreThanARawLock(t *testing.T) {
	rdb := shared.Client(t)
	c, err := lease.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	s, fs, ws := uncontendedSpecs()
	key := uniqueKey(t)
	runs := map[string]func(){
		"raw":   func() { must(t, rawLock(ctx, rdb, key+":raw")) },
		"Do":    func() { must(t, c.Do(ctx, key, s, nop)) },
		"fence": func() { must(t, c.Do(ctx, key+":f", fs, nop)) },
		"wait":  func() { must(t, c.Do(ctx, key+":w", ws, nop)) },
	}
	allocs := map[string]float64{}
	for _, name := range []string{"raw", "Do", "fence", "wait"} {
		runs[name]() // warm: connections, scripts
		allocs[name] = testing.AllocsPerRun(200, runs[name])
	}
	t.Logf("allocations per call: raw %.0f, Do %.0f, fenced Do %.0f, fenced Do that may wait %.0f", allocs["raw"], allocs["Do"], allocs["fence"], allocs["wait"])
	for name, what := range map[string]string{"Do": "an uncontended Do", "fence": "a fenced Do", "wait": "a fenced Do that may wait"} {
		if allocs[name] > allocs["raw"]+10 {
			t.Errorf("%s allocates %.0f objects, the raw floor %.0f: more than raw + 10", what, allocs[name], allocs["raw"])
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkDoContended runs Do from parallel goroutines on one key, with
// waiting: it measures handoffs through the release notification.
func BenchmarkDoContended(b *testing.B) {
	c, _ := benchClient(b)
	s := lease.Spec{TTL: 10 * time.Second, Deadline: time.Minute, Wait: 50 * time.Second}
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if err := c.Do(ctx, "bench:contended", s, nop); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
