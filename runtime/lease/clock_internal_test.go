package lease

import (
	"sync"
	"testing"
	"time"
)

type tickRec struct {
	mu  sync.Mutex
	got []string
	ch  chan string
}

type namedTick struct {
	r    *tickRec
	name string
}

func (n namedTick) fire() { n.r.ch <- n.name }

// The clock fires its ticks in time order, each once, never one taken off,
// and re-arms its timer only for a tick due before the time it is armed
// for.
func TestClockFiresInOrderAndOnlyWhatIsLeft(t *testing.T) {
	var k clock
	r := &tickRec{ch: make(chan string, 8)}
	var a, b, c, d tick
	now := time.Now()
	k.set(&a, now.Add(60*time.Millisecond), namedTick{r, "a"})
	armed := k.armed
	k.set(&b, now.Add(120*time.Millisecond), namedTick{r, "b"})
	if k.armed != armed {
		t.Errorf("a later tick re-armed the timer: %v, was %v", k.armed, armed)
	}
	k.set(&c, now.Add(20*time.Millisecond), namedTick{r, "c"})
	if !k.armed.Equal(now.Add(20 * time.Millisecond)) {
		t.Errorf("an earlier tick did not re-arm the timer: armed for %v", k.armed.Sub(now))
	}
	k.set(&d, now.Add(40*time.Millisecond), namedTick{r, "d"})
	if !k.stop(&d) || k.stop(&d) {
		t.Error("stop: want true once, then false")
	}
	k.set(&b, now.Add(80*time.Millisecond), namedTick{r, "b"}) // moved
	var got []string
	deadline := time.After(2 * time.Second)
	for len(got) < 3 {
		select {
		case n := <-r.ch:
			got = append(got, n)
		case <-deadline:
			t.Fatalf("fired %v; want c, a, b", got)
		}
	}
	if got[0] != "c" || got[1] != "a" || got[2] != "b" {
		t.Errorf("fired %v; want c, a, b", got)
	}
	select {
	case n := <-r.ch:
		t.Errorf("%s fired again (or d fired after stop)", n)
	case <-time.After(100 * time.Millisecond):
	}
	if k.stop(&a) || len(k.q) != 0 || !k.armed.IsZero() {
		t.Errorf("after firing: stop(a) true or %d ticks left, armed %v", len(k.q), k.armed)
	}
	// A tick taken off leaves the timer armed: it fires with nothing due
	// and stays idle.
	k.set(&a, time.Now().Add(20*time.Millisecond), namedTick{r, "a"})
	k.stop(&a)
	time.Sleep(60 * time.Millisecond)
	k.mu.Lock()
	idle := k.armed.IsZero() && len(k.q) == 0
	k.mu.Unlock()
	if !idle {
		t.Error("the timer did not go idle after an empty firing")
	}
	select {
	case n := <-r.ch:
		t.Errorf("%s fired after stop", n)
	default:
	}
}
