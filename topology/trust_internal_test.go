package topology

import (
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/lagmeter"
)

// trustTracker is a tracker of two configured hosts of system 100 and one
// discovered host, with a provider view that names the discovered host
// leader, and the refusals the discovered host's OnRefuse was told.
func trustTracker(t *testing.T) (*tracker, *[]string) {
	t.Helper()
	top := &Topology{
		opts:    Options{Lease: 10 * time.Second, Provider: NewManual()},
		subs:    map[*subscription]struct{}{},
		history: lagmeter.NewHistory(8),
	}
	first := &Snapshot{Hosts: make([]HostState, 3), Primary: -1}
	tr := newTracker(top, first)
	tr.leaseEnd.Stop()
	t.Cleanup(func() { tr.leaseEnd.Stop() })
	tr.initial = 2
	now := time.Now()
	for i := range 2 {
		tr.hosts[i].state = HostState{Name: "cfg", Healthy: true, LastSuccess: now, SystemID: 100, Role: RoleStandby}
	}
	said := &[]string{}
	tr.hosts[2] = tracked{
		state:    HostState{Name: "found", Discovered: true, Untrusted: untrustedUnprobed, NoReads: true},
		readable: true,
		prober:   &prober{host: Host{OnRefuse: func(r string) { *said = append(*said, r) }}},
	}
	// The provider names the discovered host leader, and only it.
	tr.auth, tr.viewAt = &Authority{Leader: 2, Member: []int{0, 1, 2}, Readable: []bool{true, true, true}}, now
	return tr, said
}

// probed records a successful probe of host i: its role and system.
func probed(tr *tracker, i int, role Role, system uint64) {
	th := &tr.hosts[i]
	now := time.Now()
	th.state.Healthy, th.state.LastSuccess, th.state.Role = true, now, role
	th.systemID = system
	th.claim = nil
	if role == RolePrimary {
		th.claim = &claim{index: i, timeline: 1, sentAt: now}
	}
}

func TestTrustDiscovered(t *testing.T) {
	steps := []struct {
		name    string
		role    Role
		system  uint64
		reason  string // a part of Untrusted, "" for trusted
		primary int
	}{
		{"not probed", RoleUnknown, 0, untrustedUnprobed, -1},
		{"another system, out of recovery", RolePrimary, 200, "system identifier 200 is not the configured hosts' (100)", -1},
		{"another system, in recovery", RoleStandby, 200, "system identifier 200", -1},
		{"its system read nowhere", RoleStandby, 0, untrustedNoID, -1},
		{"this system, out of recovery first", RolePrimary, 100, untrustedLead, -1},
		{"this system, in recovery", RoleStandby, 100, "", -1},
		{"then promoted: it may lead", RolePrimary, 100, "", 2},
		{"then another system again", RolePrimary, 200, "system identifier 200", -1},
		{"and back: out of recovery first again", RolePrimary, 100, untrustedLead, -1},
	}
	tr, said := trustTracker(t)
	for k, s := range steps {
		if k > 0 {
			probed(tr, 2, s.role, s.system)
		}
		tr.evaluate(false, nil)
		h := tr.hosts[2].state
		if s.reason == "" && h.Untrusted != "" || s.reason != "" && !strings.Contains(h.Untrusted, s.reason) {
			t.Fatalf("%s: Untrusted %q, want %q", s.name, h.Untrusted, s.reason)
		}
		if h.NoReads != (s.reason != "") {
			t.Errorf("%s: NoReads %v, want %v", s.name, h.NoReads, s.reason != "")
		}
		if want := map[bool]uint64{true: s.system, false: 0}[s.reason == ""]; h.SystemID != want {
			t.Errorf("%s: SystemID shown %d, want %d", s.name, h.SystemID, want)
		}
		if tr.primary != s.primary {
			t.Errorf("%s: primary %d, want %d", s.name, tr.primary, s.primary)
		}
		if ep := tr.endpoints()[2]; ep.Untrusted != (s.reason != "") {
			t.Errorf("%s: endpoint Untrusted %v", s.name, ep.Untrusted)
		}
	}
	// Each kind of refusal said once, whatever the number of evaluations.
	if len(*said) != 2 || !strings.Contains((*said)[0], "system identifier 200") || (*said)[1] != untrustedLead {
		t.Errorf("refusals said %q, want the other system's once, then the lead's once", *said)
	}
}

func TestTrustNeedsTheConfiguredSystem(t *testing.T) {
	tr, said := trustTracker(t)
	probed(tr, 2, RoleStandby, 100)
	// The configured hosts disagree: nobody is trusted.
	tr.hosts[1].state.SystemID = 300
	tr.evaluate(false, nil)
	if u := tr.hosts[2].state.Untrusted; !strings.Contains(u, "different system identifiers") {
		t.Fatalf("Untrusted %q with configured hosts of two systems", u)
	}
	// None known yet.
	tr.hosts[0].state.SystemID, tr.hosts[1].state.SystemID = 0, 0
	tr.evaluate(false, nil)
	if u := tr.hosts[2].state.Untrusted; !strings.Contains(u, "not known yet") {
		t.Fatalf("Untrusted %q with no configured system known", u)
	}
	tr.hosts[0].state.SystemID = 100
	tr.evaluate(false, nil)
	if u := tr.hosts[2].state.Untrusted; u != "" || tr.hosts[2].state.NoReads {
		t.Fatalf("Untrusted %q NoReads %v once the configured system is known", u, tr.hosts[2].state.NoReads)
	}
	// The provider does not let it serve reads: trust does not change that.
	tr.hosts[2].readable = false
	tr.evaluate(false, nil)
	if !tr.hosts[2].state.NoReads {
		t.Fatal("a trusted host the provider keeps from reads serves them")
	}
	if len(*said) != 0 {
		t.Fatalf("said %q, want nothing (nothing was refused)", *said)
	}
}
