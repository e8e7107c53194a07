package pgrouted

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgrouted/pgrouted/lagmeter"
	"github.com/pgrouted/pgrouted/topology"
)

// hostSet is the Connector's host set and its lifecycle, apart from the
// statement path: the hosts (the DSN's, then discovered ones), the
// topology that probes them and the views of its snapshots, the primary's
// terms, the pools of removed hosts being drained, and the workers that
// follow them, from NewConnector to Close. The statement path reaches it
// through view and liveTerm (which moves the term along the topology, as
// followTerms does); the Connector opens it (connector.go, hosts.go) and
// closes it (closeHosts).
type hostSet struct {
	hosts   hostTable // in DSN order, then discovered ones, as in topology snapshots
	views   views     // the newest snapshot joined with hosts (view.go)
	top     *topology.Topology
	history *lagmeter.History // the primary's WAL positions (from topology)

	// started is set once top and history are: a pool's connection may
	// be opened before (pgrouted_replica_min_conns), and asks wire.
	started atomic.Bool
	// booted is set once every host answered (pgrouted_strict_boot).
	booted atomic.Bool

	// drains are the pools of removed hosts being closed.
	drains sync.WaitGroup
	// patroni is the provider the Connector built for
	// pgrouted_topology=patroni, closed with it; nil otherwise.
	patroni *topology.Patroni
	// terms is the current primary's term (term.go), which followTerms
	// ends when the topology moves on, until stopTerms is closed.
	terms     terms
	stopTerms chan struct{}
	termsDone chan struct{}
	// logDone is closed once the log of topology events (watch) ended.
	logDone chan struct{}
}

// strictBoot waits until every host was probed once, and fails while one
// of them did not answer; it waits at most a probe interval (probeEvery)
// and 10 s for the first probes.
func (hs *hostSet) strictBoot(ctx context.Context, probeEvery time.Duration) error {
	deadline := time.Now().Add(probeEvery + 10*time.Second)
	for {
		changed := hs.top.Changed()
		s := hs.top.Snapshot()
		var down []string
		probed := true
		for _, h := range s.Hosts {
			switch {
			case h.LastProbe.IsZero():
				probed = false
			case !h.Healthy:
				down = append(down, h.Name+" ("+h.LastError+")")
			}
		}
		if probed && len(down) == 0 {
			hs.booted.Store(true)
			return nil
		}
		if probed || !time.Now().Before(deadline) {
			if len(down) == 0 {
				return fmt.Errorf("pgrouted: strict boot: hosts not probed yet")
			}
			return fmt.Errorf("pgrouted: strict boot: unreachable: %s", strings.Join(down, ", "))
		}
		if err := awaitSnapshot(ctx, changed, deadline); err != nil {
			return err
		}
	}
}

// closeHosts ends what the host set runs, once the Connector's workers
// that read it stopped: the probers, the log of their events, the idle
// connections of hosts that are down, every pool, and the drains of
// removed hosts.
func (hs *hostSet) closeHosts() {
	if hs.stopTerms != nil {
		close(hs.stopTerms)
		<-hs.termsDone
	}
	v := hs.view()
	hs.top.Close()
	if hs.logDone != nil {
		<-hs.logDone
	}
	for _, h := range v.hosts {
		if !h.removed.Load() && (!h.probe.Healthy || !h.breaker.Allow()) {
			h.dropIdle()
		}
	}
	hs.closePools()
	hs.drains.Wait()
	if hs.patroni != nil {
		hs.patroni.CloseIdleConnections()
	}
}

// closePools closes every host's pool.
func (hs *hostSet) closePools() {
	for _, h := range hs.hosts.all() {
		h.pool.Close()
	}
}

// awaitSnapshot waits until changed (from Topology.Changed) is closed: a
// newer snapshot is out. It returns ctx's error, or nil at deadline too:
// the caller looks at the snapshot again either way.
func awaitSnapshot(ctx context.Context, changed <-chan struct{}, deadline time.Time) error {
	t := time.NewTimer(max(time.Until(deadline), 0))
	defer t.Stop()
	select {
	case <-changed:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}
