package pgrouted

import (
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/lagmeter"
)

// TestGateLeavesOnlyWhenKnownBeyond: a replica behind every sample of a
// history too short to span the budget (a connector just opened, a
// delayed replica) does not leave; one known beyond it does, and then
// stays out until it is back under the return threshold.
func TestGateLeavesOnlyWhenKnownBeyond(t *testing.T) {
	b := newGateBudgets(lagmeter.Budget{MaxTime: 30 * time.Second}, 100*time.Millisecond)
	now := time.Now()
	unbounded := lagmeter.Lag{TimeKnown: true, Time: lagmeter.Unbounded}
	var g budgetGate
	if got := g.pass(&b, unbounded, false, now, false); got != gateIn || g.out.Load() || g.changes.Load() != 0 {
		t.Fatalf("unbounded for want of samples: state %d, out %v, %d changes; want it in, unchanged", got, g.out.Load(), g.changes.Load())
	}
	if got := g.pass(&b, unbounded, true, now, false); got != gateOut || g.changes.Load() != 1 {
		t.Fatalf("unbounded over a history spanning the budget: state %d, %d changes; want out, 1 change", got, g.changes.Load())
	}
	// 20 s: within the budget, not under the return threshold (15.05 s).
	if got := g.pass(&b, lagmeter.Lag{TimeKnown: true, Time: 20 * time.Second}, true, now, false); got != gateOut {
		t.Fatalf("20 s behind after leaving: state %d, want still out", got)
	}
	if got := g.pass(&b, lagmeter.Lag{TimeKnown: true, Time: time.Second}, true, now, false); got == gateOut || g.changes.Load() != 2 {
		t.Fatalf("1 s behind: state %d, %d changes; want back (2 changes)", got, g.changes.Load())
	}
}
