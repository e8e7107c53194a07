package pgrouted

import (
	"cmp"
	"errors"
	"slices"
	"time"

	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/lagmeter"
	"github.com/pgrouted/pgrouted/topology"
)

// This file says which standby may serve a read: the conditions a standby
// must meet before any position matters, whether its replay position
// reaches a watermark (hostView.mayReach), and whether checking it inline
// is worth it (worthChecking, recordCheck).

// servesReads reports whether h is a standby its snapshot lets serve
// reads: not the primary, and not one the topology provider lets serve
// none (NoReads). Its circuit, its pool and its position are the pick's
// to judge (pickReplica). newView works it out once per view
// (standbyForReads).
func (h *hostView) servesReads() bool { return h.reads }

// standbyForReads is servesReads, from h's probe and its view's primary.
func (h *hostView) standbyForReads() bool {
	return h.probe.Role == topology.RoleStandby && h != h.v.primary && !h.probe.NoReads
}

// mayServeGlobal reports whether a replica might serve a read of rc once
// its position is known: a standby that may serve reads, whose circuit is
// closed and whose pool is not exhausted (pickReplica's first conditions;
// it applies them all after the fetch).
func (c *Connector) mayServeGlobal(v *view, rc *readCtx) bool {
	for i := range v.hosts {
		h := &v.hosts[i]
		if !h.servesReads() {
			continue
		}
		if h.breaker.Allow() && (rc.forced || h.inflight() < h.maxConns) {
			return true
		}
	}
	return false
}

// worthChecking keeps, in place, the replicas of cand (all of which must
// check the position of a read at now whose last write is age old) whose
// checks at that age mostly succeed, or were not recorded lately
// (consistency.CatchUp). When none does, one such read in a few (counted
// only with advance: Explain changes nothing) keeps them all, so that
// their records follow them: it explores.
func (c *Connector) worthChecking(cand []*hostView, age time.Duration, now time.Time, advance bool) (kept []*hostView, explores bool) {
	kept = cand[:0]
	for _, h := range cand {
		if h.catchUp.Worth(age, now) {
			kept = append(kept, h)
		}
	}
	if len(kept) == 0 && advance && c.rw.explore.Explore() {
		return cand, true
	}
	return kept, false
}

// recordCheck adds the outcome of a position check sent at sent on h for
// a read planned when its caller's last write was age old (zero: not
// recorded; see target.checkAge), when the check did not wait: err is the
// check's (nil: found; errNotCaughtUp: not found; anything else tells
// nothing).
func (h *host) recordCheck(age, wait time.Duration, sent time.Time, err error) {
	if age <= 0 || wait > 0 {
		return
	}
	switch {
	case err == nil:
		h.catchUp.Record(age, sent, true)
	case errors.Is(err, errNotCaughtUp):
		h.catchUp.Record(age, sent, false)
	}
}

// mayReach reports whether a position on h can hold wm at all: the same
// system, and wm's timeline in the replica's history. h nil (a host its
// view does not name) cannot.
func (h *hostView) mayReach(wm lagmeter.Watermark) bool {
	if h == nil {
		return false
	}
	ok, _ := wm.ReachedBy(h.positionAt(^lagmeter.LSN(0)), h.v.switchPoint(wm.Timeline))
	return ok
}

// maxStackCandidates bounds the hosts whose candidates are kept on the
// stack (TestPickReplicaAllocatesNothing picks among 32).
const maxStackCandidates = 32

// pick is a replica choice: host, or nil and reason; check asks the read to
// verify the replica's replay position on its connection first, because the
// last probe cannot prove it holds the caller's writes.
type pick struct {
	host     *hostView
	reason   Reason
	check    bool
	wm       lagmeter.Watermark
	checkAge time.Duration // see target.checkAge
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
// It is one pass over the hosts (scanReplica): what does not depend on the
// host (the read's position, the switch point of its timeline, the
// primary's lease) is worked out once, before it (needsOf). The choice is
// written to pk, which the caller zeroed (a pick is too large to return
// on every read).
func (c *Connector) pickReplica(v *view, rc *readCtx, advance bool, skip *host, pk *pick) {
	// The proven candidates fill buf from its start, the maybe ones from
	// its end: together they are at most the hosts but the primary.
	// (Not a field of replicaScan: what its methods store there would
	// take buf, and the stack, to the heap.)
	var stack [maxStackCandidates]*hostView
	buf := stack[:]
	if n := len(v.hosts); n > maxStackCandidates && (v.primary == nil || n-1 > maxStackCandidates) {
		buf = make([]*hostView, n)
	}
	s := replicaScan{maybeAt: len(buf)}
	var need readNeeds
	c.needsOf(v, rc, &need)
	for i := range v.hosts {
		c.scanReplica(&v.hosts[i], rc, &need, advance, skip, buf, &s)
	}
	cand, checking, why := c.candidates(buf, &s, rc, &need, advance)
	if len(cand) == 0 {
		pk.reason = s.reason(why)
		return
	}
	pk.host, pk.check, pk.wm, pk.pending = c.choose(rc.ctx, cand, advance), checking, need.wm, need.pending
	if checking && need.recent {
		// Keyed by the age the record was asked at (worthChecking),
		// not the age when the check is sent: a deferred position is
		// read on the primary in between.
		pk.checkAge = max(need.age, 1)
	}
}

// readNeeds is what a read needs of any replica, worked out once per pick.
type readNeeds struct {
	session bool               // session, causal or global: a position to reach
	wm      lagmeter.Watermark // that position (zero under eventual)
	// pending: the position is deferred, so no replica is proven to hold
	// it until it is read, which only the pick's replica needs.
	pending   bool
	sp        lagmeter.LSN // where the primary's timeline left wm's (view.switchPoint)
	lastWrite time.Time    // the caller's last write
	pinned    bool         // within pgrouted_pin_after_write of it: no replica
	// recent: the position is the caller's own last write, age old, which
	// tells how likely a replica that must check is to hold it
	// (consistency.CatchUp), and whose position, when deferred, is worth
	// reading only when such reads serve more than one read
	// (consistency.DeferredUse), unless the read may wait for it.
	recent bool
	age    time.Duration
	// unknown: no replica's position can be judged against the read's:
	// under a byte budget, byte lag is not known beyond the primary's
	// lease (it does not grow only while the primary is probed); or the
	// read's own position is not known (consistency.State.Unknown).
	unknown bool
}

// needsOf works out n, what a read of rc in v needs of any replica.
func (c *Connector) needsOf(v *view, rc *readCtx, n *readNeeds) {
	level := rc.level
	n.session = level != consistency.Eventual
	if n.session {
		n.wm = rc.st.Watermark()
	}
	n.pending = n.session && rc.st.Pending()
	n.sp = v.switchPoint(n.wm.Timeline)
	n.lastWrite = rc.st.LastWrite()
	n.pinned = level.Marks() && c.cfg.PinAfterWrite > 0 && rc.now.Sub(n.lastWrite) < c.cfg.PinAfterWrite
	// A read that may not fall back to the primary checks in any case.
	// A position a read saw (causal consistency) is not the last write's:
	// its age says nothing.
	n.recent = level.Marks() && !n.lastWrite.IsZero() && (!n.wm.IsZero() || n.pending) && !rc.st.Seen() &&
		!rc.forced && c.cfg.Fallback != dsn.FallbackError
	if n.recent {
		n.age = rc.now.Sub(n.lastWrite)
		// A deferred position read already under way is shared: a read
		// that joins it costs the primary nothing more.
		n.recent = rc.wait <= 0 && !(n.pending && c.rw.index.Waiting())
	}
	n.unknown = (rc.budget.MaxBytes != 0 && !v.snap.LeaseValid(rc.now)) || (n.session && rc.st.Unknown())
}

// replicaScan is what pickReplica's pass over the hosts found, beside the
// candidates it put in its buffer: the proven ones from its start (nCand
// of them), those that may hold the position from its end (from maybeAt).
type replicaScan struct {
	nCand, maybeAt int
	// Counts of the standbys that serve reads, of those healthy (circuit
	// closed, not skipped) and of those saturated, for the reason when
	// none serves; unknown: one's position could not be judged.
	standbys, healthy, saturated int
	unknown                      bool
	// The replicas skipped for their ramp (budgetgate.go): the first
	// proven one and the first that may hold the position.
	rampProven, rampMaybe *hostView
}

// scanReplica sorts h into buf and s for a read of rc that needs need: a
// proven candidate, one that may hold the read's position (it must check
// it), one ramping back whose turn it is not, or none, counted by why.
func (c *Connector) scanReplica(h *hostView, rc *readCtx, need *readNeeds, advance bool, skip *host, buf []*hostView, s *replicaScan) {
	if !h.servesReads() {
		return
	}
	s.standbys++
	if !h.breaker.Allow() || h.host == skip {
		return
	}
	s.healthy++
	if need.pinned {
		return
	}
	if !rc.forced && h.inflight() >= h.maxConns {
		s.saturated++
		return
	}
	// A failed probe leaves the position unknown: the server may have
	// restarted and gone back to its minimum recovery point.
	st := h.probe
	pos := h.positionAt(0)
	if st.Healthy {
		pos = h.position()
		pos.Xmin = st.SnapshotXmin
	}
	gate, ok := c.withinBudget(h, &pos, rc, advance, s)
	if !ok {
		return
	}
	if need.unknown {
		s.unknown = true
		return
	}
	proven, why := need.wm.ReachedBy(pos, need.sp)
	if need.pending && proven {
		proven, why = false, lagmeter.ReasonBehind
	}
	maybe := why == lagmeter.ReasonBehind && st.SystemID != 0
	switch {
	case proven && gate == gateSkipped:
		s.rampProven = cmp.Or(s.rampProven, h)
	case proven:
		buf[s.nCand] = h
		s.nCand++
	case maybe && gate == gateSkipped:
		s.rampMaybe = cmp.Or(s.rampMaybe, h)
	case maybe:
		s.maybeAt--
		buf[s.maybeAt] = h
	default:
		s.unknown = true
	}
}

// withinBudget applies the read's staleness check and h's budget gate
// (budgetgate.go) to h at pos: it reports false when h may not serve
// (beyond the budget, its position unknown, or out until it is back under
// the return threshold), and the gate's state (in, or ramping back to its
// whole share and skipped).
func (c *Connector) withinBudget(h *hostView, pos *lagmeter.Position, rc *readCtx, advance bool, s *replicaScan) (gateState, bool) {
	if rc.budget.IsZero() {
		return gateIn, true
	}
	l := c.history.Lag(*pos, rc.now)
	// Behind every sample kept is beyond the budget only when the samples
	// go back that far (a connector just opened has a short history):
	// else it is no reason to leave.
	beyond := l.Time != lagmeter.Unbounded || c.history.Spans(c.gates.leave.MaxTime, rc.now)
	gate := h.gate.pass(&c.gates, l, beyond, rc.now, !advance)
	if ok, why := rc.budget.Allows(l); !ok {
		s.unknown = s.unknown || why == lagmeter.ReasonPositionUnknown
		return gate, false
	}
	return gate, gate != gateOut
}

// candidates are the replicas of buf and s the read may take: the proven ones;
// else those that may hold its position (checking), when checking them is
// worth it (worthChecking, consistency.DeferredUse). With none, why is
// ReasonCatchingUp or ReasonDeferred when that is what left none.
func (c *Connector) candidates(buf []*hostView, s *replicaScan, rc *readCtx, need *readNeeds, advance bool) (cand []*hostView, checking bool, why Reason) {
	// A replica ramping back whose turn it was not still serves a read
	// that no other replica can: the ramp is between replicas.
	switch {
	case s.nCand == 0 && s.rampProven != nil:
		buf[0] = s.rampProven
		s.nCand = 1
	case s.nCand == 0 && s.maybeAt == len(buf) && s.rampMaybe != nil:
		s.maybeAt--
		buf[s.maybeAt] = s.rampMaybe
	}
	if s.nCand > 0 || s.maybeAt == len(buf) {
		return buf[:s.nCand], false, ""
	}
	// The maybe ones, in the hosts' order.
	cand = buf[s.maybeAt:]
	slices.Reverse(cand)
	if !need.recent {
		return cand, true, ""
	}
	cand, explores := c.worthChecking(cand, need.age, rc.now, advance)
	if len(cand) == 0 {
		return nil, true, ReasonCatchingUp
	}
	// A deferred position read for this read alone would cost the
	// primary what the read does (consistency.DeferredUse), unless the
	// read explores the replicas' catch-up records: its check is how they
	// learn that the replicas hold young writes again, and the reads that
	// they sent to the primary (catching-up) never counted in the
	// deferred record. Skipped too, the explorers sent no check, and a
	// connector that saw a few checks miss sent every read after a write to
	// the primary until the records were a second old (0.6 % of a
	// read-back workload's reads on replicas behind PgBouncer, 98 % on the
	// next connector).
	if need.pending && !explores && !c.rw.deferredUse.Worth(rc.now) {
		if advance {
			c.rw.deferredUse.Skip(rc.st, rc.now)
		}
		return nil, true, ReasonDeferred
	}
	return cand, true, ""
}

// reason is why no replica serves, after a scan that left none: why, when
// it is not one of the scan's own.
func (s *replicaScan) reason(why Reason) Reason {
	switch {
	case s.standbys == 0:
		return ReasonNoReplicas
	case s.healthy == 0:
		return ReasonUnhealthy
	case s.saturated == s.healthy:
		return ReasonSaturated
	case s.unknown:
		return ReasonPositionUnknown
	case why != "":
		return why
	}
	return ReasonBehind
}
