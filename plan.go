package pgrouted

import (
	"context"
	"errors"
	"time"

	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
	"github.com/pgrouted/pgrouted/lagmeter"
	"github.com/pgrouted/pgrouted/topology"
)

// plan is the routing decision for one statement or one BEGIN: the host,
// the check the replica must pass first, what may happen when the replica
// cannot serve (fallback) and the reason. It is made by Connector.plan for
// every statement, every read-only transaction and Explain, and executed
// by the primary path (primary.go) or the replica path (replica.go).
type plan struct {
	op      string
	class   sqlclass.Class
	primary bool   // run on the primary (its host is resolved at execution)
	host    int    // the replica, when !primary
	reason  string // see the Reason constants
	forced  Route
	check   bool               // verify the replica's position before reading
	wm      lagmeter.Watermark // what the check must find
	wait    time.Duration      // how long the check may wait for it (replicawait.go)
	err     error              // the statement cannot run
	lost    bool               // the caller's last write was found lost in a failover
	pin     bool               // the connection stays on the primary after it (beyond a Session class)
	fn      string             // the function that decided (see Decision.Function)
	global  globalRead         // the primary's position under global consistency (global.go)
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
//     path applies the same rule when the chosen replica fails its check
//     or its connection (Connector.mayFallBack).
//
// advance moves the round-robin position; Explain does not.
func (c *Connector) plan(ctx context.Context, q request, advance bool) plan {
	route := routeFrom(ctx)
	if q.begin {
		return c.planTx(ctx, q, route, advance)
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
	p := plan{op: opOf(class), class: class, forced: route, host: -1}
	if class != sqlclass.Read {
		if route == Replica {
			p.err = &RouteError{Op: p.op, Reason: ReasonWriteOnReplica}
			return p
		}
		p.primary = true
		switch {
		case q.refused && q.r.Class == sqlclass.Read:
			p.reason, p.pin = ReasonRefused, true
		case q.r.Func == sqlclass.FuncVolatile:
			p.reason, p.fn = ReasonVolatileFunction, q.fn
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
		return p
	}
	switch {
	case route == Primary:
		p.primary, p.reason = true, ReasonForced
		return p
	case q.inTx:
		p.primary, p.reason = true, ReasonInTx
		return p
	case q.pinned && route != Replica:
		p.primary, p.reason = true, ReasonPinned
		return p
	}
	c.planReplica(ctx, &p, advance)
	return p
}

// planTx is plan for BeginTx.
func (c *Connector) planTx(ctx context.Context, q request, route Route, advance bool) plan {
	p := plan{op: OpTx, class: sqlclass.Tx, forced: route, host: -1, primary: true}
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
		c.planReplica(ctx, &p, advance)
	}
	return p
}

// planReplica completes p, a read or a read-only transaction that may run
// on a replica, with the replica that serves it or, when none is eligible,
// the fallback or the error.
func (c *Connector) planReplica(ctx context.Context, p *plan, advance bool) {
	s := c.top.Snapshot()
	rc, err := c.readCtx(ctx, s, advance)
	if err != nil {
		p.err = err
		return
	}
	rc = c.globalPosition(ctx, s, rc, &p.global, advance) // global.go
	p.lost = rc.lost
	pk := c.pickReplica(s, rc, advance, -1)
	if pk.host >= 0 {
		p.host, p.check, p.wm = pk.host, pk.check, pk.wm
		p.wait = c.waitFor(ctx, s, pk)
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
	if !c.mayFallBack(p) {
		p.err = &RouteError{Op: p.op, Reason: pk.reason}
		return
	}
	p.primary = true
}

// mayFallBack reports whether p, planned for a replica, may run on the
// primary instead: not when forced to a replica, nor under
// pgrouted_fallback=error.
func (c *Connector) mayFallBack(p *plan) bool {
	return p.forced != Replica && c.cfg.Fallback != dsn.FallbackError
}

// replan chooses another replica for p after the one it had (skip) failed:
// the same eligibility as plan's, without skip. It reports false when
// there is none.
func (c *Connector) replan(ctx context.Context, p *plan, skip int) bool {
	s := c.top.Snapshot()
	rc, err := c.readCtx(ctx, s, true)
	if err != nil {
		return false
	}
	rc = c.globalPosition(ctx, s, rc, &p.global, true) // global.go: the same position
	next := c.pickReplica(s, rc, true, skip)
	if next.host < 0 {
		return false
	}
	p.host, p.check, p.wm = next.host, next.check, next.wm
	p.wait = c.waitFor(ctx, s, next)
	return true
}

// decision describes a plan for Explain and RouteEvent.
func (p *plan) decision(c *Connector) Decision {
	d := Decision{Op: p.op, Primary: p.primary, Reason: p.reason, Function: p.fn}
	if p.err != nil {
		return d
	}
	s := c.top.Snapshot()
	switch {
	case !p.primary:
		d.Endpoint = s.Hosts[p.host].Name
	case s.Primary >= 0:
		d.Endpoint = s.Hosts[s.Primary].Name
	}
	return d
}

// maxStackCandidates bounds the candidates kept on the stack.
const maxStackCandidates = 32

// pick is a replica choice: host, or -1 and reason; check asks the read to
// verify the replica's replay position on its connection first, because the
// last probe cannot prove it holds the caller's writes.
type pick struct {
	host   int
	reason string
	check  bool
	wm     lagmeter.Watermark
}

// pickReplica chooses a replica for a read, skipping host skip (-1: none).
// Proven replicas (holding the caller's writes and within the staleness
// budget by the last probe) come first; when there are none, a healthy one
// within the budget that may have caught up since is returned with check
// set. advance moves the round-robin position; Explain does not.
func (c *Connector) pickReplica(s *topology.Snapshot, rc readCtx, advance bool, skip int) pick {
	var buf, maybeBuf [maxStackCandidates]int
	checking := false
	cand, maybe := buf[:0], maybeBuf[:0]
	standbys, healthy := 0, 0
	unknown := false
	session := rc.cons != dsn.ConsistencyEventual // session or global: a position to reach
	wm := rc.st.wm
	if !session {
		wm = lagmeter.Watermark{}
	}
	pinned := rc.cons == dsn.ConsistencySession && c.cfg.PinAfterWrite > 0 && rc.now.Sub(rc.st.lastWrite) < c.cfg.PinAfterWrite
	saturated := 0
	hosts := c.hosts.all()
	for i := range s.Hosts {
		h := &s.Hosts[i]
		if h.Role != topology.RoleStandby || i == s.Primary || h.NoReads {
			// NoReads: the topology provider lets it serve no reads.
			continue
		}
		standbys++
		hs := hosts[i]
		if !hs.breaker.Allow() || i == skip {
			continue
		}
		healthy++
		if pinned {
			continue
		}
		if !rc.forced && hs.inflight() >= hs.maxConns {
			saturated++
			continue
		}
		pos := lagmeter.Position{SystemID: h.SystemID, Timeline: h.Timeline}
		if h.Healthy {
			// A failed probe leaves the position unknown: the server may
			// have restarted and gone back to its minimum recovery point.
			pos.Replay = hs.replay(h)
		}
		if ok, why := c.history.Check(pos, rc.budget, rc.now); !ok {
			unknown = unknown || why == lagmeter.ReasonPositionUnknown
			continue
		}
		if rc.budget.MaxBytes > 0 && !s.LeaseValid(rc.now) {
			// Byte lag does not grow while the primary is not probed.
			unknown = true
			continue
		}
		if session && rc.st.unknown {
			unknown = true
			continue
		}
		ok, why := wm.ReachedBy(pos, switchPoint(s, wm.Timeline))
		switch {
		case ok:
			cand = append(cand, i)
		case why == lagmeter.ReasonBehind && h.SystemID != 0:
			maybe = append(maybe, i)
		default:
			unknown = true
		}
	}
	if len(cand) == 0 && len(maybe) > 0 {
		cand, checking = maybe, true
	}
	if len(cand) == 0 {
		switch {
		case standbys == 0:
			return pick{host: -1, reason: ReasonNoReplicas}
		case healthy == 0:
			return pick{host: -1, reason: ReasonUnhealthy}
		case saturated == healthy:
			return pick{host: -1, reason: ReasonSaturated}
		case unknown:
			return pick{host: -1, reason: ReasonPositionUnknown}
		}
		return pick{host: -1, reason: ReasonBehind}
	}
	return pick{host: c.choose(rc.ctx, s, cand, advance), check: checking, wm: wm}
}
