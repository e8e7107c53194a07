package pgrouted

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/internal/pgpipe"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// This file reads and shares the primary's position: after a write on its
// session (insertLSN), for the read index (fetchPosition), under global
// consistency (globalPosition) or for a deferred write (resolveDeferred),
// and the positions offered to the read index (positionRead, offer*).

// positionTimeout bounds insertLSN and a fetch of the read index: past it
// the position is unknown (and the session, which pgx closes on the
// timeout, is opened again).
const positionTimeout = 5 * time.Second

// insertLSN reads the primary's WAL insert position on pc, a primary
// session, after a commit: every commit this session made is at or before
// it. 0 when it cannot be read within positionTimeout, or when nobody
// needs it (eventual consistency).
func (c *Connector) insertLSN(ctx context.Context, in *consistency.Intent, pc *pgx.Conn) lagmeter.LSN {
	if !in.Tracks {
		return 0
	}
	// The statement has run: read the position even when the caller gave
	// up, but not for ever (a primary that stalls after the write).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), positionTimeout)
	defer cancel()
	var s string
	if err := pc.QueryRow(ctx, pgpipe.InsertPositionSQL, pgx.QueryExecModeSimpleProtocol).Scan(&s); err != nil {
		return 0
	}
	lsn, err := lagmeter.ParseLSN(s)
	if err != nil {
		return 0
	}
	return lsn
}

// indexRead is what a read learned of the primary's position (the read
// index), under global consistency or for a deferred write's: kept in
// its plan, so that a retry on another replica (replan) uses the same
// position.
type indexRead struct {
	done bool // the position was asked for (or not needed)
	used bool // a fetch answered (or failed) for this read: RouteEvent.Global
	// started: the read opened the fetch's round (no read waited for it
	// before), as ReadIndex.Join reports.
	started bool
	at      time.Time          // when it was asked for (consistency.Now): the fetch started after
	wait    time.Duration      // how long the read waited for it
	wm      lagmeter.Watermark // the position, when err is nil
	err     error
}

// errNoPrimaryPosition: no primary was known to read the position from.
var errNoPrimaryPosition = errors.New("pgrouted: no primary to read the WAL position from")

// globalPosition completes rc, a read's context, with the primary's
// position under global consistency (a no-op otherwise): the read's
// position becomes the later of its watermark (a Session's, a floor) and
// the primary's, read after the read began (global consistency: a read
// sees every transaction committed on the primary before it began, by
// anyone). fetch false (Explain) reads nothing: it plans with the newest
// position the probes know, which the read will need at least. A fetch
// that fails makes the position unknown: the read goes where a session
// read whose position is unknown goes, never to a replica on faith.
func (c *Connector) globalPosition(ctx context.Context, v *view, rc *readCtx, g *indexRead, fetch bool) {
	if rc.level != consistency.Global {
		return
	}
	if !fetch {
		if w, ok := v.primaryState().Position(); ok {
			rc.st = rc.st.AtLeast(w)
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
	if g.used {
		rc.st = rc.st.WithIndex(g.wm, g.err, rc.now)
	}
}

// readPosition completes g with the primary's position read after now
// (the read index: shared with concurrent reads), and how long it waited.
func (c *Connector) readPosition(ctx context.Context, g *indexRead) {
	g.done = true
	g.at = consistency.Now()
	g.wm, g.started, g.err = c.rw.index.Join(ctx)
	g.wait = consistency.Now().Sub(g.at)
	c.rw.index.AddWait(g.wait)
}

// resolveDeferred completes pk, a replica picked for a read whose
// position is deferred (pk.pending), with that position: read now (one
// read of the primary's position after the read began, shared with
// concurrent reads: the read index), or the one d holds from the read's
// first plan. The replica then serves the read as pickReplica would have
// with the position known: without a check when its last probe shows it
// at the position, else after checking it. A position that cannot be had,
// or that is on another history than the write's, sends the read where an
// unknown position does (ReasonPositionUnknown).
func (c *Connector) resolveDeferred(ctx context.Context, v *view, rc *readCtx, pk pick, d *indexRead) pick {
	if !d.done {
		c.readPosition(ctx, d)
		if d.err == nil {
			c.counters.deferredReads.Add(1)
			c.rw.deferredUse.Read(rc.st, d.started, rc.now)
		}
	}
	if d.err != nil {
		return pick{reason: ReasonPositionUnknown}
	}
	st, ok := rc.read.ResolveDeferred(d.wm, d.at, rc.now)
	rc.st = st
	c.reportLoss(rc.read.Effect())
	if !ok {
		return pick{reason: ReasonPositionUnknown}
	}
	pk.pending, pk.wm = false, st.Watermark()
	h := pk.host
	pk.check = true
	if h.probe.Healthy {
		if ok, _ := pk.wm.ReachedBy(h.position(), v.switchPoint(pk.wm.Timeline)); ok {
			pk.check, pk.checkAge = false, 0
		}
	}
	return pk
}

// fetchPosition reads the current primary's WAL insert position, as the
// end of the last record inserted before it (lagmeter.WALLayout.RecordEnd),
// on a connection of the primary's pool (which never carries a caller's
// session state), under the primary's term: an answer that arrives after
// the term ended is refused. Behind a transaction pooler it is sent with
// the simple protocol, no named statement. It is the read index's fetch.
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
		return lagmeter.Watermark{}, fmt.Errorf("pgrouted: %s: system or timeline not known yet", dsn.Printable(st.Name))
	}
	fctx, release := t.dialContext(ctx)
	defer release()
	var text string
	var opts []any
	if c.describeOnly(t.host) {
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
		return lagmeter.Watermark{}, fmt.Errorf("pgrouted: %s: position %q", dsn.Printable(st.Name), text)
	}
	return v.primary.insertWatermark(lsn), nil
}

// positionRead offers the read index w, a position of the primary host
// read by a query sent at sent or later (a consistency.Now time taken
// before the query went out): the position after a write's commit, after
// a COMMIT. Every global read that began before sent and still waits for
// a position is served by it, instead of by a fetch. It is used only while
// host is the primary of the current term, as a fetch's answer is.
func (c *Connector) positionRead(host *host, w lagmeter.Watermark, sent time.Time) {
	if !c.rw.index.Waiting() {
		return
	}
	c.offerPosition(c.view(), host, w, sent)
}

// offerProbe offers the read index the position a probe of v's primary
// read (view.walEnd), sent at its LastSuccess: followTerms calls it for
// each new snapshot.
func (c *Connector) offerProbe(v *view) {
	if p := v.primaryState(); p != nil && p.Probed {
		if w, ok := p.Position(); ok {
			c.offerPosition(v, v.primary.host, w, p.ProbedAt)
		}
	}
}

// offerPosition offers w, read on host at sent or later, when host is v's
// primary in the current term, within its lease, and w is on its history.
// It takes no lock of the terms (it runs from Connector.view).
func (c *Connector) offerPosition(v *view, host *host, w lagmeter.Watermark, sent time.Time) {
	if !c.rw.index.Waiting() || w.IsZero() || sent.IsZero() || !v.isPrimary(host) {
		return
	}
	t := c.terms.cur.Load()
	if t == nil || t.ended() || t.host != host || t.epoch != v.snap.Epoch || !v.snap.LeaseValid(consistency.Now()) {
		return
	}
	if p := v.primary.probe; w.SystemID != p.SystemID || w.Timeline != p.Timeline {
		return
	}
	c.rw.index.Offer(w, sent)
}
