package pgrouted

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/internal/pgpipe"
	"github.com/pgrouted/pgrouted/lagmeter"
	"github.com/pgrouted/pgrouted/topology"
)

// This file is read-your-writes: the position of the last writes (of the
// Connector, or of a Session) and how it moves after a commit, after a
// failover, and when it is unknown; the position a read needs from a
// replica follows from it (readCtx). The check of a replica's position on
// its own connection is on the replica path (replica.go).

// switchPoint is where the current primary's timeline history left
// timeline tli, or 0 when it is not known: a replica on a newer timeline
// than a watermark is then not known to hold it (see
// lagmeter.Watermark.ReachedBy). Once a primary on the newer timeline is
// known, readCtx has moved the watermark to its timeline already.
func (v *view) switchPoint(tli uint32) lagmeter.LSN {
	if v.primary == nil {
		return 0
	}
	sp, _ := lagmeter.SwitchPoint(v.primary.probe.Switches, tli)
	return sp
}

// readCtx is what the eligibility of a read depends on beyond the topology.
type readCtx struct {
	ctx    context.Context
	mark   *mark // the session's, or the connector's
	st     *markState
	budget lagmeter.Budget
	now    time.Time
	forced bool        // forced to a replica: a saturated one still serves
	lost   bool        // the caller's last write was found lost in a failover
	cons   Consistency // the read's consistency (global.go: WithConsistency)
}

// clockBase is a reading of the clock taken at start, with its monotonic
// part: see monoNow.
var clockBase = time.Now()

// monoNow is time.Now for comparisons with other times read in this process
// (probe times, write times): its monotonic reading is exact, and it costs
// one clock read where time.Now costs two (wall and monotonic), a tenth of
// a read's routing decision on some virtual machines. Its wall reading
// drifts from the real one by what the wall clock was set by since start:
// never print it.
func monoNow() time.Time { return clockBase.Add(time.Since(clockBase)) }

// readCtx fills rc, a zero readCtx, with what the eligibility of a read in
// ctx, whose options are o, depends on in view v. With commit false (Explain) it
// changes nothing: what it learns about the caller's position stays local.
func (c *Connector) readCtx(rc *readCtx, ctx context.Context, o *options, v *view, commit bool) error {
	rc.ctx, rc.budget, rc.now, rc.forced, rc.cons = ctx, c.budget, monoNow(), o.route == Replica, c.consistencyOf(o)
	rc.mark = &c.writes
	if o.session != nil {
		rc.mark = &o.session.m
	}
	if o.hasMaxLag {
		d := o.maxLag
		if d <= 0 {
			d = -1
		}
		rc.budget = rc.budget.Min(lagmeter.Budget{MaxTime: d})
	}
	rc.st = rc.mark.load()
	if w := rc.st.wm; !w.IsZero() && rc.mark != &c.writes {
		if sys := v.systemID(); sys != 0 && w.SystemID != sys {
			var err error
			if rc.st, err = o.session.dropForeign(rc.st, sys, commit); err != nil {
				return err
			}
		}
	}
	if w := rc.st.wm; !w.IsZero() && v.primary != nil {
		p := v.primary.probe
		if p.SystemID == w.SystemID && p.Timeline > w.Timeline {
			c.crossTimeline(rc, p, w, commit)
		}
	}
	if rc.st.unknown && v.primary != nil {
		// A primary probe sent after the write position became unknown
		// read a position at or after that write.
		p := v.primary.probe
		if p.InsertLSN != 0 && p.SystemID != 0 && p.Timeline != 0 && p.LastSuccess.After(rc.st.unknownAt) {
			w := lagmeter.Watermark{SystemID: p.SystemID, Timeline: p.Timeline, LSN: v.walEnd}
			if !commit {
				next := *rc.st
				next.unknown, next.wm = false, later(rc.st.wm, w)
				rc.st = &next
				return nil
			}
			rc.st = rc.mark.resolve(rc.st, w)
		}
	}
	c.settleDeferred(rc, v, commit) // deferred.go
	return nil
}

// crossTimeline handles a read-your-writes position w written on an older
// timeline than the primary p's: a failover happened since.
//
//   - w at or before the point where p's history left w's timeline (known
//     exactly from the timeline history file, or as a lower bound from the
//     replay position p had reached as a standby): the write survived; w
//     moves to p's timeline, where the same position holds it.
//   - w past the exact switch point: the write is not in the new history;
//     it was lost with the old primary. pgrouted says so (RouteEvent.WriteLost,
//     Stats.LostWrites, a warning in the log) and requires what survived:
//     the switch point, on p's timeline.
//   - otherwise nobody can tell: the position becomes unknown (reads go to
//     the primary, which shows what survived) until a primary probe sent
//     from now on supplies a position on the new timeline, with a warning
//     that the write may have been lost.
func (c *Connector) crossTimeline(rc *readCtx, p *topology.HostState, w lagmeter.Watermark, commit bool) {
	sp, exact := lagmeter.SwitchPoint(p.Switches, w.Timeline)
	if !exact && p.SwitchFloor.Timeline == w.Timeline {
		sp = p.SwitchFloor.LSN
	}
	next := *rc.st
	switch {
	case sp != 0 && w.LSN <= sp:
		next.wm = lagmeter.Watermark{SystemID: w.SystemID, Timeline: p.Timeline, LSN: w.LSN}
	case exact:
		next.wm = lagmeter.Watermark{SystemID: w.SystemID, Timeline: p.Timeline, LSN: sp}
		rc.lost = true
	default:
		next.wm, next.unknown, next.unknownAt = lagmeter.Watermark{}, true, rc.now
	}
	if !commit {
		rc.st = &next
		return
	}
	st, won := rc.mark.swap(rc.st, &next)
	rc.st = st
	if !won {
		return
	}
	switch {
	case rc.lost:
		c.counters.lostWrites.Add(1)
		if c.cfg.Logger != nil {
			c.cfg.Logger.Warn("pgrouted: a write acknowledged before a failover is not in the new primary's history: it was lost with the old primary",
				"watermark", w.String(), "switchPoint", sp.String(), "timeline", p.Timeline)
		}
	case next.unknown:
		c.mayHaveLost(w, p.Timeline)
	}
}

// mayHaveLost reports that writes acknowledged before a failover, the
// last at w (its LSN 0 when its position was deferred and never read),
// may have been lost: the primary is on timeline tli now, and whether they
// are in its history cannot be told. Stats.TimelineResets counts it; the
// log says it once per new timeline, not once per request.
func (c *Connector) mayHaveLost(w lagmeter.Watermark, tli uint32) {
	c.counters.timelineResets.Add(1)
	if last := c.loggedTimeline.Load(); tli > last && c.loggedTimeline.CompareAndSwap(last, tli) && c.cfg.Logger != nil {
		c.cfg.Logger.Warn("pgrouted: writes acknowledged before a failover may have been lost; reading them from the primary until the new timeline's position is known",
			"watermark", w.String(), "timeline", tli)
	}
}

// systemID is the system identifier the probes read, or 0.
func (v *view) systemID() uint64 {
	if v.primary != nil && v.primary.probe.SystemID != 0 {
		return v.primary.probe.SystemID
	}
	for i := range v.hosts {
		if id := v.hosts[i].probe.SystemID; id != 0 {
			return id
		}
	}
	return 0
}

// tracksWrites reports whether a write made with ctx moves the
// read-your-writes positions: only then is the position after its commit
// read. That is unless both pgrouted_consistency and ctx's consistency
// (WithConsistency) are eventual: a Session is a floor under global
// consistency, and a request may select session in a process whose
// default is global. Whether a read needs a position is the read's
// consistency (readCtx.cons).
func (c *Connector) tracksWrites(ctx context.Context) bool {
	return c.cfg.Consistency != dsn.ConsistencyEventual || c.consistency(ctx) != dsn.ConsistencyEventual
}

// wrote records a committed write on primary host at insert position lsn
// (0: unknown), for the connector and for the session of ctx, if any. sent
// is a time (monoNow) taken before the query that read lsn was sent (zero
// when none is known): the position also serves the global reads that
// began before it and still wait for one (Connector.positionRead).
func (c *Connector) wrote(ctx context.Context, host *host, lsn lagmeter.LSN, sent time.Time) {
	if !c.tracksWrites(ctx) {
		return
	}
	var w lagmeter.Watermark
	if hv := c.view().of(host); lsn != 0 && hv != nil {
		if h := hv.probe; h.SystemID != 0 && h.Timeline != 0 {
			w = lagmeter.Watermark{SystemID: h.SystemID, Timeline: h.Timeline, LSN: h.Layout.RecordEnd(lsn)}
		}
	}
	c.positionRead(host, w, sent) // global.go
	now := time.Now()
	c.writes.wrote(w, now, sent)
	if s := sessionFrom(ctx); s != nil {
		s.m.wrote(w, now, sent)
	}
}

// wroteAfter raises the watermarks after one statement (or COMMIT) read
// its position pipelined: to pos when it succeeded; not at all when the
// server refused it (nothing committed) or it was never sent (an argument
// that cannot be encoded); to an unknown position when the connection
// failed under it (the answer was lost, not the commit). sent: see wrote.
func (c *Connector) wroteAfter(ctx context.Context, host *host, pos lagmeter.LSN, sent time.Time, err error) {
	switch {
	case err == nil:
		c.wrote(ctx, host, pos, sent)
	case pgpipe.IsPgError(err) || pgpipe.IsEncodeError(err) || errors.Is(err, pgx.ErrTxCommitRollback) || errors.Is(err, driver.ErrBadConn):
	default:
		c.wrote(ctx, host, 0, time.Time{})
	}
}

// wroteThen records a committed write on primary host whose position is
// read now on pc, a primary session, after it (insertLSN), unless it is
// deferred (deferred.go).
func (c *Connector) wroteThen(ctx context.Context, host *host, pc *pgx.Conn) {
	if c.deferPosition(ctx) {
		c.wroteDeferred(ctx, host)
		return
	}
	sent := monoNow()
	c.wrote(ctx, host, c.insertLSN(ctx, pc), sent)
}

// positionTimeout bounds insertLSN: past it the position is unknown (and
// the session, which pgx closes on the timeout, is opened again).
const positionTimeout = 5 * time.Second

// insertLSN reads the primary's WAL insert position on pc, a primary
// session, after a commit: every commit this session made is at or before
// it. 0 when it cannot be read within positionTimeout, or when nobody
// needs it (eventual consistency).
func (c *Connector) insertLSN(ctx context.Context, pc *pgx.Conn) lagmeter.LSN {
	if !c.tracksWrites(ctx) {
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

// mark is the position of the last writes of a Session or a Connector,
// published as an immutable state.
type mark struct {
	p atomic.Pointer[markState]
}

type markState struct {
	wm        lagmeter.Watermark
	unknown   bool      // the last write's position could not be read
	unknownAt time.Time // since when; a primary probe sent after it resolves it
	lastWrite time.Time // for pgrouted_pin_after_write

	// pending: writes since wm left their position to be read when a read
	// needs it (deferred.go), the last one acknowledged before pendingAt
	// (monoNow) on the history pendingOn (SystemID and Timeline; no LSN).
	pending   bool
	pendingAt time.Time
	pendingOn lagmeter.Watermark
	// fetched: wm is a deferred position read for a read (resolveDeferred),
	// with no write since: the reads that rely on it count for the
	// position's read (deferredUse).
	fetched bool
}

var zeroMark = &markState{}

func (m *mark) load() *markState {
	if st := m.p.Load(); st != nil {
		return st
	}
	return zeroMark
}

// wrote records a committed write at w (zero: its position is unknown),
// read by a query sent at sent (monoNow; zero when not known): a deferred
// position on w's history acknowledged before sent is at or before w.
func (m *mark) wrote(w lagmeter.Watermark, now, sent time.Time) {
	for {
		cur := m.p.Load()
		next := &markState{lastWrite: now}
		if cur != nil {
			*next = *cur
			next.lastWrite, next.fetched = now, false
		}
		if w.IsZero() {
			next.unknown, next.unknownAt = true, now
		} else {
			next.wm = later(next.wm, w)
			if next.pending && !sent.IsZero() && sent.After(next.pendingAt) && sameHistory(w, next.pendingOn) {
				next.pending = false
			}
		}
		if m.p.CompareAndSwap(cur, next) {
			return
		}
	}
}

// wroteDeferred records a committed write acknowledged before now
// (monoNow) on the history on (SystemID and Timeline; zero when not
// known: its position is then unknown), whose position is deferred
// (deferred.go). An older deferred position on another history becomes
// unknown: the mark keeps one history's.
func (m *mark) wroteDeferred(on lagmeter.Watermark, now time.Time) {
	for {
		cur := m.p.Load()
		next := &markState{}
		if cur != nil {
			*next = *cur
		}
		next.lastWrite, next.fetched = now, false
		switch {
		case on.SystemID == 0 || on.Timeline == 0:
			next.unknown, next.unknownAt = true, now
		case next.pending && !sameHistory(on, next.pendingOn):
			next.unknown, next.unknownAt = true, now
			fallthrough
		default:
			next.pending, next.pendingAt, next.pendingOn = true, now, on
		}
		if m.p.CompareAndSwap(cur, next) {
			return
		}
	}
}

// resolve replaces an unknown position by a safe one, once a primary probe
// sent after it became unknown has read the primary's position.
func (m *mark) resolve(st *markState, w lagmeter.Watermark) *markState {
	next := *st
	next.unknown = false
	next.wm = later(st.wm, w)
	if m.p.CompareAndSwap(st, &next) {
		return &next
	}
	return m.load()
}

// swap replaces st by next (see Connector.crossTimeline) and reports
// whether it did; when another goroutine changed the mark first, it returns
// the mark as that one left it.
func (m *mark) swap(st, next *markState) (*markState, bool) {
	if m.p.CompareAndSwap(st, next) {
		return next, true
	}
	return m.load(), false
}

// later returns the watermark that implies the other: the same history's
// larger position, or the newer history's.
func later(a, b lagmeter.Watermark) lagmeter.Watermark {
	switch {
	case a.IsZero():
		return b
	case b.IsZero():
		return a
	case a.SystemID != b.SystemID:
		return b // the cluster was replaced: the newest write tells
	case a.Timeline != b.Timeline:
		if b.Timeline > a.Timeline {
			return b
		}
		return a
	case b.LSN > a.LSN:
		return b
	}
	return a
}
