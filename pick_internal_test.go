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
