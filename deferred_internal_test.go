package pgrouted

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// deferredConnector is benchConnector (a primary and 2 standbys of system
// 7, timeline 1, replayed to 1<<30) whose caller wrote once with its
// position deferred, and whose position reads answer with fetch.
func deferredConnector(t *testing.T, fetch consistency.Fetch) (*Connector, *view) {
	t.Helper()
	c, v := benchConnector(&testing.B{}, dsn.SelectRoundRobin, 2)
	c.rw.writes.WroteDeferred(false, nil, lagmeter.Watermark{SystemID: 7, Timeline: 1}, consistency.Now())
	c.rw.index = consistency.NewReadIndex(fetch, time.Minute)
	t.Cleanup(c.rw.index.Close)
	return c, v
}

// sessionRead is the context of a session read in v, as planReplica
// makes it (its Settle of the connector's mark committed).
func sessionRead(t *testing.T, c *Connector, v *view) *readCtx {
	t.Helper()
	in := c.intentOf(noOptions)
	rc := new(readCtx)
	if err := c.readCtx(rc, context.Background(), &in, &sqlclass.AllRelations, false, v, true); err != nil {
		t.Fatal(err)
	}
	return rc
}

// pickDeferred is planReplica's pick and resolution of a read in v.
func pickDeferred(t *testing.T, c *Connector, v *view) (pick, *readCtx) {
	t.Helper()
	rc := sessionRead(t, c, v)
	pk := pickOf(c, v, rc, nil)
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
			if st := c.rw.writes.Every().Load(); st.Pending() || st.Watermark().LSN != tc.lsn {
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
	if st := c.rw.writes.Every().Load(); st.Pending() || !st.Unknown() {
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
	if st := c.rw.writes.Every().Load(); !st.Pending() || st.Unknown() {
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
	p.LastSuccess = consistency.Now().Add(time.Millisecond)
	v.hosts[0].probe, v.walEnd = &p, 1<<29
	v.setPrimaryState()
	rc := sessionRead(t, c, v)
	if st := c.rw.writes.Every().Load(); st.Pending() || st.Watermark().LSN != 1<<29 {
		t.Fatalf("mark %+v, want it settled at the probe's position", st)
	}
	if pk := pickOf(c, v, rc, nil); pk.host == nil || pk.pending || pk.check {
		t.Fatalf("pick %+v, want a replica proven by its probe", pk)
	}

	// A probe on another timeline: a failover since the write.
	c, v = deferredConnector(t, nil)
	p2 := *v.hosts[0].probe
	p2.Timeline = 2
	v.hosts[0].probe = &p2
	v.setPrimaryState()
	sessionRead(t, c, v)
	if st := c.rw.writes.Every().Load(); st.Pending() || !st.Unknown() {
		t.Fatalf("mark %+v after a failover, want the position unknown", st)
	}
}

// catchingUpRead is a session read right after a deferred write whose
// position the connector can read, on replicas whose checks at that write's
// age all failed (the write was made when the connector was, some
// microseconds before: the read's bucket).
func catchingUpRead(t *testing.T) (*Connector, *view, *readCtx) {
	t.Helper()
	c, v := deferredConnector(t, func(context.Context) (lagmeter.Watermark, error) {
		return lagmeter.Watermark{SystemID: 7, Timeline: 1, LSN: 1<<30 + 100}, nil
	})
	rc := sessionRead(t, c, v)
	for i := range v.hosts {
		for range 8 {
			v.hosts[i].catchUp.Record(rc.now.Sub(rc.st.LastWrite()), rc.now, false)
		}
	}
	return c, v, rc
}

// TestDeferredReadJoinsARunningPositionRead: a read right after a deferred
// write whose replicas' checks at that age mostly missed goes to the
// primary (catching-up) when it would read the position alone, and checks
// a replica when a position read is under way, which it shares.
func TestDeferredReadJoinsARunningPositionRead(t *testing.T) {
	c, v, rc := catchingUpRead(t)
	// The first reads that find no replica worth checking do not explore
	// (consistency.Explore: one in several does).
	if pk := pickOf(c, v, rc, nil); pk.host != nil || pk.reason != ReasonCatchingUp {
		t.Fatalf("alone: pick %+v, want none for %s", pk, ReasonCatchingUp)
	}
	// A position read under way: a read that blocks the index's fetch.
	release := make(chan struct{})
	c.rw.index = consistency.NewReadIndex(func(ctx context.Context) (lagmeter.Watermark, error) {
		<-release
		return lagmeter.Watermark{}, errors.New("released")
	}, time.Minute)
	t.Cleanup(c.rw.index.Close)
	t.Cleanup(func() { close(release) })
	go c.rw.index.Join(context.Background())
	for !c.rw.index.Waiting() {
		time.Sleep(time.Millisecond)
	}
	if pk := pickOf(c, v, rc, nil); pk.host == nil || !pk.pending || !pk.check {
		t.Fatalf("with a position read under way: pick %+v, want a replica to check", pk)
	}
}

// TestExploringReadReadsADeferredPosition: of the reads right after a
// deferred write whose replicas' checks at that age mostly missed, the one
// in consistency.ExploreEvery that explores checks a replica, reading the
// position for it, even when the deferred-position record says such reads
// do not pay: the catch-up records learn from its check alone (the reads
// they sent to the primary never counted in the deferred record). When the
// deferred record skipped the explorers too, no check was sent, and a
// connector whose first checks missed sent every read after a write to the
// primary until its records were a second old.
func TestExploringReadReadsADeferredPosition(t *testing.T) {
	c, v, rc := catchingUpRead(t)
	now := rc.now
	// Eight position reads that served one read each, just now: not worth
	// another.
	for range 8 {
		c.rw.deferredUse.Served(true, now)
	}
	if c.rw.deferredUse.Worth(now) {
		t.Fatal("the deferred record says a position read pays; want it not to")
	}
	reasons := map[Reason]int{}
	explored := 0
	for range 8 * consistency.ExploreEvery {
		pk := pickOf(c, v, rc, nil)
		switch {
		case pk.host != nil && pk.pending && pk.check:
			explored++
		case pk.host == nil:
			reasons[pk.reason]++
		default:
			t.Fatalf("pick %+v, want a replica to check once the position is read, or the primary", pk)
		}
	}
	if explored != 8 || reasons[ReasonCatchingUp] != 8*(consistency.ExploreEvery-1) {
		t.Fatalf("%d reads explored (want 8, one in %d), the others on the primary by reason %v (want %s)",
			explored, consistency.ExploreEvery, reasons, ReasonCatchingUp)
	}
}
