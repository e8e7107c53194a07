package pgrouted

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
	"github.com/pgrouted/pgrouted/lagmeter"
	"github.com/pgrouted/pgrouted/topology"
)

// plan is the routing decision for one statement.
type plan struct {
	op      string
	class   sqlclass.Class
	primary bool   // run on the primary (its host is resolved at execution)
	host    int    // the replica, when !primary
	reason  string // see the Reason constants
	forced  Route
	check   bool               // verify the replica's position before reading
	wm      lagmeter.Watermark // what the check must find
	err     error              // the statement cannot run
	lost    bool               // the caller's last write was found lost in a failover
}

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

// plan decides where a statement of classification r runs. onPrimary is
// true when the connection must stay on the primary (session state, or a
// transaction opened with SQL). advance moves the round-robin position;
// Explain does not.
func (c *Connector) plan(ctx context.Context, r sqlclass.Result, onPrimary, advance bool) plan {
	route := routeFrom(ctx)
	switch r.Hint {
	case sqlclass.HintPrimary:
		route = Primary
	case sqlclass.HintReplica:
		if route != Primary {
			route = Replica
		}
	}
	p := plan{op: opOf(r.Class), class: r.Class, forced: route, host: -1}
	if r.Class != sqlclass.Read {
		if route == Replica {
			p.err = &RouteError{Op: p.op, Reason: ReasonWriteOnReplica}
			return p
		}
		p.primary = true
		switch r.Class {
		case sqlclass.Session:
			p.reason = ReasonSessionState
		case sqlclass.Tx:
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
	case onPrimary && route != Replica:
		p.primary, p.reason = true, ReasonPinned
		return p
	}
	s := c.top.Snapshot()
	rc, err := c.readCtx(ctx, s, advance)
	if err != nil {
		p.err = err
		return p
	}
	p.lost = rc.lost
	pk := c.pickReplica(s, rc, advance, -1)
	if pk.host >= 0 {
		p.host, p.reason, p.check, p.wm = pk.host, ReasonReplica, pk.check, pk.wm
		if pk.check {
			p.reason = ReasonCheck
		} else if route == Replica {
			p.reason = ReasonForced
		}
		return p
	}
	if route == Replica || c.cfg.Fallback == dsn.FallbackError {
		p.err = &RouteError{Op: p.op, Reason: pk.reason}
		return p
	}
	p.primary, p.reason = true, pk.reason
	return p
}

// decision describes a plan for Explain and RouteEvent.
func (p *plan) decision(c *Connector) Decision {
	d := Decision{Op: p.op, Primary: p.primary, Reason: p.reason}
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

// switchPoint is where the current primary's timeline history left
// timeline tli, or 0 when it is not known: a replica on a newer timeline
// than a watermark is then not known to hold it (see
// lagmeter.Watermark.ReachedBy). Once a primary on the newer timeline is
// known, readCtx has moved the watermark to its timeline already.
func switchPoint(s *topology.Snapshot, tli uint32) lagmeter.LSN {
	if s.Primary < 0 {
		return 0
	}
	sp, _ := lagmeter.SwitchPoint(s.Hosts[s.Primary].Switches, tli)
	return sp
}

// readCtx is what the eligibility of a read depends on beyond the topology.
type readCtx struct {
	ctx    context.Context
	mark   *mark // the session's, or the connector's
	st     *markState
	budget lagmeter.Budget
	now    time.Time
	forced bool // forced to a replica: a saturated one still serves
	lost   bool // the caller's last write was found lost in a failover
}

// With commit false (Explain) it changes nothing: what it learns about the
// caller's position stays local.
func (c *Connector) readCtx(ctx context.Context, s *topology.Snapshot, commit bool) (readCtx, error) {
	rc := readCtx{ctx: ctx, mark: &c.writes, budget: c.budget, now: time.Now(), forced: routeFrom(ctx) == Replica}
	if sess := sessionFrom(ctx); sess != nil {
		rc.mark = &sess.m
	}
	if d, ok := ctx.Value(maxLagKey{}).(time.Duration); ok {
		if d <= 0 {
			d = -1
		}
		rc.budget = rc.budget.Min(lagmeter.Budget{MaxTime: d})
	}
	rc.st = rc.mark.load()
	if sys := clusterSystemID(s); sys != 0 && !rc.st.wm.IsZero() && rc.st.wm.SystemID != sys && rc.mark != &c.writes {
		return rc, fmt.Errorf("%w: the token names system %d, this cluster is %d", ErrForeignSession, rc.st.wm.SystemID, sys)
	}
	if w := rc.st.wm; !w.IsZero() && s.Primary >= 0 {
		p := &s.Hosts[s.Primary]
		if p.SystemID == w.SystemID && p.Timeline > w.Timeline {
			rc = c.crossTimeline(rc, p, w, commit)
		}
	}
	if rc.st.unknown && s.Primary >= 0 {
		// A primary probe sent after the write position became unknown
		// read a position at or after that write.
		p := &s.Hosts[s.Primary]
		if p.InsertLSN != 0 && p.SystemID != 0 && p.Timeline != 0 && p.LastSuccess.After(rc.st.unknownAt) {
			w := lagmeter.Watermark{SystemID: p.SystemID, Timeline: p.Timeline, LSN: p.Layout.RecordEnd(p.InsertLSN)}
			if !commit {
				next := *rc.st
				next.unknown, next.wm = false, later(rc.st.wm, w)
				return rc.with(&next), nil
			}
			rc.st = rc.mark.resolve(rc.st, w)
		}
	}
	return rc, nil
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
func (c *Connector) crossTimeline(rc readCtx, p *topology.HostState, w lagmeter.Watermark, commit bool) readCtx {
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
		return rc.with(&next)
	}
	st, won := rc.mark.swap(rc.st, &next)
	rc.st = st
	if !won {
		return rc
	}
	switch {
	case rc.lost:
		c.counters.lostWrites.Add(1)
		if c.cfg.Logger != nil {
			c.cfg.Logger.Warn("pgrouted: a write acknowledged before a failover is not in the new primary's history: it was lost with the old primary",
				"watermark", w.String(), "switchPoint", sp.String(), "timeline", p.Timeline)
		}
	case next.unknown:
		c.counters.timelineResets.Add(1)
		// One line per new timeline, not one per request.
		if last := c.loggedTimeline.Load(); p.Timeline > last && c.loggedTimeline.CompareAndSwap(last, p.Timeline) && c.cfg.Logger != nil {
			c.cfg.Logger.Warn("pgrouted: writes acknowledged before a failover may have been lost; reading them from the primary until the new timeline's position is known",
				"watermark", w.String(), "timeline", p.Timeline)
		}
	}
	return rc
}

func (rc readCtx) with(st *markState) readCtx {
	rc.st = st
	return rc
}

// clusterSystemID is the system identifier the probes read, or 0.
func clusterSystemID(s *topology.Snapshot) uint64 {
	if s.Primary >= 0 && s.Hosts[s.Primary].SystemID != 0 {
		return s.Hosts[s.Primary].SystemID
	}
	for i := range s.Hosts {
		if s.Hosts[i].SystemID != 0 {
			return s.Hosts[i].SystemID
		}
	}
	return 0
}

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
	session := c.cfg.Consistency == dsn.ConsistencySession
	wm := rc.st.wm
	if !session {
		wm = lagmeter.Watermark{}
	}
	pinned := session && c.cfg.PinAfterWrite > 0 && rc.now.Sub(rc.st.lastWrite) < c.cfg.PinAfterWrite
	saturated := 0
	for i := range s.Hosts {
		h := &s.Hosts[i]
		if h.Role != topology.RoleStandby || i == s.Primary {
			continue
		}
		standbys++
		if !c.breakers[i].Allow() || i == skip {
			continue
		}
		healthy++
		if pinned {
			continue
		}
		if !rc.forced && c.inflight[i].n.Load() >= c.maxConns {
			saturated++
			continue
		}
		pos := lagmeter.Position{SystemID: h.SystemID, Timeline: h.Timeline}
		if h.Healthy {
			// A failed probe leaves the position unknown: the server may
			// have restarted and gone back to its minimum recovery point.
			pos.Replay = c.replay(i, h)
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
	return pick{host: c.choose(s, rc, cand, advance), check: checking, wm: wm}
}

// choose picks one of the candidate hosts by Config.Select or the
// pgrouted_select policy. Round-robin and weighted advance a shared counter
// (not when advance is false, for Explain); least-inflight and random draw
// random numbers. None takes a lock.
func (c *Connector) choose(s *topology.Snapshot, rc readCtx, cand []int, advance bool) int {
	if len(cand) == 1 {
		return cand[0]
	}
	if c.cfg.Select != nil && advance {
		if i, ok := c.custom(s, rc, cand); ok {
			return i
		}
	}
	policy := c.cfg.Config.Select
	if policy == dsn.SelectNearest {
		best := cand[0]
		for _, i := range cand[1:] {
			if r := s.Hosts[i].RTT; r > 0 && (s.Hosts[best].RTT == 0 || r < s.Hosts[best].RTT) {
				best = i
			}
		}
		return best
	}
	cand = c.window(s, cand)
	if len(cand) == 1 {
		return cand[0]
	}
	counter := func() uint64 {
		if advance {
			return c.rr.Add(1) - 1
		}
		return c.rr.Load()
	}
	switch policy {
	case dsn.SelectRandom:
		return cand[rand.IntN(len(cand))]
	case dsn.SelectLeastInflight:
		// Power of two random choices on the in-flight count.
		a := rand.IntN(len(cand))
		b := rand.IntN(len(cand) - 1)
		if b >= a {
			b++
		}
		if c.inflight[cand[b]].n.Load() < c.inflight[cand[a]].n.Load() {
			return cand[b]
		}
		return cand[a]
	case dsn.SelectWeighted:
		total := 0
		for _, i := range cand {
			total += c.hosts[i].Weight
		}
		// Interleave: step through the positions 0..total-1 by a stride
		// coprime with total, so that a host of weight w gets w reads in
		// every total, spread out rather than in a burst.
		x := int((counter() * weightStride(total)) % uint64(total))
		for _, i := range cand {
			if x < c.hosts[i].Weight {
				return i
			}
			x -= c.hosts[i].Weight
		}
		return cand[len(cand)-1]
	}
	return cand[counter()%uint64(len(cand))]
}

// window keeps the candidates whose round trip is within
// pgrouted_latency_window of the fastest known one, and every candidate
// when no round trip is known. It filters in place.
func (c *Connector) window(s *topology.Snapshot, cand []int) []int {
	w := c.cfg.LatencyWindow
	if w < 0 {
		return cand
	}
	var fastest time.Duration
	for _, i := range cand {
		if r := s.Hosts[i].RTT; r > 0 && (fastest == 0 || r < fastest) {
			fastest = r
		}
	}
	if fastest == 0 {
		return cand
	}
	kept := cand[:0]
	for _, i := range cand {
		if r := s.Hosts[i].RTT; r == 0 || r <= fastest+w {
			kept = append(kept, i)
		}
	}
	return kept
}

// weightStride returns a stride coprime with total, near total·0.618, for
// the weighted interleave.
func weightStride(total int) uint64 {
	if total <= 2 {
		return 1
	}
	for k := total * 618 / 1000; k > 1; k-- {
		if gcd(k, total) == 1 {
			return uint64(k)
		}
	}
	return 1
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// custom asks Config.Select. A panic in it, or a name that is not a
// candidate, leaves the choice to the policy.
func (c *Connector) custom(s *topology.Snapshot, rc readCtx, cand []int) (host int, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			host, ok = -1, false
			if c.cfg.Logger != nil {
				c.cfg.Logger.Error("pgrouted: Config.Select panicked", "panic", fmt.Sprint(r))
			}
		}
	}()
	cs := make([]Candidate, len(cand))
	var primaryInsert lagmeter.LSN
	if s.Primary >= 0 {
		primaryInsert = s.Hosts[s.Primary].InsertLSN
	}
	for k, i := range cand {
		h := &s.Hosts[i]
		lag, known := lagmeter.ByteLag(primaryInsert, c.replay(i, h))
		cs[k] = Candidate{Name: h.Name, Weight: c.hosts[i].Weight, Inflight: c.inflight[i].n.Load(), RTT: h.RTT, ByteLag: lag, ByteLagKnown: known}
	}
	name := c.cfg.Select(rc.ctx, cs)
	for k, i := range cand {
		if cs[k].Name == name {
			return i, true
		}
	}
	return -1, false
}
