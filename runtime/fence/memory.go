package fence

import "sync"

// Memory is an in-memory fenced map, for examples and tests. The zero
// Memory is empty and ready to use.
type Memory[V any] struct {
	mu sync.Mutex
	m  map[string]memEntry[V]
}

type memEntry[V any] struct {
	v     V
	stamp Stamp
}

// NewMemory returns an empty store.
func NewMemory[V any]() *Memory[V] { return &Memory[V]{m: map[string]memEntry[V]{}} }

// Set stores v at key if s admits the key's current stamp.
func (m *Memory[V]) Set(s Stamp, key string, v V) error {
	return m.Update(s, key, func(V, bool) V { return v })
}

// Update replaces key's value with f(old, found) if s admits the key's
// current stamp; f runs under the store's lock. A refused write is
// reported to the lease's observer after the lock is released, so that
// the observer may use the store.
func (m *Memory[V]) Update(s Stamp, key string, f func(old V, found bool) V) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := m.update(s, key, f); err != nil {
		return s.report(err)
	}
	return nil
}

// update is Update under the lock; a refusal is returned unreported.
func (m *Memory[V]) update(s Stamp, key string, f func(old V, found bool) V) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, found := m.m[key]
	if found && !s.Admits(cur.stamp) {
		return s.staleErr(key, cur.stamp)
	}
	if m.m == nil { // a zero Memory
		m.m = map[string]memEntry[V]{}
	}
	m.m[key] = memEntry[V]{v: f(cur.v, found), stamp: Stamp{Token: s.Token, Owner: s.Owner}}
	return nil
}

// Get returns key's value and the token it was written with.
func (m *Memory[V]) Get(key string) (V, Stamp, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[key]
	return e.v, e.stamp, ok
}
