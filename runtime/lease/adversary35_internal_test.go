package lease

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// stressFire is one scheduling of a tick in the clock stress test.
type stressFire struct {
	s   *clockStress
	id  int
	gen int
}

type clockStress struct {
	mu    sync.Mutex
	fires map[[2]int]int       // (id, gen) -> times fired
	at    map[[2]int]time.Time // (id, gen) -> when it fired
}

func (f stressFire) fire() {
	f.s.mu.Lock()
	k := [2]int{f.id, f.gen}
	f.s.fires[k]++
	f.s.at[k] = time.Now()
	f.s.mu.Unlock()
}

// Many goroutines set, move (earlier, later, into the past) and stop ticks
// of one clock at once, while it fires. Each tick whose last operation was
// a set fires for that set exactly once, not before its time and not long
// after; a tick whose last operation was a stop that took it off does not
// fire for the set it took off.
func TestAdversary35_ClockConcurrentSetStopMove(t *testing.T) {
	var k clock
	s := &clockStress{fires: map[[2]int]int{}, at: map[[2]int]time.Time{}}
	const workers, perWorker, ops = 8, 16, 400
	type tk struct {
		t       tick
		gen     int
		when    time.Time
		stopped bool // last op was a stop that took it off
		took    int  // the gen it took off
	}
	ticks := make([]*tk, workers*perWorker)
	for i := range ticks {
		ticks[i] = &tk{}
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seed := uint64(w*7919 + 1)
			rnd := func(n int) int {
				seed ^= seed << 13
				seed ^= seed >> 7
				seed ^= seed << 17
				return int(seed % uint64(n))
			}
			for range ops {
				id := w*perWorker + rnd(perWorker)
				x := ticks[id]
				switch rnd(4) {
				case 0: // stop
					if k.stop(&x.t) {
						x.stopped, x.took = true, x.gen
					}
				default: // set or move: -5ms .. +40ms
					x.gen++
					x.when = time.Now().Add(time.Duration(rnd(45)-5) * time.Millisecond)
					x.stopped = false
					k.set(&x.t, x.when, stressFire{s, id, x.gen})
				}
				if rnd(8) == 0 {
					time.Sleep(time.Duration(rnd(3)) * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	time.Sleep(300 * time.Millisecond) // all due by +40ms
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, x := range ticks {
		if x.gen == 0 {
			continue
		}
		key := [2]int{id, x.gen}
		n := s.fires[key]
		switch {
		case x.stopped && x.took == x.gen && n != 0:
			t.Errorf("tick %d fired %d times for set %d after a stop took it off", id, n, x.gen)
		case !x.stopped && n != 1:
			t.Errorf("tick %d: its last set (%d, due %v ago) fired %d times; want once", id, x.gen, time.Since(x.when), n)
		case !x.stopped && s.at[key].Before(x.when):
			t.Errorf("tick %d fired %v before its time", id, x.when.Sub(s.at[key]))
		}
	}
	for key, n := range s.fires {
		if n > 1 {
			t.Errorf("tick %d fired %d times for set %d", key[0], n, key[1])
		}
	}
	k.mu.Lock()
	if len(k.q) != 0 {
		t.Errorf("%d ticks still queued after all came due", len(k.q))
	}
	k.mu.Unlock()
}

// selfTick sets itself again from inside its fire, n times, each time a
// little later or in the past (as the watcher sets itself at valid-until).
type selfTick struct {
	k    *clock
	t    tick
	left int
	done chan struct{}
	i    int
}

func (s *selfTick) fire() {
	s.left--
	if s.left == 0 {
		close(s.done)
		return
	}
	s.i++
	d := time.Duration(s.i%3-1) * time.Millisecond // -1ms, 0, +1ms
	s.k.set(&s.t, time.Now().Add(d), s)
}

// Ticks set from inside their own fire, many at once on one clock, with
// other ticks moved earlier meanwhile: none is dropped.
func TestAdversary35_ClockSetFromFire(t *testing.T) {
	var k clock
	const n = 50
	ss := make([]*selfTick, n)
	for i := range ss {
		ss[i] = &selfTick{k: &k, left: 30, done: make(chan struct{}), i: i}
		k.set(&ss[i].t, time.Now().Add(time.Duration(i%5)*time.Millisecond), ss[i])
	}
	// Meanwhile, far ticks brought earlier again and again.
	var far [10]tick
	r := &tickRec{ch: make(chan string, 100)}
	for i := range far {
		k.set(&far[i], time.Now().Add(time.Hour), namedTick{r, "far"})
	}
	for j := range 200 {
		k.set(&far[j%10], time.Now().Add(time.Duration(j%7)*time.Millisecond+time.Second), namedTick{r, "far"})
		if j%20 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	timeout := time.After(5 * time.Second)
	for i, s := range ss {
		select {
		case <-s.done:
		case <-timeout:
			k.mu.Lock()
			t.Fatalf("self-setting tick %d stuck with %d firings left (queue %d, armed %v)", i, s.left, len(k.q), k.armed)
			k.mu.Unlock()
		}
	}
	for i := range far {
		k.stop(&far[i])
	}
}

// A watcher stopped (its call over, its lease released) while its tick
// fires: fire checks w.stopped under w.mu, then sets the tick again at
// valid-until without w.mu; a stop in between finds the tick off the
// clock (popped for the firing) and the set puts it back. The tick of a
// watcher whose call ended is then left on the clock, and fires, until
// the lease's validity (up to a TTL later; for a lease renewed for long,
// that long), holding the call. (Found on 13ff1f3's clock; the watcher has
// a runtime timer again, where a Reset after the stop did the same.)
func TestAdversary35_WatcherTickNotLeftAfterStop(t *testing.T) {
	c := &Client{}
	c.renew = newRenewer(c)
	left, n := 0, 0
	for stop := time.Now().Add(2 * time.Second); left == 0 && time.Now().Before(stop); n++ {
		l := &Lease{lost: make(chan struct{})}
		l.validUntil = time.Now().Add(time.Hour)
		a := &call{c: c}
		w := &a.grant().w
		w.a, w.l = a, l
		w.r = renewal{a: a, l: l, index: -1, end: l.validUntil}
		w.registered = true // the first renewal was queued already
		w.timer = time.AfterFunc(time.Hour, func() {})
		w.timer.Stop() // fired: fire runs now
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.fire() // as the timer runs it
		}()
		for range n % 5 {
			runtime.Gosched()
		}
		w.stop()
		wg.Wait()
		if w.timer.Stop() {
			left++
		}
	}
	if left > 0 {
		t.Errorf("%d of %d stopped watchers armed their timer again", left, n)
	}
}
