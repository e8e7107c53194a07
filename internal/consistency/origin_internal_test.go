package consistency

import (
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/lagmeter"
)

// TestOriginAcrossFailover: after a failover, a position restored from an
// unsigned token moves as any other (to the switch point when it was
// past it), but is never reported lost; one of this process's writes, or
// of a signed token, is.
func TestOriginAcrossFailover(t *testing.T) {
	p := &Primary{
		SystemID: 7, Timeline: 2, End: 5000, Probed: true, ProbedAt: Now(),
		Switches: []lagmeter.TimelineSwitch{{Timeline: 1, LSN: 1000}},
	}
	past := lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: 0xFFFFFFFF00}
	for _, tc := range []struct {
		origin Origin
		lost   bool
	}{{Local, true}, {Signed, true}, {Unsigned, false}} {
		var m Mark
		if tc.origin == Local {
			m.Wrote(past, time.Now(), time.Time{})
		} else {
			m.Restore(past, false, tc.origin, Now())
		}
		st, lost, e := m.Settle(m.Load(), p, Now(), true)
		if lost != tc.lost || (e.Report == Lost) != tc.lost {
			t.Errorf("origin %d: lost %v, effect %+v; want lost %v", tc.origin, lost, e, tc.lost)
		}
		if want := (lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 1000}); st.Watermark() != want || m.Load().Watermark() != want {
			t.Errorf("origin %d: the position moved to %v (mark %v), want %v", tc.origin, st.Watermark(), m.Load().Watermark(), want)
		}
		if m.Load().Origin() != tc.origin {
			t.Errorf("origin %d: became %d", tc.origin, m.Load().Origin())
		}
	}
	// Without the switch point: an unsigned token's possible loss is not
	// reported either (no MayBeLost to count and log).
	var m Mark
	m.Restore(past, false, Unsigned, Now())
	p.Switches = nil
	if st, lost, e := m.Settle(m.Load(), p, Now(), true); lost || e.Report != NoLoss || !st.Unknown() {
		t.Errorf("unsigned token, switch point unknown: lost %v, effect %+v, state %+v; want unknown, nothing reported", lost, e, st)
	}
}

// TestWriteReplacesAToken: a write through this process makes the mark its
// own: on the token's history its position replaces the token's (a token
// an honest client held is at or before it), on a newer history too; a
// token on a newer timeline than the write stays the token's.
func TestWriteReplacesAToken(t *testing.T) {
	w := lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 500}
	for _, tc := range []struct {
		name   string
		token  lagmeter.Watermark
		want   lagmeter.Watermark
		origin Origin
	}{
		{"same history, ahead", lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 0xFFFFFFFF}, w, Local},
		{"same history, behind", lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 100}, w, Local},
		{"older timeline", lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: 0xFFFFFFFF}, w, Local},
		{"newer timeline", lagmeter.Watermark{SystemID: 7, Timeline: 9, LSN: 10}, lagmeter.Watermark{SystemID: 7, Timeline: 9, LSN: 10}, Unsigned},
	} {
		var m Mark
		m.Restore(tc.token, false, Unsigned, Now())
		m.Wrote(w, time.Now(), time.Time{})
		if st := m.Load(); st.Watermark() != tc.want || st.Origin() != tc.origin {
			t.Errorf("%s: %v origin %d, want %v origin %d", tc.name, st.Watermark(), st.Origin(), tc.want, tc.origin)
		}
	}
	// A write whose position is unknown vouches for nothing.
	var m Mark
	m.Restore(w, false, Unsigned, Now())
	m.Wrote(lagmeter.Watermark{}, time.Now(), time.Time{})
	if st := m.Load(); st.Origin() != Unsigned || !st.Unknown() {
		t.Errorf("after a write of unknown position: %+v", st)
	}
}

// TestDropForged: a forged token is dropped once (one count, one callback)
// however many reads find it; a write since wins over the drop.
func TestDropForged(t *testing.T) {
	forged := lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 0xFFFFFFFF}
	var m Scopes
	calls := 0
	m.IgnoreForeign(func() { calls++ })
	m.Restore(forged, false, Unsigned, Now())
	st := m.Every().Load()
	if !m.DropForged(st) || !m.Every().Load().Empty() || !m.broad.Load().Empty() || calls != 1 {
		t.Fatalf("first drop: every %+v, broad %+v, %d calls", m.Every().Load(), m.broad.Load(), calls)
	}
	if m.DropForged(st) || calls != 1 {
		t.Fatalf("second drop of the same state: dropped, %d calls", calls)
	}
	m.Restore(forged, false, Unsigned, Now())
	st = m.Every().Load()
	w := lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 10}
	m.Wrote(false, nil, w, time.Now(), time.Time{})
	if m.DropForged(st) || m.Every().Load().Watermark() != w {
		t.Fatalf("drop after a write: dropped, or every %+v, want the write's state", m.Every().Load())
	}
}

// TestAheadAndReached: what a position of the primary says of a token's.
func TestAheadAndReached(t *testing.T) {
	p := lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 100}
	for _, tc := range []struct {
		w              lagmeter.Watermark
		ahead, reached bool
	}{
		{lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 101}, true, false},
		{lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 100}, false, true},
		{lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: 999}, false, false},
		{lagmeter.Watermark{SystemID: 7, Timeline: 3, LSN: 1}, false, false},
		{lagmeter.Watermark{SystemID: 8, Timeline: 2, LSN: 999}, false, false},
		{lagmeter.Watermark{}, false, false},
	} {
		if Ahead(tc.w, p) != tc.ahead || Reached(tc.w, p) != tc.reached {
			t.Errorf("%v against %v: ahead %v reached %v, want %v %v", tc.w, p, Ahead(tc.w, p), Reached(tc.w, p), tc.ahead, tc.reached)
		}
		if Ahead(tc.w, lagmeter.Watermark{}) || Reached(tc.w, lagmeter.Watermark{}) {
			t.Errorf("%v against no position: ahead or reached", tc.w)
		}
	}
	if got := Later(lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: 900}, p, lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 50}); got != p {
		t.Errorf("Later: %v, want %v", got, p)
	}
}

// TestUnwritten: the rule that finds a token forged. A position past the
// primary's on its timeline, on a later timeline or of another system was
// not written when the primary was seen; one at or before it, or on an
// older timeline (the primary's history may hold it), may have been.
func TestUnwritten(t *testing.T) {
	p := lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 1000}
	for _, tc := range []struct {
		w    lagmeter.Watermark
		want bool
	}{
		{lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 1000}, false},
		{lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 999}, false},
		{lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 1001}, true},
		{lagmeter.Watermark{SystemID: 7, Timeline: 3, LSN: 1}, true},
		{lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: 5000}, false},
		{lagmeter.Watermark{SystemID: 8, Timeline: 2, LSN: 1}, true},
		{lagmeter.Watermark{}, false},
	} {
		if got := Unwritten(tc.w, p); got != tc.want {
			t.Errorf("Unwritten(%v, %v) = %v, want %v", tc.w, p, got, tc.want)
		}
	}
	if Unwritten(p, lagmeter.Watermark{}) {
		t.Error("a position is unwritten by no position known")
	}
}
