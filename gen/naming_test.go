package gen

import "testing"

func TestExportName(t *testing.T) {
	for in, want := range map[string]string{"chargeOrder": "ChargeOrder", "x": "X", "école": "École", "Already": "Already"} {
		if got := exportName(in); got != want {
			t.Errorf("exportName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNamerAllocatesAroundReservedNames(t *testing.T) {
	n := newNamer()
	n.reserve("ctx", "key", "key1")
	if got := n.alloc("key", "key"); got != "key2" {
		t.Errorf("alloc(key) with key, key1 reserved = %q, want key2", got)
	}
	if got := n.alloc("", "p1"); got != "p1" {
		t.Errorf("alloc of an unnamed parameter = %q, want its default p1", got)
	}
	if got := n.alloc("_", "p2"); got != "p2" {
		t.Errorf("alloc of a blank parameter = %q, want its default p2", got)
	}
	if got := n.alloc("ctx", "ctx"); got != "ctx1" {
		t.Errorf("alloc(ctx) with ctx reserved = %q, want ctx1", got)
	}
	if got := n.alloc("ctx", "ctx"); got != "ctx2" {
		t.Errorf("second alloc(ctx) = %q, want ctx2", got)
	}
}
