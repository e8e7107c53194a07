package pgrouted

import (
	"sync/atomic"

	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/lagmeter"
	"github.com/pgrouted/pgrouted/topology"
)

// A view is one topology snapshot joined with the Connector's hosts: each
// host beside what the probes last saw of it. The routing code reads hosts
// through a view and gets a host and its probe state together; this file
// is the only place that pairs them, once per snapshot.
//
// A snapshot's hosts are in the order of the Connector's host table (the
// DSN's, then the discovered ones), which only grows and appends a host
// before any snapshot names it (see hostTable): so every host a snapshot
// names is in the table when its view is built.
type view struct {
	snap    *topology.Snapshot
	hosts   []hostView // in snapshot order
	primary *hostView  // the snapshot's primary, nil when none

	// walEnd is the end of the WAL the primary had written at its last
	// probe: its insert position through its WAL layout
	// (lagmeter.WALLayout.RecordEnd), which a caught-up standby's replay
	// position equals; 0 when no primary is known. Byte lag is measured
	// against it (hostView.byteLag), and a write acknowledged before that
	// probe was sent is at or before it.
	walEnd lagmeter.LSN

	// pst is what read-your-writes needs of the primary's last probe
	// (primaryState).
	pst consistency.Primary
}

// hostView is a host and its state in one snapshot.
type hostView struct {
	*host
	probe *topology.HostState
	v     *view
	// reads: a standby the snapshot lets serve reads (servesReads),
	// worked out once per view.
	reads bool
}

// replay is what is known of the standby's replay position (host.replay).
func (h *hostView) replay() lagmeter.LSN { return h.host.replay(h.probe) }

// position is the standby's position: its system and timeline as its last
// probe read them, and what is known of its replay position (replay).
func (h *hostView) position() lagmeter.Position { return h.positionAt(h.replay()) }

// positionAt is the standby's position had it replayed up to replay: the
// one place a standby's position is built.
func (h *hostView) positionAt(replay lagmeter.LSN) lagmeter.Position {
	return lagmeter.Position{SystemID: h.probe.SystemID, Timeline: h.probe.Timeline, Replay: replay}
}

// watermark is lsn on h's history: its system and timeline as its last
// probe read them; zero when either is unknown.
func (h *hostView) watermark(lsn lagmeter.LSN) lagmeter.Watermark {
	if p := h.probe; p.SystemID != 0 && p.Timeline != 0 {
		return lagmeter.Watermark{SystemID: p.SystemID, Timeline: p.Timeline, LSN: lsn}
	}
	return lagmeter.Watermark{}
}

// insertWatermark is the watermark of insert, a WAL insert position read
// on h, a primary: the end of the last record inserted before it
// (lagmeter.WALLayout.RecordEnd). It is the one way a position read on the
// primary becomes a watermark: after a write (raise), in a fetch of the
// read index (fetchPosition), after a causal read (sawBy.record).
func (h *hostView) insertWatermark(insert lagmeter.LSN) lagmeter.Watermark {
	return h.watermark(h.probe.Layout.RecordEnd(insert))
}

// byteLag is how many WAL bytes the standby lacks of the primary's WAL at
// its last probe (view.walEnd), and false when either is unknown. It is the
// one reading of byte lag: Config.Select's candidates and Topology report
// it.
func (h *hostView) byteLag() (uint64, bool) {
	return lagmeter.ByteLag(h.v.walEnd, h.replay())
}

// views caches the view of the newest snapshot.
type views struct {
	p atomic.Pointer[view]
}

// view returns the view of the topology's current snapshot, building it
// once per snapshot: the routing hot path allocates nothing while the
// snapshot stays.
func (hs *hostSet) view() *view {
	s := hs.top.Snapshot()
	if v := hs.views.p.Load(); v != nil && v.snap == s {
		return v
	}
	v := newView(s, hs.hosts.all())
	hs.views.p.Store(v)
	return v
}

// newView joins s with hosts (the host table when s was taken or later).
func newView(s *topology.Snapshot, hosts []*host) *view {
	v := &view{snap: s, hosts: make([]hostView, len(s.Hosts))}
	for i := range s.Hosts {
		v.hosts[i] = hostView{host: hosts[i], probe: &s.Hosts[i], v: v}
		if s.Hosts[i].Role == topology.RoleStandby {
			hosts[i].pace.observe(&s.Hosts[i])
		}
	}
	if s.Primary >= 0 {
		v.primary = &v.hosts[s.Primary]
		v.walEnd = v.primary.probe.Layout.RecordEnd(v.primary.probe.InsertLSN)
		v.setPrimaryState()
	}
	for i := range v.hosts {
		v.hosts[i].reads = v.hosts[i].standbyForReads()
	}
	return v
}

// setPrimaryState sets v.pst from v's primary's probe and v.walEnd.
func (v *view) setPrimaryState() {
	p := v.primary.probe
	v.pst = consistency.Primary{
		SystemID: p.SystemID, Timeline: p.Timeline, End: v.walEnd,
		Probed: p.InsertLSN != 0, ProbedAt: p.LastSuccess,
		Switches: p.Switches, SwitchFloor: p.SwitchFloor,
	}
}

// primaryState is what v's primary's last probe showed, as
// read-your-writes needs it; nil when v has no primary.
func (v *view) primaryState() *consistency.Primary {
	if v.primary == nil {
		return nil
	}
	return &v.pst
}

// switchPoint is where the current primary's timeline history left
// timeline tli, or 0 when it is not known: a replica on a newer timeline
// than a watermark is then not known to hold it (see
// lagmeter.Watermark.ReachedBy). Once a primary on the newer timeline is
// known, a read's Settle has moved the watermark to its timeline already.
func (v *view) switchPoint(tli uint32) lagmeter.LSN {
	if v.primary == nil {
		return 0
	}
	sp, _ := lagmeter.SwitchPoint(v.primary.probe.Switches, tli)
	return sp
}

// systemID is the system identifier the probes read, or 0.
func (v *view) systemID() uint64 {
	if v.primary != nil && v.primary.probe.SystemID != 0 {
		return v.primary.probe.SystemID
	}
	for i := range v.hosts {
		if id := v.hosts[i].probe.SystemID; id != 0 {
			return id
		}
	}
	return 0
}

// of returns h in v, nil when v's snapshot does not name it (a host
// discovered after it was taken).
func (v *view) of(h *host) *hostView {
	if h.idx >= len(v.hosts) {
		return nil
	}
	return &v.hosts[h.idx]
}

// isPrimary reports whether h is v's primary.
func (v *view) isPrimary(h *host) bool {
	return v.primary != nil && v.primary.host == h
}
