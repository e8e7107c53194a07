package pgrouted

import (
	"errors"
	"time"

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
// to judge (pickReplica).
func (h *hostView) servesReads() bool {
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
