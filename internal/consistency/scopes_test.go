package consistency

import (
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/lagmeter"
)

// TestScopes: a read needs the writes to the relations it reads and the
// writes that count for every relation, not those to other relations; a
// read of unknown relations needs every write; a write to a relation
// beyond maxRelations counts for every relation.
func TestScopes(t *testing.T) {
	var s Scopes
	now := Now()
	at := func(lsn lagmeter.LSN) lagmeter.Watermark {
		return lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: lsn}
	}
	need := func(named bool, keys ...uint32) lagmeter.LSN {
		t.Helper()
		var r Read
		r.Begin(&s, named, keys)
		st, _ := r.Settle(nil, now, true)
		return st.Watermark().LSN
	}
	s.Wrote(true, []uint32{1}, at(100), now, time.Time{})
	s.Wrote(true, []uint32{2}, at(200), now, time.Time{})
	if got := need(true, 1); got != 100 {
		t.Fatalf("read of relation 1 needs %v, want 100", got)
	}
	if got := need(true, 3); got != 0 {
		t.Fatalf("read of relation 3, never written, needs %v, want nothing", got)
	}
	if got := need(true, 1, 2); got != 200 {
		t.Fatalf("read of 1 and 2 needs %v, want 200", got)
	}
	if got := need(false); got != 200 {
		t.Fatalf("read of unknown relations needs %v, want every write's 200", got)
	}
	s.Wrote(false, nil, at(300), now, time.Time{})
	if got := need(true, 3); got != 300 {
		t.Fatalf("after a write for every relation, read of 3 needs %v, want 300", got)
	}
	if got := s.Every().Load().Watermark().LSN; got != 300 {
		t.Fatalf("every: %v, want 300", got)
	}
	// Beyond maxRelations, a write counts for every relation.
	var o Scopes
	for k := uint32(1); k <= maxRelations; k++ {
		o.Wrote(true, []uint32{k}, at(lagmeter.LSN(k)), now, time.Time{})
	}
	o.Wrote(true, []uint32{999}, at(5000), now, time.Time{})
	var r Read
	r.Begin(&o, true, []uint32{1})
	if st, _ := r.Settle(nil, now, true); st.Watermark().LSN != 5000 {
		t.Fatalf("a write beyond the relations kept apart is not read as every relation's: %v", st.Watermark())
	}
}

// TestScopesDeferred: a deferred write to one relation leaves a read of
// another without a deferred position; the read of its own relation
// resolves it once, and the mark keeps the position read.
func TestScopesDeferred(t *testing.T) {
	var s Scopes
	on := lagmeter.Watermark{SystemID: 7, Timeline: 1}
	now := Now()
	s.WroteDeferred(true, []uint32{1}, on, now)
	var other Read
	other.Begin(&s, true, []uint32{2})
	if st, _ := other.Settle(nil, now, true); st.Pending() || !st.Watermark().IsZero() {
		t.Fatalf("read of another relation: %+v, want nothing needed", st)
	}
	var own Read
	own.Begin(&s, true, []uint32{1})
	st, _ := own.Settle(nil, now, true)
	if !st.Pending() {
		t.Fatalf("read of the written relation: %+v, want its position deferred", st)
	}
	pos := lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: 4242}
	st, ok := own.ResolveDeferred(pos, now.Add(time.Millisecond), now)
	if !ok || st.Pending() || st.Watermark() != pos {
		t.Fatalf("resolved: %+v %v", st, ok)
	}
	var again Read
	again.Begin(&s, true, []uint32{1})
	if st, _ := again.Settle(nil, now, true); st.Pending() || st.Watermark() != pos {
		t.Fatalf("the next read: %+v, want the position read", st)
	}
	if !s.Every().Load().Pending() {
		t.Fatal("every write's mark lost its deferred position to a relation's resolution")
	}
}

// TestScopesCombined: a read of two written relations with a write for
// every relation plans with the later position and the deferred one, and
// reports nothing itself.
func TestScopesCombined(t *testing.T) {
	var s Scopes
	now := Now()
	s.Wrote(false, nil, lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: 10}, now, time.Time{})
	s.Wrote(true, []uint32{1}, lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: 50}, now, time.Time{})
	s.WroteDeferred(true, []uint32{2}, lagmeter.Watermark{SystemID: 7, Timeline: 1}, now.Add(time.Millisecond))
	var r Read
	r.Begin(&s, true, []uint32{1, 2})
	st, _ := r.Settle(nil, now, true)
	if st.Watermark().LSN != 50 || !st.Pending() || st.LastWrite().IsZero() {
		t.Fatalf("combined: %+v", st)
	}
	if st.identity() == st {
		t.Fatal("a combination stands for itself in the deferred record, not for its deferred write")
	}
}

// TestScopesReadAllocatesNothing: beginning and settling a read of
// relations allocates nothing when one mark records the writes it needs
// (the usual case: a relation written, nothing written for every
// relation), nor when it combines two: the combination of the same states
// is made once, by the first read after a write, and kept (Scopes.combos).
// A write to one of them makes the next read combine again; the reads of
// another set of relations keep theirs.
func TestScopesReadAllocatesNothing(t *testing.T) {
	var s Scopes
	now := Now()
	w := func(lsn lagmeter.LSN) lagmeter.Watermark {
		return lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: lsn}
	}
	s.Wrote(true, []uint32{1}, w(10), now, time.Time{})
	p := &Primary{SystemID: 7, Timeline: 1}
	settle := func(keys ...uint32) *State {
		var r Read
		r.Begin(&s, true, keys)
		st, _ := r.Settle(p, now, true)
		return st
	}
	read := func(keys ...uint32) float64 {
		return testing.AllocsPerRun(100, func() { settle(keys...) })
	}
	if n := read(1, 2); n != 0 {
		t.Fatalf("one mark: %v allocations per read", n)
	}
	s.Wrote(false, nil, w(5), now, time.Time{}) // broad: every read combines it
	s.Wrote(true, []uint32{3}, w(20), now, time.Time{})
	if n := read(1, 2); n != 0 {
		t.Fatalf("two marks: %v allocations per read, want the combination made once", n)
	}
	if st := settle(1, 2); st.Watermark() != w(10) {
		t.Fatalf("broad at 5 and relation 1 at 10 combine to %v, want 10", st.Watermark())
	}
	first := settle(1, 2)
	s.Wrote(true, []uint32{1}, w(30), now, time.Time{})
	if st := settle(1, 2); st == first || st.Watermark() != w(30) {
		t.Fatalf("after a write to relation 1 at 30 the read combines %v (the same combination: %v), want 30", st.Watermark(), st == first)
	}
	if st := settle(3); st.Watermark() != w(20) {
		t.Fatalf("relation 3 at 20 and broad at 5 combine to %v, want 20", st.Watermark())
	}
	if n := read(1, 2) + read(3); n != 0 {
		t.Fatalf("reads of two sets of relations: %v allocations, want their combinations kept", n)
	}
}

// TestResolveDeferredAfterALaterWrite: a position read for a read serves
// that read, but is published to the mark only when it covers every write
// the mark records: one made after the position's read started (a read
// planned again on another replica with its first plan's position finds
// it) keeps its position deferred.
func TestResolveDeferredAfterALaterWrite(t *testing.T) {
	var s Scopes
	on := lagmeter.Watermark{SystemID: 7, Timeline: 1}
	readAt := Now()
	s.WroteDeferred(true, []uint32{1}, on, readAt.Add(time.Millisecond)) // after the read began
	var r Read
	r.Begin(&s, true, []uint32{1})
	r.Settle(nil, readAt, true)
	pos := lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: 100}
	st, ok := r.ResolveDeferred(pos, readAt, readAt)
	if !ok || st.Pending() || st.Watermark() != pos {
		t.Fatalf("the read's own state: %+v %v", st, ok)
	}
	var again Read
	again.Begin(&s, true, []uint32{1})
	if st, _ := again.Settle(nil, readAt, true); !st.Pending() {
		t.Fatalf("a write after the position's read was published as at the position: %+v", st)
	}
}

// TestScopesWriteAllocatesOnce: a write moves every's mark and its
// relation's; when they held the same state (one relation written, as by a
// service that writes one table), they share the new one: one allocation
// per write, deferred or not. Each mark still reads as its own writes.
func TestScopesWriteAllocatesOnce(t *testing.T) {
	var s Scopes
	now := Now()
	on := lagmeter.Watermark{SystemID: 7, Timeline: 1}
	lsn := lagmeter.LSN(10)
	for _, c := range []struct {
		name  string
		write func()
	}{
		{"deferred", func() { now = now.Add(time.Millisecond); s.WroteDeferred(true, []uint32{1}, on, now) }},
		{"with its position", func() {
			now, lsn = now.Add(time.Millisecond), lsn+8
			s.Wrote(true, []uint32{1}, lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: lsn}, now, now)
		}},
	} {
		c.write()
		if n := testing.AllocsPerRun(100, c.write); n != 1 {
			t.Errorf("%s: %v allocations per write to one relation, want 1", c.name, n)
		}
		if e, r := s.every.Load(), s.slot(1, false).Load(); e != r {
			t.Errorf("%s: every's state %+v and relation 1's %+v are not shared", c.name, e, r)
		}
	}
	// A write to another relation: relation 1's mark keeps its state.
	before := s.slot(1, false).Load()
	s.Wrote(true, []uint32{2}, lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: lsn + 8}, now, now)
	if got := s.slot(1, false).Load(); got != before || s.every.Load().Watermark().LSN != lsn+8 || s.slot(2, false).Load().Watermark().LSN != lsn+8 {
		t.Fatalf("a write to relation 2 moved relation 1's mark (%v) or did not move every's (%v) and 2's (%v)",
			got != before, s.every.Load().Watermark(), s.slot(2, false).Load().Watermark())
	}
}

// TestSaw: a read's bound (Causal) is needed by the next reads of the
// relations it read (named) or of every relation (a Session's), never
// lowers a mark, records no write, and an unread bound makes the position
// unknown until a primary probe sent after it; a bound that changes
// nothing publishes nothing (the same State).
func TestSaw(t *testing.T) {
	var s Scopes
	now := Now()
	at := func(lsn lagmeter.LSN) lagmeter.Watermark {
		return lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: lsn}
	}
	need := func(named bool, keys ...uint32) *State {
		t.Helper()
		var r Read
		r.Begin(&s, named, keys)
		st, _ := r.Settle(nil, now, true)
		return st
	}
	s.Saw(true, []uint32{1}, at(100), now)
	if got := need(true, 1).Watermark().LSN; got != 100 {
		t.Fatalf("read of relation 1 after a read of it saw 100 needs %v", got)
	}
	if got := need(true, 2).Watermark().LSN; got != 0 {
		t.Fatalf("read of relation 2 needs %v, want nothing (the bound is relation 1's)", got)
	}
	if got := need(false).Watermark().LSN; got != 100 {
		t.Fatalf("read of unknown relations needs %v, want 100 (every)", got)
	}
	if !need(false).LastWrite().IsZero() {
		t.Fatal("a read recorded a write")
	}
	if !need(true, 1).Seen() {
		t.Fatal("a read's bound is not marked as one (Seen)")
	}
	before := s.Every().Load()
	s.Saw(true, []uint32{1}, at(50), now)
	if s.Every().Load() != before {
		t.Fatal("an older bound published a new state")
	}
	if got := need(true, 1).Watermark().LSN; got != 100 {
		t.Fatalf("an older bound lowered the mark to %v", got)
	}
	s.Saw(false, nil, at(300), now)
	if got := need(true, 2).Watermark().LSN; got != 300 {
		t.Fatalf("read of relation 2 after a Session's read saw 300 needs %v", got)
	}
	s.Wrote(true, []uint32{3}, at(350), now, time.Time{})
	if st := need(true, 3); st.Seen() || st.Watermark().LSN != 350 {
		t.Fatalf("after a write past the bounds: position %v, seen %v; want the write's", st.Watermark(), st.Seen())
	}
	s.Saw(false, nil, lagmeter.Watermark{}, now)
	st := need(true, 2)
	if !st.Unknown() {
		t.Fatal("a bound that could not be read left the position known")
	}
	p := &Primary{SystemID: 7, Timeline: 1, End: 400, Probed: true, ProbedAt: now.Add(time.Millisecond)}
	_ = st
	var r Read
	r.Begin(&s, true, []uint32{2})
	if st, _ := r.Settle(p, now.Add(2*time.Millisecond), true); st.Unknown() || st.Watermark().LSN != 400 {
		t.Fatalf("a primary probe after the read settles the bound at its position: got %v unknown=%v", st.Watermark(), st.Unknown())
	}
}
