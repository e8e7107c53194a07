//go:build unix

package topology_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/topology"
)

// TestSlowConnectingHostComesBack: a host whose connections take longer to
// open than a probe's timeout (authentication on starved CPUs does) is
// probed, and comes back after its probe connection is lost, instead of
// failing every probe for as long as it stays slow. Its connections are
// slowed by the dialer, before the real server answers.
func TestSlowConnectingHostComesBack(t *testing.T) {
	restore(t)
	const slow = 1500 * time.Millisecond // three probe timeouts
	var delay atomic.Int64
	delay.Store(int64(slow))
	var dials atomic.Int64
	hs := hosts(t, "", 0, 1, 2)
	dial := (&net.Dialer{}).DialContext
	hs[1].Config.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		select {
		case <-time.After(time.Duration(delay.Load())):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return dial(ctx, network, addr)
	}
	top := start(t, hs, topology.Options{Interval: 100 * time.Millisecond}) // probes time out after 500ms
	healthy := func(s *topology.Snapshot) bool { return s.Hosts[1].Healthy && s.Hosts[1].Role == topology.RoleStandby }

	// A prober's first connection has the host's connect timeout.
	_, took := waitFor(t, top, 30*time.Second, "node1 probed through its slow first connection", healthy)
	t.Logf("node1 healthy %v after the start, its connections opening in %v", took, slow)

	// lose closes node1's probe connection, waits for the failed probe,
	// then for node1 to be healthy again.
	lose := func(what string) time.Duration {
		t.Helper()
		if err := cluster.Node(1).Fault().Reset(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, top, 30*time.Second, "node1 down after its probe connection was reset", func(s *topology.Snapshot) bool { return !s.Hosts[1].Healthy })
		before := dials.Load()
		s, took := waitFor(t, top, 40*time.Second, what, healthy)
		t.Logf("node1 healthy again %v after its probe failed, after %d connection attempts; last error %q", took, dials.Load()-before, s.Hosts[1].LastError)
		return took
	}
	// Connections quick again: a lost one is replaced at once.
	delay.Store(0)
	lose("node1 healthy again, its connections quick")
	// Then slow: the next connection has the probe's timeout (node1
	// connected quickly last time), runs out of it, and the budget doubles
	// until a connection opens.
	delay.Store(int64(slow))
	lose("node1 healthy again, its connections slower than a probe's timeout")
}

// TestSlowAnsweringHostComesBack: a host whose answers take longer than a
// probe's timeout (queries on starved CPUs) is probed again, with the time
// it needs, instead of failing every probe for as long as it stays slow;
// once quick again, its probes have the probe's timeout again. Every
// answer of node1 is delayed by its fault point.
func TestSlowAnsweringHostComesBack(t *testing.T) {
	restore(t)
	const slow = 800 * time.Millisecond // above the probes' 500ms timeout
	top := start(t, hosts(t, "", 0, 1, 2), topology.Options{Interval: 100 * time.Millisecond})
	waitFor(t, top, 30*time.Second, "node1 probed", func(s *topology.Snapshot) bool { return s.Hosts[1].Healthy })
	fault := cluster.Node(1).Fault()
	if err := fault.Latency(slow); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fault.Latency(0) })
	waitFor(t, top, 30*time.Second, "node1 down, its probe timed out", func(s *topology.Snapshot) bool { return !s.Hosts[1].Healthy })
	s, took := waitFor(t, top, 40*time.Second, "node1 healthy again, answering in more than a probe's timeout", func(s *topology.Snapshot) bool {
		return s.Hosts[1].Healthy && s.Hosts[1].Role == topology.RoleStandby
	})
	t.Logf("node1 healthy again %v after its first failed probe; RTT EWMA %v", took, s.Hosts[1].RTT)
	// Its answers really were slow: the probes that brought it back took
	// longer than the timeout.
	waitFor(t, top, 30*time.Second, "node1's RTT EWMA above the probes' timeout", func(s *topology.Snapshot) bool {
		return s.Hosts[1].Healthy && s.Hosts[1].RTT > 500*time.Millisecond
	})
	if err := fault.Latency(0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, top, 30*time.Second, "node1 quick again", func(s *topology.Snapshot) bool {
		return s.Hosts[1].Healthy && s.Hosts[1].RTT < 100*time.Millisecond
	})
}
