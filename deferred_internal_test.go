package pgrouted

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// deferredConnector is benchConnector (a primary and 2 standbys of system
// 7, timeline 1, replayed to 1<<30) whose caller wrote once with its
// position deferred, and whose position reads answer with fetch.
func deferredConnector(t *testing.T, fetch fetchFunc) (*Connector, *view) {
	t.Helper()
	c, v := benchConnector(&testing.B{}, dsn.SelectRoundRobin, 2)
	c.writes.wroteDeferred(lagmeter.Watermark{SystemID: 7, Timeline: 1}, monoNow())
	c.index = newReadIndex(fetch)
	t.Cleanup(c.index.close)
	return c, v
}

// pickDeferred is planReplica's pick and resolution of a read in v.
func pickDeferred(t *testing.T, c *Connector, v *view) (pick, *readCtx) {
	t.Helper()
	rc := &readCtx{ctx: context.Background(), mark: &c.writes, st: c.writes.load(), now: monoNow(), cons: dsn.ConsistencySession}
	c.settleDeferred(rc, v, true)
	pk := c.pickReplica(v, rc, true, nil)
	if pk.host == nil || !pk.pending || !pk.check {
		t.Fatalf("a read after a deferred write: pick %+v, want a replica to check once the position is read", pk)
	}
	var d indexRead
	return c.resolveDeferred(rc.ctx, v, rc, pk, &d), rc
}

// TestDeferredPositionResolves: a read after a write whose position was
// deferred reads it (once, after the read began), and serves from a
// replica without a check when the replica's last probe holds it, after a
// check when not; the mark keeps the position read.
func TestDeferredPositionResolves(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lsn   lagmeter.LSN
		check bool
	}{
		{"replica-holds-it", 1 << 29, false},
		{"replica-must-check", 1<<30 + 100, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fetches := 0
			c, v := deferredConnector(t, func(context.Context) (lagmeter.Watermark, error) {
				fetches++
				return lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: tc.lsn}, nil
			})
			pk, _ := pickDeferred(t, c, v)
			if pk.host == nil || pk.pending || pk.check != tc.check || pk.wm.LSN != tc.lsn {
				t.Fatalf("pick %+v, want a replica, check %v at %v", pk, tc.check, tc.lsn)
			}
			if fetches != 1 {
				t.Fatalf("%d position reads, want 1", fetches)
			}
			if st := c.writes.load(); st.pending || st.wm.LSN != tc.lsn {
				t.Fatalf("mark after the read: %+v, want the position read, settled", st)
			}
		})
	}
}

// TestDeferredPositionOtherHistory: a position read on another timeline
// than the write's (a failover since) cannot place the write: the read
// goes where an unknown position goes, and so do the next ones until a
// probe settles it.
func TestDeferredPositionOtherHistory(t *testing.T) {
	c, v := deferredConnector(t, func(context.Context) (lagmeter.Watermark, error) {
		return lagmeter.Watermark{SystemID: 7, Timeline: 2, LSN: 1 << 20}, nil
	})
	pk, _ := pickDeferred(t, c, v)
	if pk.host != nil || pk.reason != ReasonPositionUnknown {
		t.Fatalf("pick %+v, want none for %s", pk, ReasonPositionUnknown)
	}
	if st := c.writes.load(); st.pending || !st.unknown {
		t.Fatalf("mark %+v, want the position unknown", st)
	}
}

// TestDeferredPositionFetchFails: a position that cannot be read sends the
// read where an unknown position does, and the next read tries again.
func TestDeferredPositionFetchFails(t *testing.T) {
	c, v := deferredConnector(t, func(context.Context) (lagmeter.Watermark, error) {
		return lagmeter.Watermark{}, errors.New("no primary")
	})
	pk, _ := pickDeferred(t, c, v)
	if pk.host != nil || pk.reason != ReasonPositionUnknown {
		t.Fatalf("pick %+v, want none for %s", pk, ReasonPositionUnknown)
	}
	if st := c.writes.load(); !st.pending || st.unknown {
		t.Fatalf("mark %+v, want the write still deferred", st)
	}
}

// TestDeferredPositionSettledByProbe: a probe of the write's primary sent
// after the write read a position at or past it: no read of the position
// is made.
func TestDeferredPositionSettledByProbe(t *testing.T) {
	c, v := deferredConnector(t, func(context.Context) (lagmeter.Watermark, error) {
		t.Error("the position was read though a probe had it")
		return lagmeter.Watermark{}, errors.New("unexpected")
	})
	p := *v.hosts[0].probe
	p.LastSuccess = monoNow().Add(time.Millisecond)
	v.hosts[0].probe, v.walEnd = &p, 1<<29
	rc := &readCtx{ctx: context.Background(), mark: &c.writes, st: c.writes.load(), now: monoNow(), cons: dsn.ConsistencySession}
	c.settleDeferred(rc, v, true)
	if st := c.writes.load(); st.pending || st.wm.LSN != 1<<29 {
		t.Fatalf("mark %+v, want it settled at the probe's position", st)
	}
	if pk := c.pickReplica(v, rc, true, nil); pk.host == nil || pk.pending || pk.check {
		t.Fatalf("pick %+v, want a replica proven by its probe", pk)
	}

	// A probe on another timeline: a failover since the write.
	c, v = deferredConnector(t, nil)
	p2 := *v.hosts[0].probe
	p2.Timeline = 2
	v.hosts[0].probe = &p2
	rc = &readCtx{ctx: context.Background(), mark: &c.writes, st: c.writes.load(), now: monoNow(), cons: dsn.ConsistencySession}
	c.settleDeferred(rc, v, true)
	if st := c.writes.load(); st.pending || !st.unknown {
		t.Fatalf("mark %+v after a failover, want the position unknown", st)
	}
}

// TestDeferredMark: what a mark keeps of deferred writes and of positions
// read after them.
func TestDeferredMark(t *testing.T) {
	on := lagmeter.Watermark{SystemID: 7, Timeline: 1}
	var m mark
	t0 := monoNow()
	m.wroteDeferred(on, t0)
	if st := m.load(); !st.pending || st.pendingAt != t0 || st.unknown {
		t.Fatalf("after a deferred write: %+v", st)
	}
	// A position read by a query sent before the deferred write was
	// acknowledged does not cover it; one sent after does.
	w := lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: 100}
	m.wrote(w, time.Now(), t0.Add(-time.Millisecond))
	if st := m.load(); !st.pending {
		t.Fatalf("a position read before the deferred write settled it: %+v", st)
	}
	m.wrote(w, time.Now(), t0.Add(time.Millisecond))
	if st := m.load(); st.pending || st.wm != w {
		t.Fatalf("a position read after the deferred write did not settle it: %+v", st)
	}
	// A deferred write on another history while one is deferred: the
	// older one's position is unknown.
	m.wroteDeferred(on, t0)
	m.wroteDeferred(lagmeter.Watermark{SystemID: 7, Timeline: 2}, t0.Add(time.Millisecond))
	if st := m.load(); !st.pending || !st.unknown || st.pendingOn.Timeline != 2 {
		t.Fatalf("two histories: %+v", st)
	}
	// Without a known history the position is unknown at once.
	var m2 mark
	m2.wroteDeferred(lagmeter.Watermark{}, t0)
	if st := m2.load(); st.pending || !st.unknown {
		t.Fatalf("unknown history: %+v", st)
	}
}

// TestDeferredReadJoinsARunningPositionRead: a read right after a deferred
// write whose replicas' checks at that age mostly missed goes to the
// primary (catching-up) when it would read the position alone, and checks
// a replica when a position read is under way, which it shares.
func TestDeferredReadJoinsARunningPositionRead(t *testing.T) {
	c, v := deferredConnector(t, func(context.Context) (lagmeter.Watermark, error) {
		return lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: 1<<30 + 100}, nil
	})
	now := monoNow()
	rc := &readCtx{ctx: context.Background(), mark: &c.writes, st: c.writes.load(), now: now, cons: dsn.ConsistencySession}
	// Failed checks at the read's own write age (the write was made
	// when the connector was, some microseconds before: its bucket).
	for i := range v.hosts {
		for range 8 {
			v.hosts[i].catchUp.record(now.Sub(rc.st.lastWrite), now, false)
		}
	}
	c.catchUpSkips.Store(1) // not an exploring read
	if pk := c.pickReplica(v, rc, true, nil); pk.host != nil || pk.reason != ReasonCatchingUp {
		t.Fatalf("alone: pick %+v, want none for %s", pk, ReasonCatchingUp)
	}
	c.index.busy.Store(true)
	c.catchUpSkips.Store(1)
	if pk := c.pickReplica(v, rc, true, nil); pk.host == nil || !pk.pending || !pk.check {
		t.Fatalf("with a position read under way: pick %+v, want a replica to check", pk)
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
	now := monoNow()
	var u deferredUse
	for i := range deferredLearn {
		if !u.worth(now) {
			t.Fatalf("after %d position reads: not worth one, want worth while learning", i)
		}
		u.served(true, now)
	}
	// One read per write, each sent to the primary: not worth it.
	for range 4 * deferredWindow {
		if u.worth(now) {
			t.Fatal("each position read serving one read: worth one")
		}
		u.skip(&markState{pending: true}, now)
	}
	if !u.worth(now.Add(catchUpRecheck + time.Millisecond)) {
		t.Fatal("a record older than catchUpRecheck still stops the read")
	}
	// Then three reads per write, sent to the primary: within a window
	// of writes, the record says reading the position pays.
	paid := 0
	for i := range deferredWindow {
		st := &markState{pending: true}
		for range 3 {
			if u.worth(now) {
				paid = max(paid, i+1)
				break
			}
			u.skip(st, now)
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
	u = deferredUse{}
	for range deferredLearn {
		u.served(true, now)
	}
	for range 4 * deferredWindow {
		u.skip(&markState{pending: true}, now)
	}
	paid = 0
	for i := range 2 * deferredWindow {
		st := &markState{pending: true}
		for range 3 {
			if u.worth(now) {
				paid = i + 1
				break
			}
			u.skip(st, now)
		}
		if paid > 0 {
			break
		}
		u.read(st, true, now)
	}
	if paid == 0 {
		t.Fatalf("after %d writes read back 3 times each then read at their positions: not worth reading the positions first", 2*deferredWindow)
	}
	t.Logf("three reads per write, the fourth at the position: worth reading it after %d writes", paid)
	// A read that relies on the last position read makes them pay.
	u = deferredUse{}
	for range deferredLearn {
		u.served(true, now)
	}
	for range deferredLearn * (deferredPays - 1) {
		u.served(false, now)
	}
	if !u.worth(now) {
		t.Fatalf("position reads serving %d reads each: not worth one", deferredPays)
	}
	// A burst of reads relying on one position, then a change of
	// pattern: position reads serving one read each. Within a window, the
	// record says so.
	for range 10000 {
		u.served(false, now)
	}
	for range deferredWindow {
		u.served(true, now)
	}
	if u.worth(now) {
		t.Fatal("after a window of position reads serving one read each: still worth one")
	}
	if s := u.n.Load() >> 32; s >= deferredWindow {
		t.Fatalf("%d position reads counted, want fewer than deferredWindow (%d)", s, deferredWindow)
	}
}
