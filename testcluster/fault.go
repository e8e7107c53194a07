//go:build unix

package testcluster

import (
	"fmt"
	"time"

	"github.com/pgrouted/pgrouted/testcluster/internal/faultproxy"
)

// Fault is a network fault point: a TCP proxy (in process) in front of a
// node's PostgreSQL port, or on a replica's replication link. Faults act on
// the network only; PostgreSQL keeps running. Each method applies to
// existing connections as well as to new ones, and is in effect when it
// returns.
type Fault struct {
	name  string
	proxy *faultproxy.Proxy
}

func newFault(name, upstream string) (*Fault, error) {
	p, err := faultproxy.New(upstream)
	if err != nil {
		return nil, fmt.Errorf("testcluster: start fault point %s: %w", name, err)
	}
	return &Fault{name: name, proxy: p}, nil
}

func (f *Fault) wrap(err error) error {
	if err != nil {
		return fmt.Errorf("testcluster: fault %s: %w", f.name, err)
	}
	return nil
}

// Addr is the host:port clients connect to.
func (f *Fault) Addr() string { return f.proxy.Addr() }

// Latency adds d to every round trip through the fault point (the delay is
// applied to the bytes flowing back from the server). A later call replaces
// the previous latency; Latency(0) removes it.
func (f *Fault) Latency(d time.Duration) error {
	return f.wrap(f.proxy.SetLatency(d))
}

// Blackhole cuts the node off: every byte in either direction is silently
// dropped, connections stay open, new connections are accepted and never
// answered, as with a network partition. Heal ends it.
func (f *Fault) Blackhole() error {
	return f.wrap(f.proxy.Blackhole())
}

// Reset closes every connection that goes through the fault point now, as a
// peer reset would. New connections work at once.
func (f *Fault) Reset() error {
	return f.wrap(f.proxy.Reset())
}

// Heal removes every fault. Connections that went through a blackhole are
// reset, because the bytes it swallowed are lost and such a connection could
// never recover.
func (f *Fault) Heal() error {
	return f.wrap(f.proxy.Heal())
}

// setUpstream points the proxy at another address, resetting its
// connections. Its own address does not change.
func (f *Fault) setUpstream(addr string) error {
	return f.wrap(f.proxy.SetUpstream(addr))
}

func (f *Fault) upstream() string { return f.proxy.Upstream() }

// stop closes the fault point and its connections, and waits for its
// goroutines.
func (f *Fault) stop() { f.proxy.Close() }
