package lease

import (
	"slices"
	"testing"
)

// List's cursor across changes of a Cluster's masters: the masters done
// stay done whatever their order, the one being scanned goes on at its
// SCAN cursor, and one that is gone (a failover) is replaced by the
// masters not done, from the start. A standalone cursor is the SCAN
// cursor alone; a cursor of the form before the done list resumes as it
// did.
func TestListCursorAcrossMasterChanges(t *testing.T) {
	nodes := func(addrs ...string) []scanNode {
		var ns []scanNode
		for _, a := range addrs {
			ns = append(ns, scanNode{addr: a})
		}
		return ns
	}
	addrs := func(ns []scanNode) []string {
		var out []string
		for _, n := range ns {
			out = append(out, n.addr)
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		now       []scanNode
		cursor    string
		done      []string
		todo      []string
		pos       uint64
		roundTrip string
	}{
		{"start", nodes("a:1", "b:1", "c:1"), "", nil, []string{"a:1", "b:1", "c:1"}, 0, "|a:1@0"},
		{"same masters", nodes("a:1", "b:1", "c:1"), "a:1,|b:1@17", []string{"a:1"}, []string{"b:1", "c:1"}, 17, "a:1,|b:1@17"},
		{"scanned master replaced by one sorting first", nodes("0:1", "a:1", "c:1"), "a:1,|b:1@17", []string{"a:1"}, []string{"0:1", "c:1"}, 0, "a:1,|0:1@0"},
		{"master not yet scanned replaced by one sorting first", nodes("0:1", "a:1", "b:1"), "a:1,|b:1@17", []string{"a:1"}, []string{"b:1", "0:1"}, 17, "a:1,|b:1@17"},
		{"done master replaced", nodes("0:1", "b:1", "c:1"), "a:1,|b:1@17", []string{"a:1"}, []string{"b:1", "0:1", "c:1"}, 17, "a:1,|b:1@17"},
		{"old form", nodes("a:1", "b:1", "c:1"), "b:1@17", []string{"a:1"}, []string{"b:1", "c:1"}, 17, "a:1,|b:1@17"},
		{"standalone", nodes(""), "42", nil, []string{""}, 42, "42"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done, todo, pos, err := resumeAt(tc.now, tc.cursor)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(done, tc.done) || !slices.Equal(addrs(todo), tc.todo) || pos != tc.pos {
				t.Fatalf("resumeAt(%q) = done %q, todo %q, pos %d; want %q, %q, %d", tc.cursor, done, addrs(todo), pos, tc.done, tc.todo, tc.pos)
			}
			if got := listCursor(done, todo, pos); got != tc.roundTrip {
				t.Errorf("listCursor = %q, want %q", got, tc.roundTrip)
			}
		})
	}
	if _, _, _, err := resumeAt(nodes("a:1"), "a:1@x"); err == nil {
		t.Error("a bad cursor was accepted")
	}
	if got := listCursor([]string{"a:1"}, nil, 0); got != "" {
		t.Errorf("the cursor after the last master = %q, want \"\"", got)
	}
}
