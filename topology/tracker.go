package topology

import (
	"fmt"
	"slices"
	"time"

	"github.com/pgrouted/pgrouted/lagmeter"
)

// tracker is the single owner of the cluster's state: it applies probe
// results, decides the primary and publishes snapshots and events.
type tracker struct {
	t     *Topology
	hosts []tracked // by host index, as in snapshots

	histHost    int    // the host the history's samples come from
	primary     int    // of the last published snapshot
	lastPrimary int    // last primary that was not "none", for the epoch
	epoch       uint64 // increments when the primary becomes another host
	confirmed   time.Time
	conflicts   uint64
	conflict    bool
	reported    map[string]bool // the missing grants already reported (privileges.go)

	// leaseEnd fires when the primary's lease runs out without a new
	// confirmation (see armLease).
	leaseEnd *time.Timer

	// With a provider: the authority of its last view, when that view's
	// request was sent, and what the snapshot shows of it.
	auth   *Authority
	viewAt time.Time
	prov   ProviderState

	// initial is the number of configured hosts (the others were
	// discovered).
	initial int
	// limitSaid is set once OnDiscoverLimit was called.
	limitSaid bool
}

// tracked is what the tracker keeps of one host.
type tracked struct {
	state HostState     // what the snapshot shows of it
	claim *claim        // its latest claim to be primary, or nil
	sync  []SyncStandby // from its last probe as primary
	// endpoint is where it listens, for matching a provider's members.
	endpoint Endpoint
	prober   *prober // stopped when a discovered host is removed

	// For a discovered host (see trust): the system identifier its last
	// successful probe read (0: unknown), whether it was seen in recovery
	// with the configured hosts' identifier, whether the provider's last
	// view lets it serve reads, and the refusals already said (OnRefuse).
	systemID    uint64
	seenStandby bool
	readable    bool
	said        refusal
	// refused is Host.Refused: the host is never probed, and never
	// trusted.
	refused string
}

// refusal is a kind of reason a discovered host is refused, as a bit.
type refusal uint8

const (
	refusedSystem refusal = 1 << iota // another system's identifier
	refusedLead                       // out of recovery before seen replicating
	refusedHost                       // refused by its owner (Host.Refused)
)

func newTracker(t *Topology, first *Snapshot) *tracker {
	tr := &tracker{
		t:           t,
		hosts:       make([]tracked, len(first.Hosts)),
		primary:     -1,
		lastPrimary: -1,
		histHost:    -1,
		initial:     len(first.Hosts),
		leaseEnd:    time.NewTimer(time.Hour),
	}
	tr.leaseEnd.Stop()
	for i := range first.Hosts {
		tr.hosts[i].state = first.Hosts[i]
	}
	if t.opts.Provider != nil {
		tr.prov = ProviderState{Name: t.opts.Provider.Name()}
	}
	return tr
}

// startProber starts the prober of host i, h being its probe
// configuration (see probeHost), and adds i to the hosts ProbeNow can
// reach. Hosts are started in index order. The prober of a Refused host
// is kept (for its hooks and its place) but never runs.
func (tr *tracker) startProber(i int, h Host) {
	t := tr.t
	p := &prober{t: t, i: i, host: h, kick: make(chan struct{}, 1), stop: make(chan struct{})}
	tr.hosts[i].endpoint, tr.hosts[i].prober = endpointOf(h), p
	probers := append(slices.Clone(*t.probers.Load()), p)
	t.probers.Store(&probers)
	if tr.hosts[i].refused != "" {
		return
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		p.run()
	}()
}

// endpoints is where each host listens, by index, for Authorize.
func (tr *tracker) endpoints() []Endpoint {
	es := make([]Endpoint, len(tr.hosts))
	for i := range tr.hosts {
		es[i] = tr.hosts[i].endpoint
		es[i].Untrusted = tr.hosts[i].state.Untrusted != ""
	}
	return es
}

// discover removes the discovered hosts that v no longer lists (see
// Host.OnRemove), then adds a host for each member of v that matches none
// (see Options.Discover), as long as fewer than Options.DiscoverMax
// discovered hosts are left. a is v's authority over the hosts before; it
// returns the authority over the hosts after.
func (tr *tracker) discover(v View, a Authority) Authority {
	opts := &tr.t.opts
	if opts.Discover == nil {
		return a
	}
	changed := false
	live := 0
	for i := tr.initial; i < len(tr.hosts); i++ {
		th := &tr.hosts[i]
		if th.state.Removed {
			continue
		}
		if a.Member[i] >= 0 {
			live++
			continue
		}
		close(th.prober.stop)
		// It matches no member any more.
		*th = tracked{state: HostState{Name: th.state.Name, Addr: th.state.Addr, Discovered: true, Removed: true, NoReads: true}, prober: th.prober}
		if th.prober != nil && th.prober.host.OnRemove != nil {
			th.prober.host.OnRemove()
		}
		tr.emit(Event{Kind: EventHostRemoved, Host: th.state.Name})
		changed = true
	}
	left := 0
	for _, m := range v.Members {
		if m.Host == "" || m.Port == 0 || slices.ContainsFunc(tr.hosts, func(h tracked) bool { return m.matches(h.endpoint.Host, h.endpoint.Port) }) {
			// Known already (a member listed twice is added once).
			continue
		}
		if live >= opts.DiscoverMax {
			left++
			continue
		}
		i := len(tr.hosts)
		h, ok := opts.Discover(i, m)
		if !ok || h.Config == nil {
			continue
		}
		// Untrusted until its probes show it is of this system; a
		// refused one for ever, and never probed.
		tr.hosts = append(tr.hosts, tracked{state: HostState{Name: h.Name, Addr: h.Addr, Discovered: true, NoReads: true, Untrusted: untrustedUnprobed}, refused: h.Refused})
		tr.startProber(i, probeHost(h, opts.Timeout))
		tr.emit(Event{Kind: EventHostAdded, Host: h.Name})
		changed = true
		live++
	}
	if left > 0 && !tr.limitSaid {
		tr.limitSaid = true
		if opts.OnDiscoverLimit != nil {
			opts.OnDiscoverLimit(left)
		}
	}
	if changed {
		a = Authorize(v, tr.endpoints())
	}
	return a
}

// endpointOf is where h listens, as members are matched to it.
func endpointOf(h Host) Endpoint {
	return Endpoint{Host: h.Config.Host, Port: h.Config.Port}
}

func (tr *tracker) run() {
	defer tr.leaseEnd.Stop()
	for {
		select {
		case r := <-tr.t.results:
			tr.apply(r)
		case v := <-tr.t.views:
			tr.applyView(v)
		case <-tr.leaseEnd.C:
			// The lease ran out with no new confirmation: the snapshot
			// says so at once.
			tr.evaluate(false, nil)
		case <-tr.t.done:
			return
		}
	}
}

const ewmaWeight = 0.2

func (tr *tracker) apply(r result) {
	th := &tr.hosts[r.i]
	h := &th.state
	if h.Removed {
		// Sent before its prober stopped.
		return
	}
	wasHealthy, known := h.Healthy, !h.LastProbe.IsZero()
	h.LastProbe = r.sentAt
	if r.err != nil {
		h.Healthy = false
		h.Failures++
		h.LastError = r.err.Error()
		if wasHealthy || !known {
			tr.emit(Event{Kind: EventHostDown, Host: h.Name, Err: h.LastError})
		}
	} else {
		h.Healthy = true
		h.Failures = 0
		h.LastError = ""
		h.LastSuccess = r.sentAt
		if h.RTT == 0 {
			h.RTT = r.rtt
		} else {
			h.RTT = time.Duration(ewmaWeight*float64(r.rtt) + (1-ewmaWeight)*float64(h.RTT))
		}
		if !r.inRecovery && h.Role == RoleStandby && h.Timeline != 0 && r.timeline > h.Timeline && h.ReplayLSN != 0 {
			// Promoted: everything it had replayed of its old timeline
			// is in the new one's history.
			h.SwitchFloor = lagmeter.TimelineSwitch{Timeline: h.Timeline, LSN: h.ReplayLSN}
		}
		h.Timeline = r.timeline
		h.Switches = r.switches
		h.Conn = r.conn
		h.Pooler, h.BackendSwitched = r.pooler, r.switched
		h.Missing = r.missing
		tr.reportMissing(h.Name, r.missing)
		if r.i >= tr.initial {
			// Shown once trusted (see trust).
			th.systemID = r.systemID
		} else if r.systemID != 0 {
			h.SystemID = r.systemID
		}
		if !r.layout.IsZero() {
			h.Layout = r.layout
		}
		if r.inRecovery {
			h.Role = RoleStandby
			h.InsertLSN, h.SnapshotXmax = 0, 0
			h.ReplayLSN, h.ReceiveLSN, h.SnapshotXmin = r.replay, r.receive, r.xid
			th.claim, th.sync = nil, nil
		} else {
			h.Role = RolePrimary
			h.InsertLSN, h.SnapshotXmax = r.insert, r.xid
			h.ReplayLSN, h.ReceiveLSN, h.SnapshotXmin = 0, 0, 0
			th.claim, th.sync = &claim{index: r.i, timeline: r.timeline, sentAt: r.sentAt}, r.sync
		}
		if !wasHealthy {
			tr.emit(Event{Kind: EventHostUp, Host: h.Name})
		}
	}
	if p := tr.hosts[r.i].prober; p != nil && p.host.OnProbe != nil {
		p.host.OnProbe(r.err)
	}
	tr.evaluate(r.err == nil && !r.inRecovery, &r)
}

// applyView takes in one answer of the provider: on success its authority
// replaces the last one and its lease is refreshed; on failure the last
// view stays, its lease running out.
func (tr *tracker) applyView(v viewResult) {
	if v.err != nil {
		tr.prov.LastError = v.err.Error()
		tr.evaluate(false, nil)
		return
	}
	v.view, tr.prov.BadMember = checkMembers(v.view)
	a := tr.discover(v.view, Authorize(v.view, tr.endpoints()))
	tr.auth, tr.viewAt = &a, v.sentAt
	tr.prov.LastError = ""
	tr.prov.Endpoint = v.view.Endpoint
	tr.prov.Confirmed = v.sentAt
	tr.prov.Conflict, tr.prov.Unknown = a.Conflict, a.Unknown
	tr.prov.Leader, tr.prov.LeaderTimeline = "", a.LeaderTimeline
	if a.Leader >= 0 {
		tr.prov.Leader = tr.hosts[a.Leader].state.Name
	}
	for i := range tr.hosts {
		h := &tr.hosts[i].state
		h.Member, h.MemberRole, h.MemberState, h.NoLoadBalance = "", "", "", false
		if k := a.Member[i]; k >= 0 {
			m := v.view.Members[k]
			h.Member, h.MemberRole, h.MemberState, h.NoLoadBalance = m.Name, m.Role, m.State, m.NoLoadBalance
		}
		h.NoReads = !a.Readable[i]
		tr.hosts[i].readable = a.Readable[i]
		if h.Removed {
			h.Member, h.MemberRole, h.MemberState = "", "", ""
		}
	}
	if a.Conflict {
		tr.conflicts++
	}
	tr.evaluate(false, nil)
}

// evaluate decides the primary and publishes a snapshot. observed is true
// when called for a probe that saw a host out of recovery.
func (tr *tracker) evaluate(observed bool, r *result) {
	now := time.Now()
	tr.trust()
	claims := make([]claim, 0, 2)
	for i := range tr.hosts {
		// An untrusted host's claim gives nothing (see trust).
		if c := tr.hosts[i].claim; c != nil && tr.hosts[i].state.Untrusted == "" {
			claims = append(claims, *c)
		}
	}
	var d decision
	if tr.t.opts.Provider != nil {
		// Conflicts are counted per view, in applyView.
		d = decideProvider(claims, tr.auth, tr.viewAt, now, tr.t.opts.Lease)
	} else {
		d = decide(claims, now, tr.t.opts.Lease)
		if d.conflict && observed {
			tr.conflicts++
		}
	}
	if d.conflict && !tr.conflict {
		tr.emit(Event{Kind: EventConflict, Epoch: tr.epoch})
	}
	tr.conflict = d.conflict
	switch {
	case d.primary >= 0 && d.primary != tr.primary:
		prev := ""
		if tr.lastPrimary >= 0 {
			prev = tr.hosts[tr.lastPrimary].state.Name
		}
		if d.primary != tr.lastPrimary {
			tr.epoch++
		}
		tr.lastPrimary = d.primary
		tr.emit(Event{Kind: EventPrimaryChanged, Host: tr.hosts[d.primary].state.Name, Previous: prev, Epoch: tr.epoch})
	case d.primary < 0 && tr.primary >= 0:
		tr.emit(Event{Kind: EventPrimaryLost, Previous: tr.hosts[tr.primary].state.Name, Epoch: tr.epoch})
	}
	tr.primary, tr.confirmed = d.primary, d.confirmed
	tr.record(r)
	tr.publish(now)
	tr.armLease(now)
}

// armLease sets the lease timer to the end of the published primary's
// lease, or stops it when there is none: the snapshot that ends a lease is
// published when it ends, not at the next probe.
func (tr *tracker) armLease(now time.Time) {
	tr.leaseEnd.Stop()
	if tr.primary < 0 || tr.confirmed.IsZero() {
		return
	}
	if left := tr.confirmed.Add(tr.t.opts.Lease).Sub(now); left >= 0 {
		// Past the instant LeaseValid turns false (it is strict).
		tr.leaseEnd.Reset(left + time.Millisecond)
	}
}

func (tr *tracker) publish(now time.Time) {
	hosts := make([]HostState, len(tr.hosts))
	for i := range tr.hosts {
		hosts[i] = tr.hosts[i].state
	}
	s := &Snapshot{
		Hosts:     hosts,
		Primary:   tr.primary,
		Epoch:     tr.epoch,
		Confirmed: tr.confirmed,
		Lease:     tr.t.opts.Lease,
		Conflicts: tr.conflicts,
		Conflict:  tr.conflict,
		Taken:     now,
	}
	if tr.t.opts.Provider != nil {
		p := tr.prov
		s.Provider = &p
	}
	for i := range s.Hosts {
		s.Hosts[i].SyncState = ""
	}
	if tr.primary >= 0 {
		s.SyncStandbys = tr.hosts[tr.primary].sync
		for i := range s.Hosts {
			for _, st := range s.SyncStandbys {
				if st.ApplicationName == s.Hosts[i].Name && s.Hosts[i].Role == RoleStandby {
					s.Hosts[i].SyncState = st.SyncState
				}
			}
		}
	}
	tr.t.publish(s)
}

// record appends the primary's probe to the WAL position history, first
// resetting the history when the primary's WAL history changed: another
// host, timeline or system.
func (tr *tracker) record(r *result) {
	if r == nil || r.err != nil || r.inRecovery || r.i != tr.primary || r.insert == 0 {
		return
	}
	h := &tr.hosts[r.i].state
	o := lagmeter.Origin{SystemID: h.SystemID, Timeline: h.Timeline, Layout: h.Layout}
	hist := tr.t.history
	if tr.histHost != r.i || hist.Origin() != o {
		if err := hist.Reset(o); err != nil {
			return
		}
		tr.histHost = r.i
	}
	s := lagmeter.Sample{Sent: r.sentAt, LSN: r.insert, Xmax: r.xid}
	if err := hist.Append(s); err != nil {
		// Out of order or backwards: start again from this sample.
		if hist.Reset(o) == nil {
			_ = hist.Append(s)
		}
	}
}

// Why a discovered host is not trusted yet (HostState.Untrusted), besides
// a refusal.
const (
	untrustedUnprobed = "not probed yet"
	untrustedNoID     = "its system identifier could not be read (pg_control_system())"
	untrustedLead     = "out of recovery before it was seen replicating this system: it cannot be the primary"
)

// trust decides, for each discovered host, whether it is trusted, from
// what its own probes and the configured hosts' probes read, and sets what
// follows in its state: Untrusted, NoReads, the SystemID shown. A
// discovered host is trusted once its probe read the system identifier of
// the configured hosts and saw it in recovery (a replica of this system)
// before it was ever seen out of recovery: until then it serves nothing
// and cannot be the primary, whatever the provider says of it. A host
// that came Refused is never trusted. It says each refusal once
// (Host.OnRefuse).
func (tr *tracker) trust() {
	want, why := tr.system()
	for i := tr.initial; i < len(tr.hosts); i++ {
		th := &tr.hosts[i]
		h := &th.state
		if h.Removed {
			continue
		}
		reason, kind := "", refusal(0)
		switch {
		case th.refused != "":
			reason, kind = th.refused, refusedHost
		case h.LastSuccess.IsZero():
			reason = untrustedUnprobed
		case th.systemID == 0:
			reason = untrustedNoID
		case want == 0:
			reason = why
		case th.systemID != want:
			th.seenStandby = false
			reason, kind = fmt.Sprintf("system identifier %d is not the configured hosts' (%d): refused", th.systemID, want), refusedSystem
		default:
			th.seenStandby = th.seenStandby || h.Role == RoleStandby
			if !th.seenStandby {
				reason, kind = untrustedLead, refusedLead
			}
		}
		h.Untrusted = reason
		h.NoReads = !th.readable || reason != ""
		h.SystemID = 0
		if reason == "" {
			h.SystemID = th.systemID
		}
		if kind != 0 && th.said&kind == 0 {
			th.said |= kind
			if p := th.prober; p != nil && p.host.OnRefuse != nil {
				p.host.OnRefuse(reason)
			}
		}
	}
}

// system returns the system identifier the configured hosts' probes read,
// or 0 and why there is none: none read yet, or two different ones.
func (tr *tracker) system() (uint64, string) {
	var id uint64
	for i := 0; i < tr.initial; i++ {
		switch s := tr.hosts[i].state.SystemID; {
		case s == 0:
		case id == 0:
			id = s
		case s != id:
			return 0, "the configured hosts show different system identifiers"
		}
	}
	if id == 0 {
		return 0, "the configured hosts' system identifier is not known yet"
	}
	return id, ""
}
