package pgrouted

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// plan is the routing decision for one statement or one BEGIN: the host,
// the check the replica must pass first, what may happen when the replica
// cannot serve (fallback) and the reason. It is made by Connector.plan for
// every statement, every read-only transaction and Explain, and executed
// by the primary path (primary.go, primaryrun.go) or the replica path
// (replica.go).
type plan struct {
	op      string
	class   sqlclass.Class
	primary bool   // run on the primary (its host is resolved at execution)
	replica target // the replica and its check, when !primary
	reason  Reason
	forced  Route
	// replicaForced: the context forces the replica (WithRoute): a
	// saturated one still serves.
	replicaForced bool
	// canFallback: the primary may run it when no replica can (see
	// plan.fallback).
	canFallback bool
	err         error     // the statement cannot run
	writeLost   bool      // the caller's last write was found lost in a failover
	pin         bool      // the connection stays on the primary after it (beyond a Session class)
	fn          string    // the function that decided (see Decision.Function)
	global      indexRead // the primary's position under global consistency (position.go)
	deferred    indexRead // the position of the caller's deferred writes (position.go)
	// in is the statement's read-your-writes intent, resolved once from
	// its context: its reads and the raise of the marks after its writes
	// (or its transaction's commit) use it.
	in consistency.Intent
	// reads and writes are the relations it reads (a read) and writes (a
	// statement run on the primary): the scope of read-your-writes
	// (sqlclass.Scope; every relation unless the classification named
	// them).
	reads, writes sqlclass.Scope
}

// target is the replica a read (or a read-only transaction) runs on, and
// the check of its replay position it must pass first.
type target struct {
	host  *hostView          // the replica, and its probe state when planned
	check bool               // verify the replica's position before reading
	wm    lagmeter.Watermark // what the check must find
	wait  time.Duration      // how long the check may wait for it (replicawait.go)
	wrote time.Time          // when the caller wrote at wm, for the replica's record of its checks (consistency.CatchUp); zero when not known
}

// request is what a decision is asked about.
type request struct {
	r sqlclass.Result // the statement's classification

	// begin is set for BeginTx (r is then ignored), with the transaction's
	// read-only flag and whether it is SERIALIZABLE.
	begin, readOnly, serializable bool

	pinned bool // an earlier statement changed session state on the connection
	inTx   bool // the connection is inside a transaction opened with SQL (BEGIN)

	fn      string // r.FuncName of the statement's text
	refused bool   // a replica refused the same text before (SQLSTATE 25006)
}

// errSerializableOnStandby explains why a SERIALIZABLE transaction forced
// to a replica cannot run.
var errSerializableOnStandby = errors.New("pgrouted: a SERIALIZABLE transaction cannot run on a replica: PostgreSQL does not support serializable isolation on a hot standby; use REPEATABLE READ, or let it run on the primary")

func opOf(c sqlclass.Class) string {
	switch c {
	case sqlclass.Read:
		return OpRead
	case sqlclass.Lock:
		return OpLock
	case sqlclass.Tx:
		return OpTx
	}
	return OpWrite
}

// plan decides where q runs. The rules, in order:
//
//   - What must run on the primary (writes, locks, session state,
//     transaction control, read-write transactions) runs there, and fails
//     with ErrWriteOnReplica when forced to a replica.
//   - A route forced to the primary (WithRoute, a comment) wins.
//   - A statement inside a transaction opened with SQL never leaves it,
//     whatever route it was forced to.
//   - A connection pinned by session state stays on the primary, unless
//     the route is forced to a replica.
//   - A read-only transaction stays on the primary under
//     pgrouted_readonly_tx=primary, or at SERIALIZABLE isolation (which a
//     hot standby does not have; forced to a replica, it fails).
//   - Otherwise an eligible replica (pickReplica) serves it. With none, it
//     falls back to the primary, except when forced to a replica or under
//     pgrouted_fallback=error: then it fails with ErrNoReplica. The replica
//     path asks the plan the same question when the chosen replica fails
//     its check or its connection, or refuses the statement (plan.fallback).
//
// advance moves the round-robin position; Explain does not. The plan is
// written to p, a zero plan the caller keeps (on its stack): a plan is too
// large to copy at every step of a statement.
func (c *Connector) plan(ctx context.Context, q *request, advance bool, p *plan) {
	o := optionsFrom(ctx)
	route := o.route
	c.setIntent(&p.in, o)
	p.replicaForced = route == Replica
	if q.begin {
		c.planTx(ctx, q, route, advance, p)
		return
	}
	switch q.r.Hint {
	case sqlclass.HintPrimary:
		route = Primary
	case sqlclass.HintReplica:
		if route != Primary {
			route = Replica
		}
	}
	class := q.r.Class
	if q.refused && class == sqlclass.Read {
		// It wrote when it ran on a replica: its effects are not known.
		class = sqlclass.Session
	}
	// A read needs only what it reads; anything else, only what it writes.
	if class == sqlclass.Read {
		p.reads = q.r.Reads
	} else {
		p.writes = q.r.Writes
	}
	p.op, p.class, p.forced, p.canFallback = opOf(class), class, route, c.canFallback(route)
	if class != sqlclass.Read {
		if route == Replica {
			p.err = &RouteError{Op: p.op, Reason: ReasonWriteOnReplica}
			return
		}
		p.primary = true
		switch {
		case q.refused && q.r.Class == sqlclass.Read:
			p.reason, p.pin = ReasonRefused, true
		case q.r.Func == sqlclass.FuncVolatile:
			p.reason, p.fn = ReasonVolatileFunction, q.fn
		case q.r.Func == sqlclass.FuncHidden:
			p.reason, p.fn = ReasonHiddenCode, q.fn
		case q.r.Func == sqlclass.FuncUnknown:
			p.reason, p.fn = ReasonUnknownFunction, q.fn
		case q.r.Func == sqlclass.FuncWrite:
			p.reason, p.fn = ReasonWriteFunction, q.fn
		case class == sqlclass.Session:
			p.reason = ReasonSessionState
		case class == sqlclass.Tx:
			p.reason = ReasonInTx
		default:
			p.reason = ReasonWrite
		}
		return
	}
	switch {
	case route == Primary:
		p.primary, p.reason = true, ReasonForced
		return
	case q.inTx:
		p.primary, p.reason = true, ReasonInTx
		return
	case q.pinned && route != Replica:
		p.primary, p.reason = true, ReasonPinned
		return
	}
	c.planReplica(ctx, p, advance)
}

// planTx is plan for BeginTx (p holds only its intent).
func (c *Connector) planTx(ctx context.Context, q *request, route Route, advance bool, p *plan) {
	p.op, p.class, p.forced, p.canFallback, p.primary = OpTx, sqlclass.Tx, route, c.canFallback(route), true
	switch {
	case !q.readOnly && route == Replica:
		p.primary, p.reason = false, ReasonWriteOnReplica
		p.err = &RouteError{Op: OpTx, Reason: ReasonWriteOnReplica}
	case !q.readOnly:
		p.reason = ReasonWrite
		if route == Primary {
			p.reason = ReasonForced
		}
	case route == Primary:
		p.reason = ReasonForced
	case q.inTx:
		p.reason = ReasonInTx
	case q.pinned && route != Replica:
		p.reason = ReasonPinned
	case route != Replica && c.cfg.ReadOnlyTx != dsn.ReadOnlyTxReplica:
		p.reason = ReasonReadOnlyTx
	case q.serializable && route == Replica:
		p.primary, p.err = false, errSerializableOnStandby
	case q.serializable:
		p.reason = ReasonSerializableRO
	default:
		p.primary = false
		c.planReplica(ctx, p, advance)
	}
}

// planReplica completes p, a read or a read-only transaction that may run
// on a replica, with the replica that serves it or, when none is eligible,
// the fallback or the error.
func (c *Connector) planReplica(ctx context.Context, p *plan, advance bool) {
	v := c.view()
	var rc readCtx
	if err := c.readCtx(&rc, ctx, &p.in, &p.reads, p.replicaForced, v, advance); err != nil {
		p.err = err
		return
	}
	c.globalPosition(ctx, v, &rc, &p.global, advance)
	p.writeLost = rc.lost
	pk := c.pickReplica(v, &rc, advance, nil)
	switch {
	case !advance:
	case pk.pending:
		pk = c.resolveDeferred(ctx, v, &rc, pk, &p.deferred)
	case pk.host != nil && rc.st.Fetched() && p.in.Level.Marks():
		// It relies on the position a read of a deferred one read.
		c.rw.deferredUse.Served(false, rc.now)
	}
	if pk.host != nil {
		p.replica.host, p.replica.check, p.replica.wm = pk.host, pk.check, pk.wm
		if pk.check {
			p.replica.wait, p.replica.wrote = c.waitFor(&p.in, pk), pk.wrote
		}
		switch {
		case p.forced == Replica:
			p.reason = ReasonForced
			if pk.check && p.op != OpTx {
				p.reason = ReasonCheck
			}
		case p.op == OpTx:
			p.reason = ReasonReadOnlyTx
		case pk.check:
			p.reason = ReasonCheck
		default:
			p.reason = ReasonReplica
		}
		return
	}
	p.reason = pk.reason
	if p.err = p.fallback(pk.reason, nil); p.err == nil {
		p.primary = true
	}
}

// canFallback reports whether a statement routed route may run on the
// primary when no replica can serve it: not when forced to a replica, nor
// under pgrouted_fallback=error.
func (c *Connector) canFallback(route Route) bool {
	return route != Replica && c.cfg.Fallback != dsn.FallbackError
}

// fallback answers whether p, planned for a replica, may fall back (run on
// the primary) when no replica can serve it, for reason: nil when it may,
// else the error it fails with (ErrNoReplica with reason, wrapping cause).
// It is the one rule for every statement planned for a replica: an
// autocommit read, a read-only transaction, Prepare's describe, and a read
// its replica refused with SQLSTATE 25006.
func (p *plan) fallback(reason Reason, cause error) error {
	if p.canFallback {
		return nil
	}
	return &RouteError{Op: p.op, Reason: reason, cause: cause}
}

// toPrimary makes p the plan for the primary after the replica path fell
// back (o): it runs there for o's reason; a statement the replica refused
// (it wrote through something its text and the catalog did not show) is
// then run as an unknown statement, the marks raised after it, and it
// pins the connection to the primary (its effects are not known).
func (p *plan) toPrimary(o replicaOutcome) {
	p.primary, p.reason = true, o.reason
	if o.refused {
		p.class, p.pin, p.writes = sqlclass.Unknown, true, sqlclass.AllRelations
	}
}

// replan chooses another replica for p after the one it had (skip) failed:
// the same eligibility as plan's, without skip; with noWait, a replica that
// must check the read's position does so without waiting for it (the read
// waited already). It reports false when there is none. A target it
// returns is run: its wait, if any, holds a slot of the replica's
// (waitFor).
func (c *Connector) replan(ctx context.Context, p *plan, skip *host, noWait bool) (target, bool) {
	v := c.view()
	var rc readCtx
	if err := c.readCtx(&rc, ctx, &p.in, &p.reads, p.replicaForced, v, true); err != nil {
		return target{}, false
	}
	g := p.global
	c.globalPosition(ctx, v, &rc, &g, true) // the plan's position
	next := c.pickReplica(v, &rc, true, skip)
	if next.pending {
		d := p.deferred
		next = c.resolveDeferred(ctx, v, &rc, next, &d)
	}
	if next.host == nil {
		return target{}, false
	}
	t := target{host: next.host, check: next.check, wm: next.wm, wrote: next.wrote}
	if !noWait {
		t.wait = c.waitFor(&p.in, next)
	}
	return t, true
}

// decision describes a plan for Explain and RouteEvent.
func (p *plan) decision(c *Connector) Decision {
	d := Decision{Op: p.op, Primary: p.primary, Reason: p.reason, Function: p.fn}
	if p.err != nil {
		return d
	}
	switch v := c.view(); {
	case !p.primary:
		d.Endpoint = p.replica.host.Name
	case v.primary != nil:
		d.Endpoint = v.primary.Name
	}
	return d
}

// maxStackCandidates bounds the hosts whose candidates are kept on the
// stack.
const maxStackCandidates = 32

// pick is a replica choice: host, or nil and reason; check asks the read to
// verify the replica's replay position on its connection first, because the
// last probe cannot prove it holds the caller's writes.
type pick struct {
	host   *hostView
	reason Reason
	check  bool
	wm     lagmeter.Watermark
	wrote  time.Time // see target.wrote
	// pending: the caller's position is deferred (consistency.DeferredUse);
	// host must check it once it is read (Connector.resolveDeferred).
	pending bool
}

// pickReplica chooses a replica for a read in v, skipping host skip (nil:
// none). Proven replicas (holding the caller's writes and within the
// staleness budget by the last probe) come first; when there are none, a
// healthy one within the budget that may have caught up since is returned
// with check set. advance moves the round-robin position; Explain does not.
//
// It is one pass over the hosts: what does not depend on the host (the
// switch point of the caller's timeline, the primary's lease) is worked
// out once, before it.
func (c *Connector) pickReplica(v *view, rc *readCtx, advance bool, skip *host) pick {
	// The proven candidates fill buf from its start, the maybe ones from
	// its end: together they are at most the hosts but the primary.
	var stack [maxStackCandidates]*hostView
	buf := stack[:]
	if n := len(v.hosts); n > maxStackCandidates && (v.primary == nil || n-1 > maxStackCandidates) {
		buf = make([]*hostView, n)
	}
	nCand, maybeAt := 0, len(buf)
	standbys, healthy, saturated := 0, 0, 0
	unknown := false
	level := rc.level
	session := level != consistency.Eventual // session, causal or global: a position to reach
	wm := rc.st.Watermark()
	if !session {
		wm = lagmeter.Watermark{}
	}
	// A deferred position: no replica is proven to hold it until it is
	// read, which only the pick's replica needs.
	pending := session && rc.st.Pending()
	sp := v.switchPoint(wm.Timeline)
	lastWrite := rc.st.LastWrite()
	pinned := level.Marks() && c.cfg.PinAfterWrite > 0 && rc.now.Sub(lastWrite) < c.cfg.PinAfterWrite
	// recent: the caller's position is its own last write, whose age
	// tells how likely a replica that must check is to hold it
	// (consistency.CatchUp), and whose position, when deferred, is worth
	// reading only when such reads serve more than one read
	// (consistency.DeferredUse), unless the read may wait for it.
	var age time.Duration
	// A read that may not fall back to the primary checks in any case.
	// A position a read saw (causal consistency) is not the last write's:
	// its age says nothing.
	recent := level.Marks() && !lastWrite.IsZero() && (!wm.IsZero() || pending) && !rc.st.Seen() &&
		!rc.forced && c.cfg.Fallback != dsn.FallbackError
	if recent {
		age = rc.now.Sub(lastWrite)
		// A deferred position read already under way is shared: a read
		// that joins it costs the primary nothing more.
		recent = rc.wait <= 0 && !(pending && c.rw.index.Waiting())
	}
	// The replicas skipped for their ramp (budgetgate.go): the first
	// proven one and the first that may hold the position.
	var rampProven, rampMaybe *hostView
	// Byte lag does not grow while the primary is not probed.
	byteLease := rc.budget.MaxBytes == 0 || v.snap.LeaseValid(rc.now)
	for i := range v.hosts {
		h := &v.hosts[i]
		st := h.probe
		if !h.servesReads() {
			continue
		}
		standbys++
		if !h.breaker.Allow() || h.host == skip {
			continue
		}
		healthy++
		if pinned {
			continue
		}
		if !rc.forced && h.inflight() >= h.maxConns {
			saturated++
			continue
		}
		// A failed probe leaves the position unknown: the server may
		// have restarted and gone back to its minimum recovery point.
		pos := h.positionAt(0)
		if st.Healthy {
			pos = h.position()
			pos.Xmin = st.SnapshotXmin
		}
		// The read's staleness check, and the replica's budget gate
		// (budgetgate.go): out beyond the budget until it is back under
		// the return threshold, then ramping back to its whole share.
		gate := gateIn
		if !rc.budget.IsZero() {
			l := c.history.Lag(pos, rc.now)
			// Behind every sample kept is beyond the budget only when
			// the samples go back that far (a connector just opened
			// has a short history): else it is no reason to leave.
			beyond := l.Time != lagmeter.Unbounded || c.history.Spans(c.gates.leave.MaxTime, rc.now)
			gate = h.gate.pass(&c.gates, l, beyond, rc.now, !advance)
			if ok, why := rc.budget.Allows(l); !ok {
				unknown = unknown || why == lagmeter.ReasonPositionUnknown
				continue
			}
			if gate == gateOut {
				continue
			}
		}
		if !byteLease || (session && rc.st.Unknown()) {
			unknown = true
			continue
		}
		ok, why := wm.ReachedBy(pos, sp)
		if pending && ok {
			ok, why = false, lagmeter.ReasonBehind
		}
		switch {
		case ok && gate == gateSkipped:
			rampProven = cmp.Or(rampProven, h)
		case ok:
			buf[nCand] = h
			nCand++
		case why == lagmeter.ReasonBehind && st.SystemID != 0 && gate == gateSkipped:
			rampMaybe = cmp.Or(rampMaybe, h)
		case why == lagmeter.ReasonBehind && st.SystemID != 0:
			maybeAt--
			buf[maybeAt] = h
		default:
			unknown = true
		}
	}
	// A replica ramping back whose turn it was not still serves a read
	// that no other replica can: the ramp is between replicas.
	switch {
	case nCand == 0 && rampProven != nil:
		buf[0] = rampProven
		nCand = 1
	case nCand == 0 && maybeAt == len(buf) && rampMaybe != nil:
		maybeAt--
		buf[maybeAt] = rampMaybe
	}
	cand, checking := buf[:nCand], false
	catchingUp, deferred := false, false
	if nCand == 0 && maybeAt < len(buf) {
		// The maybe ones, in the hosts' order.
		cand, checking = buf[maybeAt:], true
		slices.Reverse(cand)
		if recent {
			cand = c.worthChecking(cand, age, rc.now, advance)
			catchingUp = len(cand) == 0
			// A deferred position read for this read alone would cost the
			// primary what the read does (consistency.DeferredUse).
			if pending && !catchingUp && !c.rw.deferredUse.Worth(rc.now) {
				cand, deferred = nil, true
				if advance {
					c.rw.deferredUse.Skip(rc.st, rc.now)
				}
			}
		}
	}
	if len(cand) == 0 {
		switch {
		case standbys == 0:
			return pick{reason: ReasonNoReplicas}
		case healthy == 0:
			return pick{reason: ReasonUnhealthy}
		case saturated == healthy:
			return pick{reason: ReasonSaturated}
		case unknown:
			return pick{reason: ReasonPositionUnknown}
		case catchingUp:
			return pick{reason: ReasonCatchingUp}
		case deferred:
			return pick{reason: ReasonDeferred}
		}
		return pick{reason: ReasonBehind}
	}
	pk := pick{host: c.choose(rc.ctx, cand, advance), check: checking, wm: wm, pending: pending}
	if checking && recent {
		pk.wrote = lastWrite
	}
	return pk
}

// Explain returns where query would run now, and why, without running it:
// no side effect, and the round-robin position does not move. Under
// global consistency it does not read the primary's position (the read
// would): it plans with the position the primary's last probe read, which
// the read needs at least.
func (c *Connector) Explain(ctx context.Context, query string) (Decision, error) {
	var p plan
	var q request
	c.classify(ctx, query, &q.r)
	q.refused, q.fn = c.refused.has(query), q.r.FuncName(query)
	c.plan(ctx, &q, false, &p)
	return p.decision(c), p.err
}
