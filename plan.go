package pgrouted

import (
	"context"
	"errors"
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
	// checkAge is the age of the caller's write at wm when the read was
	// planned, for the replica's record of its checks (consistency.CatchUp,
	// which is asked at that age); zero when not recorded.
	checkAge time.Duration
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
		p.primaryReason(q)
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

// primaryReason sets p's reason for running q, which is no plain read, on
// the primary (and the function that decided, or the pin after a read a
// replica refused).
func (p *plan) primaryReason(q *request) {
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
	case p.class == sqlclass.Session:
		p.reason = ReasonSessionState
	case p.class == sqlclass.Tx:
		p.reason = ReasonInTx
	default:
		p.reason = ReasonWrite
	}
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
	var pk pick
	c.pickReplica(v, &rc, advance, nil, &pk)
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
			p.replica.wait, p.replica.checkAge = c.waitFor(&p.in, pk), pk.checkAge
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
	var next pick
	c.pickReplica(v, &rc, true, skip, &next)
	if next.pending {
		d := p.deferred
		next = c.resolveDeferred(ctx, v, &rc, next, &d)
	}
	if next.host == nil {
		return target{}, false
	}
	t := target{host: next.host, check: next.check, wm: next.wm, checkAge: next.checkAge}
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
	switch {
	case !p.primary:
		d.Endpoint = p.replica.host.Name
	default:
		if v := c.view(); v.primary != nil {
			d.Endpoint = v.primary.Name
		}
	}
	return d
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
