package pgrouted

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/internal/pgpipe"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
	"github.com/pgrouted/pgrouted/lagmeter"
	"github.com/pgrouted/pgrouted/topology"
)

// This file is the glue between read-your-writes (internal/consistency,
// which owns the state and every rule that moves it) and what only the
// root package knows: the views of the topology, the hosts, the primary's
// terms, the counters and the log. It resolves a statement's Intent, hands
// the state transitions what the last probe of the primary showed, reads
// the primary's position (after a write, for the read index), and reports
// the losses the transitions find.

// readYourWrites is a Connector's share of read-your-writes: the state of
// the writes through it (a Session has its own) and the records its reads
// share.
type readYourWrites struct {
	writes consistency.Scopes
	// level is pgrouted_consistency's (setIntent).
	level consistency.Level
	// explore counts the reads that found no replica worth checking
	// (worthChecking); deferredUse is what the reads of deferred positions
	// served; index shares the reads of the primary's position among
	// global reads (and deferred ones).
	explore     consistency.Explore
	deferredUse consistency.DeferredUse
	index       *consistency.ReadIndex
	// loggedTimeline is the last timeline for which a possible loss of
	// writes was logged (reportLoss).
	loggedTimeline atomic.Uint32
	// lost is the positions of the last lost writes reported (reportLoss).
	lost lostSet
	// forged counts the Sessions' tokens whose position the primary never
	// wrote (vouch, dropForeign): Stats.ForgedTokens.
	forged atomic.Uint64
	// scope is what reads without a Session paid for the writes of the
	// whole process (noteProcessScope).
	scope processScope
}

// processScope counts the reads without a Session (reads) and those of
// them that ran on the primary, or waited, for lack of the Connector's
// writes (blocked); warned is set once the log said so.
type processScope struct {
	reads, blocked atomic.Uint64
	lastReads      atomic.Uint64 // reads at the last look (processScopeWindow)
	lastBlocked    atomic.Uint64
	warned         atomic.Bool
}

// processScopeWindow is how many reads without a Session the share of
// blocked ones is judged over.
const processScopeWindow = 1000

// noteProcessScope counts a read without a Session under session
// consistency, planned p and run as cl: blocked when it ran on the primary
// for lack of a position (behind, catching up, a position deferred or
// unknown), or waited on its replica. When, over a window of such reads,
// more than half were blocked, the log says once why the replicas sit idle
// and what to do.
func (c *Connector) noteProcessScope(p *plan, cl *call) {
	sc := &c.rw.scope
	blocked := cl.waited > 0
	if cl.primary {
		switch p.reason {
		case ReasonBehind, ReasonCatchingUp, ReasonDeferred, ReasonPositionUnknown:
			blocked = true
		}
	}
	if blocked {
		sc.blocked.Add(1)
	}
	n := sc.reads.Add(1)
	if n%processScopeWindow != 0 || sc.warned.Load() {
		return
	}
	b := sc.blocked.Load()
	dr, db := n-sc.lastReads.Swap(n), b-sc.lastBlocked.Swap(b)
	if 2*db > dr && sc.warned.CompareAndSwap(false, true) {
		c.logWarn("pgrouted: most reads without a Session ran on the primary, or waited, because the replicas lacked this process's latest writes to what they read (writes of any request): give each request or user a Session of its own (pgrouted.WithSession; pgroutedhttp.Middleware; pgroutedgrpc's interceptors), so that a read needs its own writes only",
			"reads", dr, "onPrimaryOrWaited", db)
	}
}

// setIntent resolves in place the read-your-writes intent of a statement
// whose context has options o: once per statement (or transaction), in its
// plan.
func (c *Connector) setIntent(in *consistency.Intent, o *options) {
	in.Level, in.Scopes, in.Wait, in.Session = c.rw.level, &c.rw.writes, c.cfg.ReplicaWait, false
	if o.consistency != "" {
		in.Level = levelOf(c.consistencyOf(o))
	}
	in.Tracks = c.rw.level != consistency.Eventual || in.Level != consistency.Eventual
	if o.session != nil {
		in.Scopes, in.Session = &o.session.s, true
	}
	if o.hasWait {
		in.Wait = max(o.replicaWait, 0)
	}
	in.MaxLag, in.HasMaxLag = o.maxLag, o.hasMaxLag
}

// levelOf is consistency's level of a pgrouted_consistency value.
func levelOf(c Consistency) consistency.Level {
	switch c {
	case ConsistencyEventual:
		return consistency.Eventual
	case ConsistencyGlobal:
		return consistency.Global
	case ConsistencyCausal:
		return consistency.Causal
	}
	return consistency.Session
}

// readCtx is what the eligibility of a read depends on beyond the topology.
type readCtx struct {
	ctx    context.Context
	level  consistency.Level  // the plan's Intent's (not a pointer to it: the plan stays on its caller's stack)
	wait   time.Duration      // and its replica wait
	read   consistency.Read   // the marks of in.Scopes the read needs
	st     *consistency.State // the read's state: their combination
	budget lagmeter.Budget
	now    time.Time
	forced bool // forced to a replica: a saturated one still serves
	lost   bool // the caller's last write was found lost in a failover
}

// readCtx fills rc, a zero readCtx, with what the eligibility of a read
// of the relations reads with intent in (forced to a replica: forced)
// depends on in view v. With commit false (Explain) it changes nothing:
// what it learns about the caller's position stays local, and in is
// marked a dry run (nothing the plan takes needs giving back). With commit
// true a Session's position restored from a token is vouched for first
// (vouch).
func (c *Connector) readCtx(rc *readCtx, ctx context.Context, in *consistency.Intent, reads *sqlclass.Scope, forced bool, v *view, commit bool) error {
	rc.ctx, rc.level, rc.wait, rc.budget, rc.now, rc.forced = ctx, in.Level, in.Wait, c.budget, consistency.Now(), forced
	in.DryRun = !commit
	if in.HasMaxLag {
		d := in.MaxLag
		if d <= 0 {
			d = -1
		}
		rc.budget = rc.budget.Min(lagmeter.Budget{MaxTime: d})
	}
	rc.read.Begin(in.Scopes, reads.Named, reads.Keys[:reads.N])
	if in.Session {
		if every := rc.read.Every(); !every.Watermark().IsZero() {
			if sys := v.systemID(); sys != 0 && every.Watermark().SystemID != sys {
				if err := c.dropForeign(in, every, sys, commit); err != nil {
					return err
				}
				if !commit {
					rc.st = rc.read.Blank()
					return nil
				}
			}
		}
		if every := rc.read.Every(); commit && every.Origin() != consistency.Local {
			if err := c.vouch(ctx, v, in, every); err != nil {
				return err
			}
		}
	}
	rc.st, rc.lost = rc.read.Settle(v.primaryState(), rc.now, commit)
	c.reportLoss(rc.read.Effect())
	return nil
}

// vouch checks the position of every, the state of the writes of in's
// Session restored from a token, against the primary, by one rule
// (consistency.Unwritten): a position the primary had not written when it
// was seen (past its position on its history, on a later timeline, on
// another system) is forged. Unwritten by the newest position of the
// primary this process knows (knownPosition), or when it knows none yet
// (no probe of the primary has read one: a process just started, a probe
// failing under load), it asks the primary for its position (the read
// index's shared fetch: a flood of such tokens costs one query per fetch
// round trip, not one per read); unwritten by that answer too, the token
// is forged: the read plans as one without a token (Scopes.DropForged, or
// dropForeign for another system), and it counts once
// (Stats.ForgedTokens, and the Session's IgnoreForeign callback). A token
// written after the read began cannot be past a position read after that,
// nor on a later timeline. When the position cannot be had (no primary, a
// failover under way), the token stays: it costs only its own reads (they
// go to the primary), and changes nothing shared (a wait that misses it,
// noted only for positions the primary reached: waited; a failover never
// reports an unsigned one lost: Mark.Settle). The error is dropForeign's.
func (c *Connector) vouch(ctx context.Context, v *view, in *consistency.Intent, every *consistency.State) error {
	w := every.Watermark()
	if known := c.knownPosition(v); w.IsZero() || (!known.IsZero() && !consistency.Unwritten(w, known)) {
		return nil
	}
	pos, err := c.rw.index.Ask(ctx)
	if err != nil || !consistency.Unwritten(w, pos) {
		return nil
	}
	if pos.SystemID != w.SystemID {
		return c.dropForeign(in, every, pos.SystemID, true)
	}
	if in.Scopes.DropForged(every) {
		c.rw.forged.Add(1)
	}
	return nil
}

// dropForeign forgets every, the state of the writes of in's Session,
// which names another system than sys, the cluster's (when commit is
// true; for Explain the read plans without it and nothing changes), and
// counts a token once as vouch counts a forged one (Stats.ForgedTokens,
// the IgnoreForeign callback): the primary never wrote its position. A
// Session that does not ignore foreign tokens (IgnoreForeign) is an error
// wrapping ErrForeignSession instead.
func (c *Connector) dropForeign(in *consistency.Intent, every *consistency.State, sys uint64, commit bool) error {
	ok, dropped := in.Scopes.DropForeign(every, sys, commit)
	if !ok {
		return fmt.Errorf("%w: the token names system %d, this cluster is %d", ErrForeignSession, every.Watermark().SystemID, sys)
	}
	if dropped && every.Origin() != consistency.Local {
		c.rw.forged.Add(1)
	}
	return nil
}

// knownPosition is the newest position of the primary this process knows
// the primary wrote: its last probe's in v, the last write through this
// Connector's, the read index's last. A position on its history at or
// before it was written (consistency.Reached).
func (c *Connector) knownPosition(v *view) lagmeter.Watermark {
	p, _ := v.primaryState().Position()
	return consistency.Later(p, c.rw.writes.Every().Load().Watermark(), c.rw.index.Last())
}

// reportLoss counts and logs what a transition of the read-your-writes
// state found of writes across a failover (consistency.Effect): a write
// lost with the old primary (Stats.LostWrites and a warning, once per
// position: a signed token replayed after the failover finds the same
// loss again in each new Session; the read's RouteEvent.WriteLost says it
// each time), or writes that may have been (Stats.TimelineResets; the log
// says it once per new timeline, not once per request).
func (c *Connector) reportLoss(e *consistency.Effect) {
	switch e.Report {
	case consistency.Lost:
		if !c.rw.lost.add(e.From) {
			return
		}
		c.counters.lostWrites.Add(1)
		if c.log != nil {
			c.log.Warn("pgrouted: a write acknowledged before a failover is not in the new primary's history: it was lost with the old primary",
				"watermark", e.From.String(), "switchPoint", e.SwitchPoint.String(), "timeline", e.Timeline)
		}
	case consistency.MayBeLost:
		c.counters.timelineResets.Add(1)
		if last := c.rw.loggedTimeline.Load(); e.Timeline > last && c.rw.loggedTimeline.CompareAndSwap(last, e.Timeline) && c.log != nil {
			c.log.Warn("pgrouted: writes acknowledged before a failover may have been lost; reading them from the primary until the new timeline's position is known",
				"watermark", e.From.String(), "timeline", e.Timeline)
		}
	}
}

// lostSetSize bounds the positions of lost writes a Connector remembers
// (lostSet): 256 watermarks, 6 KiB. A lossy failover loses the writes of
// the last moments before it, one position per user who wrote then; a
// position evicted by as many later ones is reported again when replayed.
const lostSetSize = 256

// lostSet is the positions (system, timeline, LSN) of the last lost writes
// reported, so that each is reported once however often a token replays
// it: a fixed ring, the oldest replaced first. Its zero value is empty. It
// is safe for concurrent use; it is used only when a loss is found.
type lostSet struct {
	mu   sync.Mutex
	ws   [lostSetSize]lagmeter.Watermark
	n    int // how many of ws are set
	next int // the slot the next position takes
}

// add records w and reports whether it was not recorded yet.
func (s *lostSet) add(w lagmeter.Watermark) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.ws[:s.n] {
		if o == w {
			return false
		}
	}
	s.ws[s.next] = w
	s.next = (s.next + 1) % lostSetSize
	s.n = min(s.n+1, lostSetSize)
	return true
}

// raise raises the read-your-writes marks after a committed write to the
// relations ws on primary host at insert position lsn (0: unknown): the
// Connector's, and the Session's of in. sent is a time (consistency.Now)
// taken before the query that read lsn was sent (zero when none is
// known): the position also serves the global reads that began before it
// and still wait for one (positionRead).
func (c *Connector) raise(in *consistency.Intent, ws sqlclass.Scope, host *host, lsn lagmeter.LSN, sent time.Time) {
	if !in.Tracks {
		return
	}
	var w lagmeter.Watermark
	if hv := c.view().of(host); lsn != 0 && hv != nil {
		if h := hv.probe; h.SystemID != 0 && h.Timeline != 0 {
			w = lagmeter.Watermark{SystemID: h.SystemID, Timeline: h.Timeline, LSN: h.Layout.RecordEnd(lsn)}
		}
	}
	c.positionRead(host, w, sent)
	now := time.Now()
	c.rw.writes.Wrote(ws.Named, ws.Keys[:ws.N], w, now, sent)
	if in.Session {
		in.Scopes.Wrote(ws.Named, ws.Keys[:ws.N], w, now, sent)
	}
}

// raiseOutcome raises the marks after one statement (or COMMIT) read its
// position pipelined: to pos when it succeeded; not at all when the
// server refused it (nothing committed) or it was never sent (an argument
// that cannot be encoded); to an unknown position when the connection
// failed under it (the answer was lost, not the commit). sent: see raise.
func (c *Connector) raiseOutcome(in *consistency.Intent, ws sqlclass.Scope, host *host, pos lagmeter.LSN, sent time.Time, err error) {
	switch {
	case err == nil:
		c.raise(in, ws, host, pos, sent)
	case pgpipe.IsPgError(err) || pgpipe.IsEncodeError(err) || errors.Is(err, pgx.ErrTxCommitRollback) || errors.Is(err, driver.ErrBadConn):
	default:
		c.raise(in, ws, host, 0, time.Time{})
	}
}

// raiseReading raises the marks after a committed write on primary host
// whose position is read now on pc, a primary session, after it, unless
// it is deferred (raiseDeferred).
func (c *Connector) raiseReading(ctx context.Context, in *consistency.Intent, ws sqlclass.Scope, host *host, pc *pgx.Conn) {
	if in.Defers() {
		c.raiseDeferred(in, ws, host)
		return
	}
	sent := consistency.Now()
	c.raise(in, ws, host, c.insertLSN(ctx, in, pc), sent)
}

// raiseDeferred records a committed write on primary host whose position
// is deferred: read when a read needs it (consistency.DeferredUse).
func (c *Connector) raiseDeferred(in *consistency.Intent, ws sqlclass.Scope, host *host) {
	if !in.Tracks {
		return
	}
	var on lagmeter.Watermark
	if hv := c.view().of(host); hv != nil {
		if h := hv.probe; h.SystemID != 0 && h.Timeline != 0 {
			on = lagmeter.Watermark{SystemID: h.SystemID, Timeline: h.Timeline}
		}
	}
	c.rw.writes.WroteDeferred(ws.Named, ws.Keys[:ws.N], on, consistency.Now())
}

// raiseAfterRows raises the marks once the rows of a write on primary host
// are closed (a statement returning rows commits once they are all sent,
// and the primary session is busy until then): reading the position on
// cn's primary session when it is still there outside a transaction, else
// to an unknown position. Both faces' rows call it (wroteRows, pgx's rows
// of the Pool).
func (cn *conn) raiseAfterRows(ctx context.Context, in *consistency.Intent, ws sqlclass.Scope, host *host) {
	if cn.primary != nil && !cn.inSQLTx() {
		cn.c.raiseReading(ctx, in, ws, host, cn.primary.Conn())
		return
	}
	cn.c.raise(in, ws, host, 0, time.Time{})
}

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
		pos := lagmeter.Position{SystemID: h.probe.SystemID, Timeline: h.probe.Timeline, Replay: h.replay()}
		if ok, _ := pk.wm.ReachedBy(pos, v.switchPoint(pk.wm.Timeline)); ok {
			pk.check, pk.wrote = false, time.Time{}
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
	return lagmeter.Watermark{SystemID: st.SystemID, Timeline: st.Timeline, LSN: st.Layout.RecordEnd(lsn)}, nil
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

// worthChecking keeps, in place, the replicas of cand (all of which must
// check the position of a read at now whose last write is age old) whose
// checks at that age mostly succeed, or were not recorded lately
// (consistency.CatchUp). When none does, one such read in a few (counted
// only with advance: Explain changes nothing) keeps them all, so that
// their records follow them.
func (c *Connector) worthChecking(cand []*hostView, age time.Duration, now time.Time, advance bool) []*hostView {
	kept := cand[:0]
	for _, h := range cand {
		if h.catchUp.Worth(age, now) {
			kept = append(kept, h)
		}
	}
	if len(kept) == 0 && advance && c.rw.explore.Explore() {
		return cand
	}
	return kept
}

// recordCheck adds the outcome of a position check sent at sent on h for
// a read whose caller wrote at wrote (zero: not recorded; see
// target.wrote), when the check did not wait: err is the check's (nil:
// found; errNotCaughtUp: not found; anything else tells nothing).
func (h *host) recordCheck(wrote time.Time, wait time.Duration, sent time.Time, err error) {
	if wrote.IsZero() || wait > 0 {
		return
	}
	switch {
	case err == nil:
		h.catchUp.Record(sent.Sub(wrote), sent, true)
	case errors.Is(err, errNotCaughtUp):
		h.catchUp.Record(sent.Sub(wrote), sent, false)
	}
}
