package pgrouted

import (
	"context"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/dsn"
)

// The Config.Select hook is one more picker in front of the policy's: the
// name it returns wins; an unknown name or a panic leaves the choice to
// the policy; Explain (advance false) does not call it.
func TestSelectHookPicker(t *testing.T) {
	ms := time.Millisecond
	c, s := testConnector(dsn.SelectRoundRobin, dsn.LatencyWindowOff, []int{1, 2, 3}, []time.Duration{ms, 2 * ms, 3 * ms})
	var seen []Candidate
	answer := "c"
	calls := 0
	c.picker = newPicker(dsn.SelectRoundRobin, dsn.LatencyWindowOff, func(_ context.Context, cs []Candidate) string {
		calls++
		seen = cs
		if answer == "panic" {
			panic("test")
		}
		return answer
	}, nil)
	for k := 0; k < 10; k++ {
		if got := choose(c, s, true, 0, 1, 2); got != 2 {
			t.Fatalf("hook answered c, got host %d", got)
		}
	}
	if len(seen) != 3 || seen[1].Name != "b" || seen[1].Weight != 2 || seen[1].RTT != 2*ms {
		t.Fatalf("candidates offered: %+v", seen)
	}
	for _, answer = range []string{"nope", "panic"} {
		got := counts(c, s, 30, 0, 1, 2)
		if got[0] != 10 || got[1] != 10 || got[2] != 10 {
			t.Fatalf("hook answered %q: the policy (round-robin) should choose, got %v", answer, got)
		}
	}
	answer, calls = "a", 0
	if choose(c, s, false, 0, 1, 2); calls != 0 {
		t.Fatal("Explain's choice called the hook")
	}
}

// The latency window is relative to the fastest replica as well as
// absolute: inside when rtt ≤ fastest + max(window, fastest).
func TestInLatencyWindow(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		rtt, fastest, window time.Duration
		in                   bool
	}{
		{rtt: ms, fastest: ms, window: 20 * ms, in: true},                // the fastest itself
		{rtt: 21 * ms, fastest: ms, window: 20 * ms, in: true},           // at the absolute edge
		{rtt: 22 * ms, fastest: ms, window: 20 * ms, in: false},          // past it: a far replica
		{rtt: 81 * ms, fastest: ms, window: 20 * ms, in: false},          // another region
		{rtt: 60 * ms, fastest: 30 * ms, window: 20 * ms, in: true},      // loaded machine: twice the fastest is in
		{rtt: 61 * ms, fastest: 30 * ms, window: 20 * ms, in: false},     // more than twice, past the window
		{rtt: 200 * ms, fastest: 150 * ms, window: 20 * ms, in: true},    // far from every replica alike
		{rtt: 300 * ms, fastest: 100 * ms, window: 20 * ms, in: false},   // three times the fastest
		{rtt: 500 * ms, fastest: 100 * ms, window: 1000 * ms, in: true},  // a wide window
		{rtt: 1100 * ms, fastest: 100 * ms, window: 1000 * ms, in: true}, // its edge
	} {
		if got := inLatencyWindow(tc.rtt, tc.fastest, tc.window); got != tc.in {
			t.Errorf("rtt %v, fastest %v, window %v: inside %v, want %v", tc.rtt, tc.fastest, tc.window, got, tc.in)
		}
	}

	// Through the round-robin picker: with the fastest at 30ms (a loaded
	// machine), a replica at 55ms stays in, where the absolute 20ms window
	// took it out; one at 90ms does not.
	c, s := testConnector(dsn.SelectRoundRobin, 20*ms, []int{1, 1, 1}, []time.Duration{30 * ms, 55 * ms, 90 * ms})
	if got := counts(c, s, 100, 0, 1, 2); got[0] != 50 || got[1] != 50 || got[2] != 0 {
		t.Fatalf("round-robin, fastest at 30ms: %v", got)
	}
}
