package consistency

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
	var c CatchUp
	now := Now()
	young, old := 100*time.Microsecond, 50*time.Millisecond
	if !c.Worth(young, now) || !c.Worth(old, now) {
		t.Fatal("a replica without a record is not checked")
	}
	for range 3 {
		c.Record(young, now, false)
	}
	if c.Worth(young, now) {
		t.Fatalf("after 3 failed checks at %v, still checked (missed share %d of %d)", young, c.buckets[catchUpBucketOf(young)].missed.Load(), catchUpOne)
	}
	if !c.Worth(old, now) {
		t.Fatal("a failed check of a young write stopped the checks of old ones")
	}
	// Checks that fail 3 times in 4 are not worth sending; those that
	// fail once in 4 are.
	for i := range 400 {
		c.Record(young, now, i%4 == 0)
	}
	if c.Worth(young, now) {
		t.Fatalf("checks that fail 3 times in 4 are still sent (missed share %d of %d)", c.buckets[catchUpBucketOf(young)].missed.Load(), catchUpOne)
	}
	for i := range 400 {
		c.Record(young, now, i%4 != 0)
	}
	if !c.Worth(young, now) {
		t.Fatalf("checks that fail once in 4 are not sent (missed share %d of %d)", c.buckets[catchUpBucketOf(young)].missed.Load(), catchUpOne)
	}
	for range 400 {
		c.Record(young, now, false)
	}
	n := 0
	for !c.Worth(young, now) {
		c.Record(young, now, true)
		n++
		if n > 100 {
			t.Fatal("checks that all succeed never bring the replica back")
		}
	}
	t.Logf("back after %d successful checks", n)
	for range 3 {
		c.Record(young, now, false)
	}
	if c.Worth(young, now) || !c.Worth(young, now.Add(catchUpRecheck+time.Millisecond)) {
		t.Fatalf("a record is not obeyed while recent, or still obeyed %v after its last check", catchUpRecheck)
	}
	for range 1000 {
		c.Record(young, now, true)
	}
	if m := c.buckets[catchUpBucketOf(young)].missed.Load(); m != 0 {
		t.Fatalf("missed share %d after 1000 successes, want 0", m)
	}
	for range 1000 {
		c.Record(young, now, false)
	}
	if m := c.buckets[catchUpBucketOf(young)].missed.Load(); m != catchUpOne {
		t.Fatalf("missed share %d after 1000 failures, want %d", m, catchUpOne)
	}
}

// TestCatchUpOrder: replay follows WAL order: a check that missed a
// write counts for younger ones, not older ones; one that found it for
// older ones, not younger ones.
func TestCatchUpOrder(t *testing.T) {
	var c CatchUp
	now := Now()
	young, mid, old := 50*time.Microsecond, time.Millisecond, 50*time.Millisecond
	for range 3 {
		c.Record(mid, now, false)
	}
	if c.Worth(young, now) || c.Worth(mid, now) || !c.Worth(old, now) {
		t.Fatalf("after a miss at %v: worth %v %v %v, want false false true", mid, c.Worth(young, now), c.Worth(mid, now), c.Worth(old, now))
	}
	var d CatchUp
	for range 100 {
		d.Record(young, now, false)
		d.Record(old, now, false)
	}
	for range 100 {
		d.Record(mid, now, true)
	}
	if d.Worth(young, now) || !d.Worth(mid, now) || !d.Worth(old, now) {
		t.Fatalf("after finds at %v: worth %v %v %v, want false true true", mid, d.Worth(young, now), d.Worth(mid, now), d.Worth(old, now))
	}
}
