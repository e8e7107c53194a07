package testcluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
)

// Fault is a network fault point: a TCP proxy (toxiproxy, in process) in
// front of a node's PostgreSQL port, or on a replica's replication link.
// Faults act on the network only; PostgreSQL keeps running. Each method
// applies to existing connections as well as to new ones.
type Fault struct {
	mu    sync.Mutex
	proxy *toxiproxy.Proxy
	// blackholed is set while a blackhole is in place, so that Heal resets
	// the connections whose bytes the blackhole swallowed.
	blackholed bool
}

// Addr is the host:port clients connect to.
func (f *Fault) Addr() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.proxy.Listen
}

func (f *Fault) addToxic(name, typ, stream string, attrs string) error {
	body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)
	if _, err := f.proxy.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
		return fmt.Errorf("testcluster: fault %s: add %s: %w", f.proxy.Name, name, err)
	}
	return nil
}

func (f *Fault) removeToxic(name string) {
	if f.proxy.Toxics.GetToxic(name) != nil {
		_ = f.proxy.Toxics.RemoveToxic(context.Background(), name)
	}
}

// Latency adds d to every round trip through the fault point (the delay is
// applied to the bytes flowing back from the server). A later call replaces
// the previous latency; Latency(0) removes it.
func (f *Fault) Latency(d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removeToxic("latency")
	if d <= 0 {
		return nil
	}
	return f.addToxic("latency", "latency", "downstream", fmt.Sprintf(`{"latency":%d,"jitter":0}`, d.Milliseconds()))
}

// Blackhole cuts the node off: every byte in either direction is silently
// dropped, connections stay open, new connections are accepted and never
// answered, as with a network partition. Heal ends it.
func (f *Fault) Blackhole() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.blackholed {
		return nil
	}
	if err := f.addToxic("blackhole_up", "timeout", "upstream", `{"timeout":0}`); err != nil {
		return err
	}
	if err := f.addToxic("blackhole_down", "timeout", "downstream", `{"timeout":0}`); err != nil {
		f.removeToxic("blackhole_up")
		return err
	}
	f.blackholed = true
	return nil
}

// Reset closes every connection that goes through the fault point now, as a
// peer reset would. New connections work at once.
func (f *Fault) Reset() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resetLocked()
}

func (f *Fault) resetLocked() error {
	f.proxy.Stop()
	if err := f.proxy.Start(); err != nil {
		return fmt.Errorf("testcluster: fault %s: restart proxy on %s: %w", f.proxy.Name, f.proxy.Listen, err)
	}
	return nil
}

// Heal removes every fault. Connections that went through a blackhole are
// reset, because the bytes it swallowed are lost and such a connection could
// never recover.
func (f *Fault) Heal() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.proxy.Toxics.ResetToxics(context.Background())
	if f.blackholed {
		f.blackholed = false
		return f.resetLocked()
	}
	return nil
}

// setUpstream points the proxy at another address, resetting its
// connections.
func (f *Fault) setUpstream(addr string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.proxy.Upstream == addr {
		return nil
	}
	f.proxy.Stop()
	f.proxy.Upstream = addr
	if err := f.proxy.Start(); err != nil {
		return fmt.Errorf("testcluster: fault %s: restart proxy on %s: %w", f.proxy.Name, f.proxy.Listen, err)
	}
	return nil
}

func (f *Fault) upstream() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.proxy.Upstream
}

func (f *Fault) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.proxy.Stop()
}
