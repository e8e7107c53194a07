package pgrouted

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgrouted/pgrouted/dsn"
	"github.com/pgrouted/pgrouted/topology"
)

// hostTable is the Connector's hosts, indexed as in topology snapshots: the
// DSN's, then those discovered (pgrouted_discover). It only grows, so that
// an index means the same host for ever: a host found by discovery is
// appended before any snapshot names it, and one that leaves stays in its
// place, removed, its pool drained and closed. Readers load the slice with
// one atomic load and take no lock.
type hostTable struct {
	p  atomic.Pointer[[]*host]
	mu sync.Mutex // serialises add
}

// all returns the hosts now; the slice is never changed in place.
func (t *hostTable) all() []*host {
	if p := t.p.Load(); p != nil {
		return *p
	}
	return nil
}

// add appends h, which must have the next index.
func (t *hostTable) add(h *host) {
	t.mu.Lock()
	defer t.mu.Unlock()
	next := append(append([]*host(nil), t.all()...), h)
	t.p.Store(&next)
}

// discovery sets, in o, what pgrouted_discover asks of the topology: the
// hosts it adds (discoverHost), at most pgrouted_discover_max of them,
// and the log line that says once that members were left out.
func (c *Connector) discovery(o *topology.Options) {
	if !c.cfg.Discover {
		return
	}
	o.Discover = c.discoverHost
	o.DiscoverMax = c.cfg.DiscoverMax
	o.OnDiscoverLimit = func(left int) {
		c.logWarn("pgrouted: members of the topology provider's view left out: pgrouted_discover_max hosts are discovered already",
			"pgrouted_discover_max", o.DiscoverMax, "left_out", left)
	}
}

// discoverHost builds host i for member m of the topology provider's view,
// with the DSN's user, database, TLS and other settings (those of its first
// TCP host), and adds it to c.hosts. It runs on the topology's tracker
// (topology.Options.Discover).
//
// The provider's word makes the member a host, not a trusted one: the
// topology lets it serve only once its own probe shows it is of this
// system (topology.HostState.Untrusted). Until then, nothing in its
// settings trusts the name the provider gave: the TLS settings are the
// DSN's unchanged (verify-full checks the DSN's host name, not the
// member's). And its connections are opened only when they prove the
// server's identity or send no password (discoveredProof): otherwise the
// host is added refused (topology.Host.Refused), shown untrusted with the
// setting to change, and never connected to.
func (c *Connector) discoverHost(i int, m topology.Member) (topology.Host, bool) {
	if i != len(c.hosts.all()) {
		c.logWarn("pgrouted: discovered member not added: host index mismatch", "member", m.Name)
		return topology.Host{}, false
	}
	tmpl := templateOf(c.cfg.Hosts)
	if tmpl == nil {
		c.logWarn("pgrouted: discovered member not added: the DSN names no TCP host whose settings it could take", "member", m.Name)
		return topology.Host{}, false
	}
	cc := tmpl.Copy()
	cc.Host, cc.Port = m.Host, m.Port
	fallbacks := make([]*pgconn.FallbackConfig, 0, len(cc.Fallbacks))
	for _, fb := range cc.Fallbacks {
		fallbacks = append(fallbacks, &pgconn.FallbackConfig{Host: m.Host, Port: m.Port, TLSConfig: fb.TLSConfig})
	}
	cc.Fallbacks = fallbacks
	refused := discoveredProof(&cc.Config)
	if refused != "" {
		// Nothing may dial it, whatever asks (a pool, a probe).
		cc.DialFunc = func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("pgrouted: discovered host refused: " + refused)
		}
	}
	_, addr := pgconn.NetworkAddress(m.Host, m.Port)
	name := m.Name
	for _, h := range c.hosts.all() {
		if name == "" || (strings.EqualFold(h.Name, name) && !h.removed.Load()) || strings.EqualFold(name, "primary") {
			name = addr
			break
		}
	}
	dh := dsn.Host{Name: name, Addr: addr, Weight: dsn.DefaultWeight, ConnConfig: cc}
	hs, err := newHost(i, dh, &c.cfg.Config, c.circuitChanged, c.wire)
	if err != nil {
		c.logWarn("pgrouted: discovered member not added", "member", m.Name, "error", err.Error())
		return topology.Host{}, false
	}
	hs.discovered = true // before topologyHost
	c.hosts.add(hs)
	c.logInfo("pgrouted: host discovered", "host", name, "address", addr)
	th := c.topologyHost(hs, &cc.Config)
	th.Refused = refused
	return th, true
}

// templateOf returns the configuration a discovered host copies: the
// first TCP host's (a unix socket's has no TLS settings to pass on), or
// nil when every host is a unix socket.
func templateOf(hosts []dsn.Host) *pgx.ConnConfig {
	for _, h := range hosts {
		if h.ConnConfig != nil && !isSocket(h.ConnConfig.Host) {
			return h.ConnConfig
		}
	}
	return nil
}

// isSocket reports whether host is a unix socket directory, as pgconn
// tells them apart.
func isSocket(host string) bool { return strings.HasPrefix(host, "/") }

// discoveredProof returns "" when the connections of a discovered host,
// whose configuration is cfg, may be opened, and otherwise why not, naming
// the settings to change. They may when they give a server nothing to
// steal or relay (no password, no OAuth token), or when they prove the
// server's identity before the password serves it:
//   - TLS whose certificate is checked against the host name
//     (sslmode=verify-full: no verification skipped) on every attempt,
//     fallbacks included (sslmode=prefer falls back to plain TCP);
//   - SCRAM channel binding (channel_binding=require): the exchange is
//     bound to the TLS channel, so a server that relays it to the real
//     one fails it, and pgx accepts no authentication without it.
//
// Under sslmode=prefer, require or verify-ca without channel binding, a
// server the provider named could relay the SCRAM exchange to the real
// server and sit in the middle of every connection: refused.
func discoveredProof(cfg *pgconn.Config) string {
	if cfg.Password == "" && cfg.OAuthTokenProvider == nil {
		return ""
	}
	if cfg.ChannelBinding == "require" {
		return ""
	}
	verified := verifiesName(cfg.TLSConfig)
	for _, fb := range cfg.Fallbacks {
		verified = verified && verifiesName(fb.TLSConfig)
	}
	if verified {
		return ""
	}
	return discoveredNoProof
}

// discoveredNoProof is why a discovered host with a password and no proof
// of the server's identity is refused (HostInfo.Untrusted, the Warn line).
const discoveredNoProof = "refused, never connected: its connections would send the DSN's password to a server that has not proved its identity; set sslmode=verify-full or channel_binding=require (or connect without a password)"

// verifiesName reports whether a connection with TLS configuration t
// checks the server's certificate and its name (sslmode=verify-full).
func verifiesName(t *tls.Config) bool {
	return t != nil && !t.InsecureSkipVerify
}

// topologyHost is h as the topology probes it, with the hooks that tell h
// of its probes (its circuit breaker) and, for a discovered host, of its
// removal. Its probes' connections have the connect timeout its data
// connections have (boundConnect).
func (c *Connector) topologyHost(h *host, cfg *pgconn.Config) topology.Host {
	cfg = cfg.Copy()
	boundConnect(cfg)
	th := topology.Host{
		Name: h.Name, Addr: h.Addr, Config: cfg,
		OnProbe:  h.breaker.ReportProbe,
		Backoff:  func(int) time.Duration { return h.breaker.ProbeBackoff() },
		OnRemove: func() { c.removeHost(h) },
	}
	if h.discovered {
		th.OnRefuse = func(reason string) {
			c.logWarn("pgrouted: discovered host refused", "host", h.Name, "address", h.Addr, "reason", reason)
		}
	}
	return th
}

// removeHost is told by the topology that discovered host h left the
// provider's view: it takes no new reads (the snapshot says removed), and
// its pool is closed once the reads on it returned their connections.
func (c *Connector) removeHost(h *host) {
	if h.removed.Swap(true) {
		return
	}
	c.drains.Add(1)
	go func() {
		defer c.drains.Done()
		// pgxpool's Close waits for every acquired connection to be
		// released: the reads in flight finish first.
		h.pool.Close()
	}()
	c.logInfo("pgrouted: host removed", "host", h.Name)
}
