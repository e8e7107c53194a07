package topology

import (
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	now := time.Now()
	lease := 10 * time.Second
	fresh, stale := now.Add(-time.Second), now.Add(-lease)
	tests := []struct {
		name     string
		claims   []claim
		primary  int
		conflict bool
	}{
		{"none", nil, -1, false},
		{"one", []claim{{index: 2, timeline: 1, sentAt: fresh}}, 2, false},
		{"one with unknown timeline", []claim{{index: 0, timeline: 0, sentAt: fresh}}, 0, false},
		{"one stale", []claim{{index: 2, timeline: 1, sentAt: stale}}, -1, false},
		{"higher timeline wins", []claim{{index: 0, timeline: 1, sentAt: fresh}, {index: 1, timeline: 2, sentAt: fresh}}, 1, false},
		{"higher timeline wins, any order", []claim{{index: 1, timeline: 3, sentAt: fresh}, {index: 0, timeline: 2, sentAt: fresh}}, 1, false},
		{"tie fails closed", []claim{{index: 0, timeline: 2, sentAt: fresh}, {index: 1, timeline: 2, sentAt: fresh}}, -1, true},
		{"tie at the top of three", []claim{{index: 0, timeline: 1, sentAt: fresh}, {index: 1, timeline: 3, sentAt: fresh}, {index: 2, timeline: 3, sentAt: fresh}}, -1, true},
		{"unknown timeline fails closed", []claim{{index: 0, timeline: 0, sentAt: fresh}, {index: 1, timeline: 2, sentAt: fresh}}, -1, true},
		{"unknown timeline after the highest", []claim{{index: 0, timeline: 5, sentAt: fresh}, {index: 1, timeline: 0, sentAt: fresh}}, -1, true},
		{"stale claim ignored", []claim{{index: 0, timeline: 2, sentAt: stale}, {index: 1, timeline: 2, sentAt: fresh}}, 1, false},
		{"stale higher timeline ignored", []claim{{index: 0, timeline: 9, sentAt: stale}, {index: 1, timeline: 2, sentAt: fresh}}, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := decide(tt.claims, now, lease)
			if d.primary != tt.primary || d.conflict != tt.conflict {
				t.Fatalf("decide = primary %d conflict %v, want %d %v", d.primary, d.conflict, tt.primary, tt.conflict)
			}
			if d.primary >= 0 {
				for _, c := range tt.claims {
					if c.index == d.primary && !d.confirmed.Equal(c.sentAt) {
						t.Fatalf("confirmed = %v, want the claim's send time %v", d.confirmed, c.sentAt)
					}
				}
			}
		})
	}
}

func TestSnapshotLease(t *testing.T) {
	now := time.Now()
	s := &Snapshot{Hosts: []HostState{{Name: "a"}, {Name: "b"}}, Primary: 1, Confirmed: now.Add(-3 * time.Second), Lease: 5 * time.Second}
	if h, ok := s.PrimaryHost(now); !ok || h.Name != "b" {
		t.Fatalf("PrimaryHost = %v, %v", h, ok)
	}
	if r := s.LeaseRemaining(now); r != 2*time.Second {
		t.Fatalf("LeaseRemaining = %v", r)
	}
	if _, ok := s.PrimaryHost(now.Add(2 * time.Second)); ok {
		t.Fatal("primary still authoritative when the lease ran out")
	}
	if r := s.LeaseRemaining(now.Add(3 * time.Second)); r != 0 {
		t.Fatalf("LeaseRemaining after expiry = %v", r)
	}
	s.Primary = -1
	if _, ok := s.PrimaryHost(now); ok {
		t.Fatal("no primary, but PrimaryHost answered")
	}
	if s.Index("b") != 1 || s.Index("zz") != -1 {
		t.Fatal("Index")
	}
}
