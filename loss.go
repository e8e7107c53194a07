package pgrouted

import (
	"sync"

	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// This file counts and logs the writes a transition of the read-your-writes
// state found lost, or possibly lost, across a failover (reportLoss), each
// loss once (lostSet).

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
