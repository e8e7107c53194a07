package pgrouted

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/internal/pgpipe"
	"github.com/pgrouted/pgrouted/lagmeter"
	"github.com/pgrouted/pgrouted/topology"
)

// This file is global consistency (pgrouted_consistency=global,
// WithConsistency): a read sees every transaction committed on the primary
// before it began, by anyone. After the read begins, the primary's WAL
// position is read (shared among concurrent reads: readindex.go); the read
// then needs that position on its replica, as a session read needs its
// watermark: proven by a probe, checked inline, or waited for
// (pgrouted_replica_wait); else it runs on the primary, or fails with
// ErrNoReplica under pgrouted_fallback=error.
//
// The position is read on a connection of the primary's pool, which never
// carries a caller's session state, as a statement prepared once per
// connection as pgx prepares its own (the simple protocol behind a
// transaction pooler, where no named statement is sent), under the
// primary's term:
// when the term ends during the read, its answer is not used. A read whose
// position cannot be had (no primary, the fetch failed) goes where a
// session read whose position is unknown goes: to the primary (waiting for
// one as writes do), or ErrNoReplica (position-unknown) under
// pgrouted_fallback=error; never to a replica on faith.

// Consistency is what a read on a replica must see: pgrouted_consistency,
// or WithConsistency for one request.
type Consistency = dsn.Consistency

// The consistencies, for [WithConsistency].
const (
	// ConsistencySession: a read sees the writes of its Session (see
	// [WithSession]), or else of its Connector, made before it.
	ConsistencySession = dsn.ConsistencySession
	// ConsistencyEventual: a read may run on any replica inside the
	// staleness budget.
	ConsistencyEventual = dsn.ConsistencyEventual
	// ConsistencyGlobal: a read sees every transaction committed on the
	// primary before it began, by any client; a Session in the context is
	// a floor.
	ConsistencyGlobal = dsn.ConsistencyGlobal
)

// indexRead is what a read learned of the primary's position (read
// index, readindex.go), under global consistency or for a deferred
// write's (deferred.go): kept in its plan, so that a retry on another
// replica (replan) uses the same position.
type indexRead struct {
	done bool // the position was asked for (or not needed)
	used bool // a fetch answered (or failed) for this read: RouteEvent.Global
	// started: the read opened the fetch's round (no read waited for it
	// before), as readIndex.join reports.
	started bool
	wait    time.Duration      // how long the read waited for it
	wm      lagmeter.Watermark // the position, when err is nil
	err     error
}

// errNoPrimaryPosition: no primary was known to read the position from.
var errNoPrimaryPosition = errors.New("pgrouted: no primary to read the WAL position from")

// globalPosition completes rc, a read's context, with the primary's
// position under global consistency (a no-op otherwise): the read's
// position becomes the later of its watermark (a Session's, a floor) and
// the primary's, read after the read began. fetch false (Explain) reads
// nothing: it plans with the newest position the probes know, which the
// read will need at least. A fetch that fails makes the position unknown.
func (c *Connector) globalPosition(ctx context.Context, v *view, rc *readCtx, g *indexRead, fetch bool) {
	if rc.cons != ConsistencyGlobal {
		return
	}
	if !fetch {
		if w, ok := probedPosition(v); ok {
			next := *rc.st
			next.wm = later(next.wm, w)
			rc.st = &next
		}
		return
	}
	if !g.done {
		g.done = true
		if !c.mayServeGlobal(v, rc) {
			// No replica could serve it whatever the position: the
			// primary will, and needs none.
			return
		}
		c.readPosition(ctx, g)
		g.used = true
	}
	if !g.used {
		return
	}
	next := *rc.st
	if g.err != nil {
		next.unknown, next.unknownAt = true, rc.now
	} else {
		// The position read after the read began is at or past every
		// write acknowledged before, an unknown one included, and a
		// deferred one (deferred.go) on its history.
		next.unknown, next.wm = false, later(next.wm, g.wm)
		if next.pending && sameHistory(g.wm, next.pendingOn) {
			next.pending = false
		}
	}
	rc.st = &next
}

// readPosition completes g with the primary's position read after now
// (the read index: shared with concurrent reads), and how long it waited.
func (c *Connector) readPosition(ctx context.Context, g *indexRead) {
	g.done = true
	start := monoNow()
	g.wm, g.started, g.err = c.index.join(ctx)
	g.wait = monoNow().Sub(start)
	c.index.waited.Add(uint64(g.wait))
}

// mayServeGlobal reports whether a replica might serve a read of rc once
// its position is known: a standby that may serve reads, whose circuit is
// closed and whose pool is not exhausted (pickReplica's first conditions;
// it applies them all after the fetch).
func (c *Connector) mayServeGlobal(v *view, rc *readCtx) bool {
	for i := range v.hosts {
		h := &v.hosts[i]
		if h.probe.Role != topology.RoleStandby || h == v.primary || h.probe.NoReads {
			continue
		}
		if h.breaker.Allow() && (rc.forced || h.inflight() < h.maxConns) {
			return true
		}
	}
	return false
}

// probedPosition is the end of the WAL the primary had written at its last
// probe (view.walEnd), as a watermark.
func probedPosition(v *view) (lagmeter.Watermark, bool) {
	if v.primary == nil {
		return lagmeter.Watermark{}, false
	}
	p := v.primary.probe
	if v.walEnd == 0 || p.SystemID == 0 || p.Timeline == 0 {
		return lagmeter.Watermark{}, false
	}
	return lagmeter.Watermark{SystemID: p.SystemID, Timeline: p.Timeline, LSN: v.walEnd}, true
}

// fetchPosition reads the current primary's WAL insert position, as the
// end of the last record inserted before it (lagmeter.WALLayout.RecordEnd),
// on a connection of the primary's pool, under the primary's term: an
// answer that arrives after the term ended is refused.
func (c *Connector) fetchPosition(ctx context.Context) (lagmeter.Watermark, error) {
	t := c.liveTerm()
	if t == nil {
		return lagmeter.Watermark{}, errNoPrimaryPosition
	}
	v := c.view()
	if !v.isPrimary(t.host) || v.snap.Epoch != t.epoch {
		return lagmeter.Watermark{}, errNoPrimaryPosition
	}
	st := v.primary.probe
	if st.SystemID == 0 || st.Timeline == 0 {
		return lagmeter.Watermark{}, fmt.Errorf("pgrouted: %s: system or timeline not known yet", st.Name)
	}
	fctx, release := t.dialContext(ctx)
	defer release()
	var text string
	var opts []any
	if c.describeOnly(t.host) {
		// Behind a pooler: the simple protocol, no named statement.
		opts = append(opts, pgx.QueryExecModeSimpleProtocol)
	}
	err := t.host.pool.AcquireFunc(fctx, func(pc *pgxpool.Conn) error {
		return pc.Conn().QueryRow(fctx, pgpipe.InsertPositionSQL, opts...).Scan(&text)
	})
	if err != nil {
		return lagmeter.Watermark{}, err
	}
	if t.ended() {
		return lagmeter.Watermark{}, errNoPrimaryPosition
	}
	lsn, err := lagmeter.ParseLSN(text)
	if err != nil || lsn == 0 {
		return lagmeter.Watermark{}, fmt.Errorf("pgrouted: %s: position %q", st.Name, text)
	}
	return lagmeter.Watermark{SystemID: st.SystemID, Timeline: st.Timeline, LSN: st.Layout.RecordEnd(lsn)}, nil
}

// positionRead offers the read index (readindex.go) w, a position of the
// primary host read by a query sent at sent or later (a monoNow time taken
// before the query went out): the position after a write's commit, after
// a COMMIT. Every global read that began before sent and still waits for
// a position is served by it, instead of by a fetch. It is used only while
// host is the primary of the current term, as a fetch's answer is.
func (c *Connector) positionRead(host *host, w lagmeter.Watermark, sent time.Time) {
	if !c.index.waiting() {
		return
	}
	c.offerPosition(c.view(), host, w, sent)
}

// offerProbe offers the read index the position a probe of v's primary
// read (view.walEnd), sent at its LastSuccess. Called once per snapshot.
func (c *Connector) offerProbe(v *view) {
	if v.primary == nil {
		return
	}
	if w, ok := probedPosition(v); ok && v.primary.probe.InsertLSN != 0 {
		c.offerPosition(v, v.primary.host, w, v.primary.probe.LastSuccess)
	}
}

// offerPosition offers w, read on host at sent or later, when host is v's
// primary in the current term, within its lease, and w is on its history.
// It takes no lock of the terms (it runs from Connector.view).
func (c *Connector) offerPosition(v *view, host *host, w lagmeter.Watermark, sent time.Time) {
	if !c.index.waiting() || w.IsZero() || sent.IsZero() || !v.isPrimary(host) {
		return
	}
	t := c.terms.cur.Load()
	if t == nil || t.ended() || t.host != host || t.epoch != v.snap.Epoch || !v.snap.LeaseValid(monoNow()) {
		return
	}
	if p := v.primary.probe; w.SystemID != p.SystemID || w.Timeline != p.Timeline {
		return
	}
	c.index.offer(w, sent)
}
