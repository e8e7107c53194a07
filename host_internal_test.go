package pgrouted

import "testing"

// TestHostFlightList: the borrowed connections a host counts in flight,
// as they are added and removed in any order, removed twice, or added
// again after their removal (a recycled replicaRows' borrowed).
func TestHostFlightList(t *testing.T) {
	var f hostFlight
	listed := func() []*borrowed {
		var out []*borrowed
		f.each(func(b *borrowed) { out = append(out, b) })
		return out
	}
	check := func(step string, want ...*borrowed) {
		t.Helper()
		got := listed()
		if len(got) != len(want) || f.n.Load() != int64(len(want)) {
			t.Fatalf("%s: %d listed, n %d; want %d", step, len(got), f.n.Load(), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: entry %d is not the one expected", step, i)
			}
		}
	}
	check("empty")
	f.remove(new(borrowed)) // never added
	check("removing one never added")
	a, b, c := new(borrowed), new(borrowed), new(borrowed)
	f.add(a)
	f.add(b)
	f.add(c)
	check("three added", a, b, c)
	f.remove(b)
	check("the middle one removed", a, c)
	f.remove(b)
	check("removed twice", a, c)
	f.remove(a)
	f.remove(c)
	check("all removed")
	*b = borrowed{}
	f.add(b)
	f.add(a)
	check("added again", b, a)
}
