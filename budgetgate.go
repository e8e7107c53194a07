package pgrouted

import (
	"sync/atomic"
	"time"

	"github.com/pgrouted/pgrouted/lagmeter"
)

// This file is each replica's budget gate: hysteresis and a ramp around
// the staleness budget (pgrouted_max_lag), so that a replica that falls
// behind and catches up again neither flaps in and out of the reads nor
// takes its whole share back at once.
//
//   - A replica leaves when a read finds it beyond the connector's budget
//     (its staleness bound, or its byte lag, over pgrouted_max_lag).
//   - It comes back only once it is within the return threshold: for a
//     time budget, halfway between the probe interval (about the bound of
//     a caught-up replica) and the budget; for a byte budget, half the
//     budget. A replica whose lag hovers around the budget stays out.
//   - For rampProbes probe intervals after it came back its share of the
//     reads grows from 0 to whole: a read that another replica can serve
//     takes it only in that proportion (one read in 16 at a time). A read
//     that no other replica can serve takes it whatever the ramp: the ramp
//     moves reads between replicas, never onto the primary.
//
// The gate adds to the per-read staleness check, which still applies to
// every read (with its own budget, WithMaxLag): no read is served beyond
// its budget. The gate follows the connector's budget only, the loosest
// any read has (a per-request budget can only be tighter). Its changes
// (out, back) are counted per replica: Topology's HostInfo.BudgetChanges.
// A read that is only explained (Explain) changes nothing.

// rampProbes is how many probe intervals a replica's share takes to grow
// back to whole after it came back within the budget.
const rampProbes = 3

// rampSteps is the resolution of the ramp: reads are admitted to a
// ramping replica by turns of rampSteps.
const rampSteps = 16

// budgetGate is a replica's state against the connector's staleness
// budget.
type budgetGate struct {
	out     atomic.Bool
	back    atomic.Int64  // when it last came back, ns since gateBase; 0: never
	changes atomic.Uint64 // times it left or came back
	turn    atomic.Uint32 // reads offered while it ramps
}

// gateBase is the origin of budgetGate.back.
var gateBase = time.Now()

// gateBudgets are a Connector's thresholds: a replica leaves beyond
// leave, the connector's budget, and comes back within back.
type gateBudgets struct {
	leave, back lagmeter.Budget
	ramp        time.Duration
}

// newGateBudgets derives the return threshold from the connector's budget
// b under probe interval probe.
func newGateBudgets(b lagmeter.Budget, probe time.Duration) gateBudgets {
	g := gateBudgets{leave: b, ramp: rampProbes * probe}
	if b.MaxTime > 0 {
		g.back.MaxTime = probe + (b.MaxTime-probe)/2
		if g.back.MaxTime <= 0 {
			g.back.MaxTime = b.MaxTime
		}
	}
	if b.MaxBytes > 0 {
		g.back.MaxBytes = max(b.MaxBytes/2, 1)
	}
	return g
}

// gateState is what pass decided for one replica and one read.
type gateState uint8

const (
	gateIn      gateState = iota // within the budget, whole share
	gateOut                      // beyond the budget, or not back under the return threshold
	gateSkipped                  // ramping, and this read is not its turn
)

// pass updates g with the lag l seen at now (unless dry) and says whether
// a read may use the replica. beyond is false when l's time bound is
// [lagmeter.Unbounded] only for want of older samples (see
// lagmeter.History.Spans): then the replica does not leave on it (the
// read's own staleness check still skips it).
func (g *budgetGate) pass(b *gateBudgets, l lagmeter.Lag, beyond bool, now time.Time, dry bool) gateState {
	if b.leave.IsZero() {
		return gateIn
	}
	if g.out.Load() {
		if ok, _ := b.back.Allows(l); !ok {
			return gateOut
		}
		if dry {
			return gateOut
		}
		if !g.out.CompareAndSwap(true, false) {
			return g.ramp(b, now, dry)
		}
		g.back.Store(max(int64(now.Sub(gateBase)), 1))
		g.turn.Store(0)
		g.changes.Add(1)
	} else if ok, why := b.leave.Allows(l); !ok && why == lagmeter.ReasonBehind && (beyond || l.BytesKnown && b.leave.MaxBytes > 0 && l.Bytes > b.leave.MaxBytes) {
		if !dry && g.out.CompareAndSwap(false, true) {
			g.changes.Add(1)
		}
		return gateOut
	}
	return g.ramp(b, now, dry)
}

// ramp says whether a read at now takes the replica while its share
// grows back.
func (g *budgetGate) ramp(b *gateBudgets, now time.Time, dry bool) gateState {
	share, ok := g.share(b, now)
	if ok {
		return gateIn
	}
	var t uint32
	if dry {
		t = g.turn.Load()
	} else {
		t = g.turn.Add(1)
	}
	if t%rampSteps < uint32(share*rampSteps) {
		return gateIn
	}
	return gateSkipped
}

// share is the replica's share of reads at now, and true once it is
// whole.
func (g *budgetGate) share(b *gateBudgets, now time.Time) (float64, bool) {
	back := g.back.Load()
	if back == 0 || b.ramp <= 0 {
		return 1, true
	}
	d := now.Sub(gateBase) - time.Duration(back)
	if d >= b.ramp {
		// The ramp is over: forget when it began, so that the reads
		// after it read no clock here (unless it came back again since).
		g.back.CompareAndSwap(back, 0)
		return 1, true
	}
	return max(float64(d), 0) / float64(b.ramp), false
}

// state describes g at now for Topology: "in", "out" or "ramp".
func (g *budgetGate) state(b *gateBudgets, now time.Time) string {
	if g.out.Load() {
		return "out"
	}
	if _, whole := g.share(b, now); !whole {
		return "ramp"
	}
	return "in"
}
