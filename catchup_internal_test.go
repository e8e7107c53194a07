package pgrouted

import (
	"testing"
	"time"
)

func TestCatchUpBuckets(t *testing.T) {
	for _, c := range []struct {
		age  time.Duration
		want int
	}{
		{0, 0}, {31 * time.Microsecond, 0}, {32 * time.Microsecond, 1}, {63 * time.Microsecond, 1},
		{64 * time.Microsecond, 2}, {100 * time.Microsecond, 2}, {128 * time.Microsecond, 3},
		{time.Millisecond, 5}, {200 * time.Millisecond, catchUpBuckets - 1}, {time.Hour, catchUpBuckets - 1},
		{-time.Second, 0},
	} {
		if got := catchUpBucketOf(c.age); got != c.want {
			t.Errorf("bucket of %v: %d, want %d", c.age, got, c.want)
		}
	}
}

// TestCatchUpRecord: a replica with no record is checked; once its checks
// at an age mostly fail, reads of that age are not; other ages keep their
// own record; checks that find the write again bring it back, and so does
// time: a record no check refreshed for catchUpRecheck stops nothing.
func TestCatchUpRecord(t *testing.T) {
	var c catchUp
	now := monoNow()
	young, old := 100*time.Microsecond, 50*time.Millisecond
	if !c.worth(young, now) || !c.worth(old, now) {
		t.Fatal("a replica without a record is not checked")
	}
	for range 3 {
		c.record(young, now, false)
	}
	if c.worth(young, now) {
		t.Fatalf("after 3 failed checks at %v, still checked (missed share %d of %d)", young, c.buckets[catchUpBucketOf(young)].missed.Load(), catchUpOne)
	}
	if !c.worth(old, now) {
		t.Fatal("a failed check of a young write stopped the checks of old ones")
	}
	// Checks that fail 3 times in 4 are not worth sending; those that
	// fail once in 4 are.
	for i := range 400 {
		c.record(young, now, i%4 == 0)
	}
	if c.worth(young, now) {
		t.Fatalf("checks that fail 3 times in 4 are still sent (missed share %d of %d)", c.buckets[catchUpBucketOf(young)].missed.Load(), catchUpOne)
	}
	for i := range 400 {
		c.record(young, now, i%4 != 0)
	}
	if !c.worth(young, now) {
		t.Fatalf("checks that fail once in 4 are not sent (missed share %d of %d)", c.buckets[catchUpBucketOf(young)].missed.Load(), catchUpOne)
	}
	for range 400 {
		c.record(young, now, false)
	}
	n := 0
	for !c.worth(young, now) {
		c.record(young, now, true)
		n++
		if n > 100 {
			t.Fatal("checks that all succeed never bring the replica back")
		}
	}
	t.Logf("back after %d successful checks", n)
	for range 3 {
		c.record(young, now, false)
	}
	if c.worth(young, now) || !c.worth(young, now.Add(catchUpRecheck+time.Millisecond)) {
		t.Fatalf("a record is not obeyed while recent, or still obeyed %v after its last check", catchUpRecheck)
	}
	for range 1000 {
		c.record(young, now, true)
	}
	if m := c.buckets[catchUpBucketOf(young)].missed.Load(); m != 0 {
		t.Fatalf("missed share %d after 1000 successes, want 0", m)
	}
	for range 1000 {
		c.record(young, now, false)
	}
	if m := c.buckets[catchUpBucketOf(young)].missed.Load(); m != catchUpOne {
		t.Fatalf("missed share %d after 1000 failures, want %d", m, catchUpOne)
	}
}

// TestCatchUpOrder: replay follows WAL order: a check that missed a
// write counts for younger ones, not older ones; one that found it for
// older ones, not younger ones.
func TestCatchUpOrder(t *testing.T) {
	var c catchUp
	now := monoNow()
	young, mid, old := 50*time.Microsecond, time.Millisecond, 50*time.Millisecond
	for range 3 {
		c.record(mid, now, false)
	}
	if c.worth(young, now) || c.worth(mid, now) || !c.worth(old, now) {
		t.Fatalf("after a miss at %v: worth %v %v %v, want false false true", mid, c.worth(young, now), c.worth(mid, now), c.worth(old, now))
	}
	var d catchUp
	for range 100 {
		d.record(young, now, false)
		d.record(old, now, false)
	}
	for range 100 {
		d.record(mid, now, true)
	}
	if d.worth(young, now) || !d.worth(mid, now) || !d.worth(old, now) {
		t.Fatalf("after finds at %v: worth %v %v %v, want false true true", mid, d.worth(young, now), d.worth(mid, now), d.worth(old, now))
	}
}

// TestWorthChecking: of the replicas a read must check, those whose checks
// at its write's age mostly fail are dropped; when that leaves none, one
// read in catchUpExplore keeps them all (Explain never does, nor counts).
func TestWorthChecking(t *testing.T) {
	var c Connector
	a, b := &host{}, &host{}
	age := 100 * time.Microsecond
	now := monoNow()
	for range 3 {
		a.catchUp.record(age, now, false)
	}
	cand := func() []*hostView { return []*hostView{{host: a}, {host: b}} }
	if got := c.worthChecking(cand(), age, now, true); len(got) != 1 || got[0].host != b {
		t.Fatalf("kept %d replicas, want the one whose checks succeed", len(got))
	}
	for range 3 {
		b.catchUp.record(age, now, false)
	}
	for range 100 {
		if got := c.worthChecking(cand(), age, now, false); len(got) != 0 {
			t.Fatal("Explain explored")
		}
	}
	explored := 0
	for range 8 * catchUpExplore {
		if got := c.worthChecking(cand(), age, now, true); len(got) == 2 {
			explored++
		} else if len(got) != 0 {
			t.Fatalf("kept %d replicas, want all or none", len(got))
		}
	}
	if explored != 8 {
		t.Fatalf("%d of %d reads explored, want 1 in %d", explored, 8*catchUpExplore, catchUpExplore)
	}
}
