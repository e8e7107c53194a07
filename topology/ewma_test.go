package topology

import (
	"testing"
	"time"
)

// TestRTTEWMA feeds probe results to the tracker directly: the first sample
// sets the average, then each new one weighs 0.2.
func TestRTTEWMA(t *testing.T) {
	top := &Topology{opts: Options{Interval: time.Second, Lease: 10 * time.Second}, subs: map[*subscription]struct{}{}}
	first := &Snapshot{Hosts: []HostState{{Name: "a"}}, Primary: -1}
	tr := newTracker(top, first)
	now := time.Now()
	feed := func(rtt time.Duration) time.Duration {
		tr.apply(result{i: 0, sentAt: now, rtt: rtt, inRecovery: true})
		return top.Snapshot().Hosts[0].RTT
	}
	if got := feed(10 * time.Millisecond); got != 10*time.Millisecond {
		t.Fatalf("first sample: %v", got)
	}
	if got := feed(20 * time.Millisecond); got != 12*time.Millisecond {
		t.Fatalf("second sample: %v, want 0.2*20+0.8*10 = 12ms", got)
	}
	if got := feed(2 * time.Millisecond); got != 10*time.Millisecond {
		t.Fatalf("third sample: %v, want 0.2*2+0.8*12 = 10ms", got)
	}
	// A failed probe leaves the average alone.
	tr.apply(result{i: 0, sentAt: now, err: errTest})
	if got := top.Snapshot().Hosts[0]; got.RTT != 10*time.Millisecond || got.Healthy {
		t.Fatalf("after a failure: %+v", got)
	}
}

type testError struct{}

func (testError) Error() string { return "test" }

var errTest = testError{}
