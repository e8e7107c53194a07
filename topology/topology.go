package topology

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// Host is one server to probe.
type Host struct {
	// Name identifies the host in snapshots and events.
	Name string
	// Addr is where it listens, for display.
	Addr string
	// Config is the host's connection configuration: the same credentials
	// and TLS as the data path. It is copied; the probe connection gets
	// application_name "pgrouted-probe" and no ValidateConnect.
	Config *pgconn.Config

	// The hooks below tell the owner of the host (a circuit breaker, a
	// pool) what the topology does with it, without an index to join by.

	// OnProbe, when set, is called by the tracker after each probe of the
	// host, with the probe's error (nil on success). It must not block.
	OnProbe func(err error)
	// Backoff, when set, returns how long to wait before the next probe of
	// the host after a failed one, given its consecutive failures, instead
	// of Options.Interval (circuit breakers back off probes of an open
	// circuit).
	Backoff func(failures int) time.Duration
	// OnRemove, when set, is called on the tracker's goroutine when the
	// host, discovered through Options.Discover, leaves the provider's
	// view: its prober is stopped, and from the next snapshot on it is
	// Removed (its place stays, never reused). It must not block.
	OnRemove func()
	// OnRefuse, when set, is called on the tracker's goroutine when the
	// host, discovered through Options.Discover, is first refused for a
	// reason (see [HostState].Untrusted): its probe showed another
	// system's identifier, or it was out of recovery before it was ever
	// seen replicating this system, or it came Refused. Once per host and
	// reason. It must not block.
	OnRefuse func(reason string)
	// Refused, when set on a host Options.Discover returns, is why the host
	// may not be connected to at all (its connection would not prove the
	// server's identity, say): it is added, shown Untrusted for this
	// reason, and never probed, so nothing is ever sent to it; OnRefuse is
	// told once. Ignored for the configured hosts.
	Refused string
}

// Options tune the probers.
type Options struct {
	// Interval between two probes of a host. Default 1s.
	Interval time.Duration
	// Timeout of one probe. Default: Interval, at least 500ms. It is the
	// time a probe has to open its connection, and then to answer, when
	// the host's last connection and last answer took less than half of
	// it; otherwise twice what they took, and twice the time allowed after
	// one that ran out of it, up to the host's connect timeout (its
	// Config's ConnectTimeout, 5s when zero), which is also what a
	// prober's first connection and first query have. A host quick to
	// answer that stops answering is thus seen within Timeout, and one
	// that only answers slowly (SCRAM authentication, queries on starved
	// CPUs) is not kept down for as long as it stays slow: its probes take
	// the time it needs.
	Timeout time.Duration
	// Lease is how long a primary stays authoritative after the last probe
	// that confirmed it. Default 10s.
	Lease time.Duration
	// HistoryCapacity is how many primary samples the WAL position history
	// keeps (see [lagmeter.History]). Default [lagmeter.DefaultCapacity].
	HistoryCapacity int
	// EventBuffer, when above 0, makes New subscribe to the events before
	// any prober starts, with room for that many: [Topology.Events]
	// returns that subscription, which holds every event from the first
	// probe on. (A [Topology.Subscribe] after New may miss the first
	// probes' events.)
	EventBuffer int

	// Provider, when set, is the authority on which host leads and which
	// serve (Patroni, an orchestrator, the application): a host is then the
	// primary only when the provider names it leader and its own probe
	// finds it out of recovery, both inside the lease. The Topology asks it
	// every Interval, and whenever its Changes channel delivers. Without
	// it, the probes alone decide.
	Provider Provider

	// Discover, when set with a Provider, is asked for each member of a
	// view that matches no host: it returns the Host to probe it as, which
	// becomes host i of the snapshots (hosts are only ever appended), or
	// false to leave the member out. It runs on the tracker's goroutine:
	// it must be quick and must not wait for the Topology.
	Discover func(i int, m Member) (Host, bool)
	// DiscoverMax is the most discovered hosts kept at once (those not
	// Removed); the members past it are left out, until a discovered host
	// leaves the view. 0: [DefaultDiscoverMax].
	DiscoverMax int
	// OnDiscoverLimit, when set, is called on the tracker's goroutine the
	// first time a view has members left out for DiscoverMax, with how
	// many that view left out. Once per Topology. It must not block.
	OnDiscoverLimit func(left int)
}

// DefaultDiscoverMax is the default of [Options].DiscoverMax.
const DefaultDiscoverMax = 16

// ProbeApplicationName is the application_name of probe connections.
const ProbeApplicationName = "pgrouted-probe"

// Topology probes every host on its own connection and publishes what it
// learns as an immutable [Snapshot]. Create it with [New], stop it with
// [Topology.Close].
type Topology struct {
	opts Options

	snap    atomic.Pointer[Snapshot]
	changed atomic.Pointer[chan struct{}] // closed when the next snapshot is published
	history *lagmeter.History             // the primary's WAL positions, for staleness bounds

	results chan result
	views   chan viewResult // from the provider's poller
	askView chan struct{}   // ask the provider now (AskProvider)
	// probers are the hosts' probers, by index (ProbeNow). The tracker
	// replaces the slice when it adds a host.
	probers atomic.Pointer[[]*prober]
	done    chan struct{}
	wg      sync.WaitGroup

	subMu   sync.Mutex
	subs    map[*subscription]struct{}
	dropped atomic.Uint64
	events  <-chan Event // the subscription Options.EventBuffer asked for

	closeOnce sync.Once
}

// New starts one prober per host and the tracker that publishes snapshots.
// The first snapshot, before any probe returns, has every host unknown and no
// primary.
func New(hosts []Host, opts Options) (*Topology, error) {
	if len(hosts) == 0 {
		return nil, errors.New("topology: no host")
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = max(opts.Interval, 500*time.Millisecond)
	}
	if opts.Lease <= 0 {
		opts.Lease = 10 * time.Second
	}
	if opts.DiscoverMax <= 0 {
		opts.DiscoverMax = DefaultDiscoverMax
	}
	t := &Topology{
		opts:    opts,
		results: make(chan result, len(hosts)),
		views:   make(chan viewResult, 1),
		askView: make(chan struct{}, 1),
		done:    make(chan struct{}),
		subs:    make(map[*subscription]struct{}),
	}
	if opts.HistoryCapacity <= 0 {
		opts.HistoryCapacity = lagmeter.DefaultCapacity
	}
	t.history = lagmeter.NewHistory(opts.HistoryCapacity)
	first := &Snapshot{Hosts: make([]HostState, len(hosts)), Primary: -1, Lease: opts.Lease, Taken: time.Now()}
	probed := make([]Host, len(hosts))
	for i, h := range hosts {
		if h.Config == nil {
			return nil, fmt.Errorf("topology: host %q has no connection configuration", h.Name)
		}
		probed[i] = probeHost(h, opts.Timeout)
		first.Hosts[i] = HostState{Name: h.Name, Addr: h.Addr}
	}
	if opts.Provider != nil {
		first.Provider = &ProviderState{Name: opts.Provider.Name()}
		for i := range first.Hosts {
			first.Hosts[i].NoReads = true
		}
	}
	if opts.EventBuffer > 0 {
		t.events, _ = t.Subscribe(opts.EventBuffer)
	}
	t.probers.Store(&[]*prober{})
	t.snap.Store(first)
	tr := newTracker(t, first)
	for i := range probed {
		tr.startProber(i, probed[i])
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		tr.run()
	}()
	if opts.Provider != nil {
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.pollProvider()
		}()
	}
	return t, nil
}

// defaultConnectTimeout caps the time a probe may take to open its
// connection when the host's configuration has no ConnectTimeout (pgrouted
// sets its own default there: its DefaultConnectTimeout). See
// [Options].Timeout.
const defaultConnectTimeout = 5 * time.Second

// probeHost returns h as its prober connects: a copy of its configuration
// with application_name pgrouted-probe, no hooks, and as ConnectTimeout the
// cap of the prober's connect budget: the host's own connect timeout, else
// defaultConnectTimeout, at least the probe's timeout.
func probeHost(h Host, timeout time.Duration) Host {
	cfg := h.Config.Copy()
	cfg.ValidateConnect = nil
	cfg.AfterConnect = nil
	cfg.OnNotice = nil
	cfg.OnNotification = nil
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = ProbeApplicationName
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = defaultConnectTimeout
	}
	cfg.ConnectTimeout = max(cfg.ConnectTimeout, timeout)
	h.Config = cfg
	return h
}

// Snapshot returns the current picture of the cluster. It is one atomic
// load: no lock, no allocation.
func (t *Topology) Snapshot() *Snapshot { return t.snap.Load() }

// Changed returns a channel that is closed when a snapshot newer than the
// current one is published (after every probe result, and whenever a lease
// is re-evaluated), or when the Topology is closed. Take the channel before
// reading the snapshot it is about:
//
//	ch := t.Changed()
//	if s := t.Snapshot(); ready(s) { ... }
//	<-ch // a newer snapshot is out
//
// so that a wait for a condition on the snapshot needs no polling.
func (t *Topology) Changed() <-chan struct{} {
	for {
		if ch := t.changed.Load(); ch != nil {
			return *ch
		}
		ch := make(chan struct{})
		t.changed.CompareAndSwap(nil, &ch)
	}
}

// publish makes s the current snapshot and wakes whoever waits on
// Changed.
func (t *Topology) publish(s *Snapshot) {
	t.snap.Store(s)
	ch := make(chan struct{})
	if old := t.changed.Swap(&ch); old != nil {
		close(*old)
	}
}

// History is the current primary's WAL insert positions, one sample per
// successful probe, for clock-free staleness bounds. The tracker resets it
// when the primary's WAL history changes (another host, timeline or system).
func (t *Topology) History() *lagmeter.History { return t.history }

// ProbeNow asks for an immediate probe of host i, for example after SQLSTATE
// 25006 on a connection that believed it was on the primary. It never
// blocks; a probe already asked for is not asked twice.
func (t *Topology) ProbeNow(i int) {
	probers := *t.probers.Load()
	if i < 0 || i >= len(probers) {
		return
	}
	select {
	case probers[i].kick <- struct{}{}:
	default:
	}
}

// AskProvider asks the provider for its view now, rather than at its next
// poll, for example while a write waits for a primary. It never blocks;
// without a provider it does nothing.
func (t *Topology) AskProvider() {
	select {
	case t.askView <- struct{}{}:
	default:
	}
}

// Close stops every prober and the tracker, closes their connections and
// every subscription channel, and waits for them. It is safe to call more
// than once.
func (t *Topology) Close() error {
	t.closeOnce.Do(func() {
		close(t.done)
		t.wg.Wait()
		// The last snapshot stays; whoever waits on it learns the end.
		t.publish(t.snap.Load())
		t.subMu.Lock()
		for s := range t.subs {
			close(s.ch)
			delete(t.subs, s)
		}
		t.subMu.Unlock()
	})
	return nil
}

// Dropped counts events not delivered because a subscriber's channel was
// full.
func (t *Topology) Dropped() uint64 { return t.dropped.Load() }
