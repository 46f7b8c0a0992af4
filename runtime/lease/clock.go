package lease

import (
	"container/heap"
	"sync"
	"time"
)

// clock runs a Client's per-call timed work on one runtime timer: its
// releases' deadlines and the ends of its kept leases. That work almost
// never comes due (a release is answered long before its deadline, a kept
// lease is taken again), yet a runtime timer per task was armed and
// stopped on every call, and arming one that comes due before the others
// of its P wakes a second thread to watch it (an eventfd write or a
// futex: a cold wake on a shared machine, on the hot path).
//
// Not on it: fn's deadline (a standard context, see makeContexts) and the
// validity watchers, whose timers do come due (thousands of times a
// second with many leases held) and cost more through one heap and lock
// than on the runtime's timers (see watcher).
//
// The clock re-arms its timer only for a task due before the time the
// timer is armed for. A task taken off leaves the timer as it is: the
// timer, firing with nothing due, re-arms for the earliest task left, or
// stays idle when none is left. A steady stream of calls thus costs no
// timer operation per call, only a firing now and then.
//
// A due task runs in a goroutine of its own, as time.AfterFunc's function
// would: a task that blocks (a loss reported to a slow Observer) holds up
// no other (the last one of a firing runs on the timer's goroutine).
type clock struct {
	mu    sync.Mutex
	q     clockQueue
	armed time.Time // when t fires (zero: not armed, or firing)
	t     *time.Timer
}

// tick is one timed task, embedded in what it serves (no allocation). Its
// zero value is not scheduled.
type tick struct {
	when time.Time
	pos  int // 1 + its index in the clock's queue; 0 when not in it
	f    ticker
}

// ticker is what a tick runs when it comes due.
type ticker interface{ fire() }

// set schedules t to fire f at when, or moves it there if it is
// scheduled already.
func (k *clock) set(t *tick, when time.Time, f ticker) {
	k.mu.Lock()
	t.when, t.f = when, f
	if t.pos > 0 {
		heap.Fix(&k.q, t.pos-1)
	} else {
		heap.Push(&k.q, t)
	}
	if k.armed.IsZero() || when.Before(k.armed) {
		k.arm(when)
	}
	k.mu.Unlock()
}

// stop takes t off, reporting whether it was scheduled (false: it had
// fired already, or was never set). Like time.Timer.Stop, it does not wait
// for a task that is running.
func (k *clock) stop(t *tick) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if t.pos == 0 {
		return false
	}
	heap.Remove(&k.q, t.pos-1)
	return true
}

// arm makes the timer fire at when (k.mu held).
func (k *clock) arm(when time.Time) {
	k.armed = when
	if k.t == nil {
		k.t = time.AfterFunc(time.Until(when), k.run)
		return
	}
	k.t.Reset(time.Until(when))
}

// run is the timer's function: the due tasks start, and the timer is
// armed for the earliest one left. A firing with nothing due (its task was
// taken off) only re-arms.
func (k *clock) run() {
	var due []ticker
	k.mu.Lock()
	k.armed = time.Time{}
	now := time.Now()
	for len(k.q) > 0 && !k.q[0].when.After(now) {
		t := heap.Pop(&k.q).(*tick)
		due = append(due, t.f)
	}
	if len(k.q) > 0 {
		k.arm(k.q[0].when)
	}
	k.mu.Unlock()
	// The last on this goroutine (the timer's own, started for this
	// firing): the timer is armed again already, so even a task that
	// blocks holds up no later one; most firings start one task.
	for i, f := range due {
		if i == len(due)-1 {
			f.fire()
		} else {
			go f.fire()
		}
	}
}

// clockQueue is a heap of ticks by when.
type clockQueue []*tick

func (q clockQueue) Len() int           { return len(q) }
func (q clockQueue) Less(i, j int) bool { return q[i].when.Before(q[j].when) }
func (q clockQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].pos, q[j].pos = i+1, j+1
}
func (q *clockQueue) Push(x any) {
	t := x.(*tick)
	t.pos = len(*q) + 1
	*q = append(*q, t)
}
func (q *clockQueue) Pop() any {
	old := *q
	n := len(old)
	t := old[n-1]
	old[n-1] = nil
	t.pos = 0
	*q = old[:n-1]
	return t
}
