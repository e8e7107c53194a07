package topology

import (
	"slices"
	"time"

	"github.com/pgrouted/pgrouted/lagmeter"
)

// tracker is the single owner of the cluster's state: it applies probe
// results, decides the primary and publishes snapshots and events.
type tracker struct {
	t      *Topology
	hosts  []HostState
	claims []*claim // per host: its latest claim to be primary, or nil

	histHost    int    // the host the history's samples come from
	primary     int    // of the last published snapshot
	lastPrimary int    // last primary that was not "none", for the epoch
	epoch       uint64 // increments when the primary becomes another host
	confirmed   time.Time
	conflicts   uint64
	conflict    bool
	sync        [][]SyncStandby // per host, from its last probe as primary
}

func newTracker(t *Topology, first *Snapshot) *tracker {
	return &tracker{
		t:           t,
		hosts:       slices.Clone(first.Hosts),
		claims:      make([]*claim, len(first.Hosts)),
		sync:        make([][]SyncStandby, len(first.Hosts)),
		primary:     -1,
		lastPrimary: -1,
		histHost:    -1,
	}
}

func (tr *tracker) run() {
	// Leases expire with no probe result arriving: re-evaluate regularly.
	tick := time.NewTicker(max(tr.t.opts.Interval/2, 50*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case r := <-tr.t.results:
			tr.apply(r)
		case <-tick.C:
			tr.evaluate(false, nil)
		case <-tr.t.done:
			return
		}
	}
}

const ewmaWeight = 0.2

func (tr *tracker) apply(r result) {
	h := &tr.hosts[r.i]
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
		if r.systemID != 0 {
			h.SystemID = r.systemID
		}
		if !r.layout.IsZero() {
			h.Layout = r.layout
		}
		if r.inRecovery {
			h.Role = RoleStandby
			h.InsertLSN = 0
			h.ReplayLSN, h.ReceiveLSN = r.replay, r.receive
			tr.claims[r.i] = nil
			tr.sync[r.i] = nil
		} else {
			h.Role = RolePrimary
			h.InsertLSN = r.insert
			h.ReplayLSN, h.ReceiveLSN = 0, 0
			tr.claims[r.i] = &claim{index: r.i, timeline: r.timeline, sentAt: r.sentAt}
			tr.sync[r.i] = r.sync
		}
		if !wasHealthy {
			tr.emit(Event{Kind: EventHostUp, Host: h.Name})
		}
	}
	if tr.t.opts.OnProbe != nil {
		tr.t.opts.OnProbe(r.i, r.err)
	}
	tr.evaluate(r.err == nil && !r.inRecovery, &r)
}

// evaluate decides the primary and publishes a snapshot. observed is true
// when called for a probe that saw a host out of recovery.
func (tr *tracker) evaluate(observed bool, r *result) {
	now := time.Now()
	claims := make([]claim, 0, 2)
	for _, c := range tr.claims {
		if c != nil {
			claims = append(claims, *c)
		}
	}
	d := decide(claims, now, tr.t.opts.Lease)
	if d.conflict && observed {
		tr.conflicts++
	}
	if d.conflict && !tr.conflict {
		tr.emit(Event{Kind: EventConflict, Epoch: tr.epoch})
	}
	tr.conflict = d.conflict
	switch {
	case d.primary >= 0 && d.primary != tr.primary:
		prev := ""
		if tr.lastPrimary >= 0 {
			prev = tr.hosts[tr.lastPrimary].Name
		}
		if d.primary != tr.lastPrimary {
			tr.epoch++
		}
		tr.lastPrimary = d.primary
		tr.emit(Event{Kind: EventPrimaryChanged, Host: tr.hosts[d.primary].Name, Previous: prev, Epoch: tr.epoch})
	case d.primary < 0 && tr.primary >= 0:
		tr.emit(Event{Kind: EventPrimaryLost, Previous: tr.hosts[tr.primary].Name, Epoch: tr.epoch})
	}
	tr.primary, tr.confirmed = d.primary, d.confirmed
	tr.record(r)
	tr.publish(now)
}

func (tr *tracker) publish(now time.Time) {
	s := &Snapshot{
		Hosts:     slices.Clone(tr.hosts),
		Primary:   tr.primary,
		Epoch:     tr.epoch,
		Confirmed: tr.confirmed,
		Lease:     tr.t.opts.Lease,
		Conflicts: tr.conflicts,
		Conflict:  tr.conflict,
		Taken:     now,
	}
	for i := range s.Hosts {
		s.Hosts[i].SyncState = ""
	}
	if tr.primary >= 0 {
		s.SyncStandbys = tr.sync[tr.primary]
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
	h := &tr.hosts[r.i]
	o := lagmeter.Origin{SystemID: h.SystemID, Timeline: h.Timeline, Layout: h.Layout}
	hist := tr.t.history
	if tr.histHost != r.i || hist.Origin() != o {
		if err := hist.Reset(o); err != nil {
			return
		}
		tr.histHost = r.i
	}
	if err := hist.Append(lagmeter.Sample{Sent: r.sentAt, LSN: r.insert}); err != nil {
		// Out of order or backwards: start again from this sample.
		if hist.Reset(o) == nil {
			_ = hist.Append(lagmeter.Sample{Sent: r.sentAt, LSN: r.insert})
		}
	}
}
