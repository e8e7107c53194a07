package consistency

import (
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/lagmeter"
)

// TestDeferredMark: what a mark keeps of deferred writes and of positions
// read after them.
func TestDeferredMark(t *testing.T) {
	on := lagmeter.Watermark{SystemID: 7, Timeline: 1}
	var m Mark
	t0 := Now()
	m.WroteDeferred(on, t0)
	if st := m.Load(); !st.pending || st.pendingAt != t0 || st.unknown {
		t.Fatalf("after a deferred write: %+v", st)
	}
	// A position read by a query sent before the deferred write was
	// acknowledged does not cover it; one sent after does.
	w := lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: 100}
	m.Wrote(w, time.Now(), t0.Add(-time.Millisecond))
	if st := m.Load(); !st.pending {
		t.Fatalf("a position read before the deferred write settled it: %+v", st)
	}
	m.Wrote(w, time.Now(), t0.Add(time.Millisecond))
	if st := m.Load(); st.pending || st.wm != w {
		t.Fatalf("a position read after the deferred write did not settle it: %+v", st)
	}
	// A deferred write on another history while one is deferred: the
	// older one's position is unknown.
	m.WroteDeferred(on, t0)
	m.WroteDeferred(lagmeter.Watermark{SystemID: 7, Timeline: 2}, t0.Add(time.Millisecond))
	if st := m.Load(); !st.pending || !st.unknown || st.pendingOn.Timeline != 2 {
		t.Fatalf("two histories: %+v", st)
	}
	// Without a known history the position is unknown at once.
	var m2 Mark
	m2.WroteDeferred(lagmeter.Watermark{}, t0)
	if st := m2.Load(); st.pending || !st.unknown {
		t.Fatalf("unknown history: %+v", st)
	}
}

// TestDeferredUseRecord: the record of what deferred positions' reads
// served says to read one while it is too short to tell, while they serve
// deferredPays reads each, and once its last one is older than
// catchUpRecheck. The reads it sends to the primary count as the
// positions' reads would have: a process that starts reading more after
// each write makes them pay again. Its counts are halved as they reach
// deferredWindow, so it follows a change of pattern.
func TestDeferredUseRecord(t *testing.T) {
	now := Now()
	var u DeferredUse
	for i := range deferredLearn {
		if !u.Worth(now) {
			t.Fatalf("after %d position reads: not worth one, want worth while learning", i)
		}
		u.Served(true, now)
	}
	// One read per write, each sent to the primary: not worth it.
	for range 4 * deferredWindow {
		if u.Worth(now) {
			t.Fatal("each position read serving one read: worth one")
		}
		u.Skip(&State{pending: true}, now)
	}
	if !u.Worth(now.Add(catchUpRecheck + time.Millisecond)) {
		t.Fatal("a record older than catchUpRecheck still stops the read")
	}
	// Then three reads per write, sent to the primary: within a window
	// of writes, the record says reading the position pays.
	paid := 0
	for i := range deferredWindow {
		st := &State{pending: true}
		for range 3 {
			if u.Worth(now) {
				paid = max(paid, i+1)
				break
			}
			u.Skip(st, now)
		}
		if paid > 0 {
			break
		}
	}
	if paid == 0 {
		t.Fatalf("after %d writes read back 3 times each: not worth reading their positions", deferredWindow)
	}
	// The same after a window of one read per write, but each write's
	// fourth read reads its position (it came after the replicas' catch-up
	// age): one position read per write, not two (read after skip), and
	// the record says reading them pays within two windows of writes.
	u = DeferredUse{}
	for range deferredLearn {
		u.Served(true, now)
	}
	for range 4 * deferredWindow {
		u.Skip(&State{pending: true}, now)
	}
	paid = 0
	for i := range 2 * deferredWindow {
		st := &State{pending: true}
		for range 3 {
			if u.Worth(now) {
				paid = i + 1
				break
			}
			u.Skip(st, now)
		}
		if paid > 0 {
			break
		}
		u.Read(st, true, now)
	}
	if paid == 0 {
		t.Fatalf("after %d writes read back 3 times each then read at their positions: not worth reading the positions first", 2*deferredWindow)
	}
	t.Logf("three reads per write, the fourth at the position: worth reading it after %d writes", paid)
	// A read that relies on the last position read makes them pay.
	u = DeferredUse{}
	for range deferredLearn {
		u.Served(true, now)
	}
	for range deferredLearn * (deferredPays - 1) {
		u.Served(false, now)
	}
	if !u.Worth(now) {
		t.Fatalf("position reads serving %d reads each: not worth one", deferredPays)
	}
	// A burst of reads relying on one position, then a change of
	// pattern: position reads serving one read each. Within a window, the
	// record says so.
	for range 10000 {
		u.Served(false, now)
	}
	for range deferredWindow {
		u.Served(true, now)
	}
	if u.Worth(now) {
		t.Fatal("after a window of position reads serving one read each: still worth one")
	}
	if s := u.n.Load() >> 32; s >= deferredWindow {
		t.Fatalf("%d position reads counted, want fewer than deferredWindow (%d)", s, deferredWindow)
	}
}
