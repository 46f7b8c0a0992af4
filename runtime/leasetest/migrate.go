package leasetest

import (
	"context"
	"fmt"
)

// Migration moves one slot between masters in the steps Redis Cluster
// uses (CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE), so a
// test can act while the slot is half moved. Between BeginMigration and
// Finish, a command for a key of the slot that is no longer on From gets
// an ASK redirect to To, and a command over several keys of the slot of
// which only some have moved gets TRYAGAIN.
type Migration struct {
	Slot     int
	From, To *Server

	c            *Cluster
	fromID, toID string
}

// BeginMigration starts moving slot from its current master to the
// master to: To imports it, its owner migrates it. No key moves yet.
func (c *Cluster) BeginMigration(ctx context.Context, slot int, to *Server) (*Migration, error) {
	from, err := c.MasterForSlot(ctx, slot)
	if err != nil {
		return nil, err
	}
	if from == to {
		return nil, fmt.Errorf("slot %d is already on %s", slot, to.Addr())
	}
	v, err := c.view(ctx, to)
	if err != nil {
		return nil, err
	}
	if n := v.nodes[c.ids[to]]; n == nil || !n.flags["master"] {
		return nil, fmt.Errorf("%s is not a master", to.Addr())
	}
	m := &Migration{Slot: slot, From: from, To: to, c: c, fromID: c.ids[from], toID: c.ids[to]}
	// The order Redis documents: importing first, so that an ASK from the
	// source always finds the target ready.
	if err := to.do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", m.fromID).Err(); err != nil {
		return nil, fmt.Errorf("SETSLOT %d IMPORTING on %s: %w", slot, to.Addr(), err)
	}
	if err := from.do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", m.toID).Err(); err != nil {
		return nil, fmt.Errorf("SETSLOT %d MIGRATING on %s: %w", slot, from.Addr(), err)
	}
	return m, nil
}

// MoveKeys moves up to n keys of the slot (all that are left when n <= 0)
// from From to To with MIGRATE and returns how many it moved.
func (m *Migration) MoveKeys(ctx context.Context, n int) (int, error) {
	moved := 0
	for n <= 0 || moved < n {
		batch := 100
		if n > 0 {
			batch = min(batch, n-moved)
		}
		keys, err := m.From.do(ctx, "CLUSTER", "GETKEYSINSLOT", m.Slot, batch).StringSlice()
		if err != nil {
			return moved, fmt.Errorf("GETKEYSINSLOT %d on %s: %w", m.Slot, m.From.Addr(), err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", m.To.port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := m.From.do(ctx, args...).Err(); err != nil {
			return moved, fmt.Errorf("MIGRATE to %s: %w", m.To.Addr(), err)
		}
		moved += len(keys)
	}
	return moved, nil
}

// Finish moves the keys left, assigns the slot to To (SETSLOT NODE on To,
// From, then the other masters) and waits until every running node's view
// agrees.
func (m *Migration) Finish(ctx context.Context) error {
	if _, err := m.MoveKeys(ctx, 0); err != nil {
		return err
	}
	masters := []*Server{m.To, m.From}
	v, err := m.c.view(ctx, m.To)
	if err != nil {
		return err
	}
	for _, s := range m.c.Nodes {
		if n := v.nodes[m.c.ids[s]]; s != m.To && s != m.From && s.running() && n != nil && n.flags["master"] && !n.flags["fail"] {
			masters = append(masters, s)
		}
	}
	for _, s := range masters {
		if err := s.do(ctx, "CLUSTER", "SETSLOT", m.Slot, "NODE", m.toID).Err(); err != nil {
			return fmt.Errorf("SETSLOT %d NODE on %s: %w", m.Slot, s.Addr(), err)
		}
	}
	return poll(ctx, func() error {
		owner, err := m.c.MasterForSlot(ctx, m.Slot)
		if err != nil {
			return err
		}
		if owner != m.To {
			return fmt.Errorf("slot %d still on %s", m.Slot, owner.Addr())
		}
		return nil
	})
}
