//go:build unix

package topology_test

import (
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/topology"
)

// TestDiscoverMax: a /cluster answer naming many members the hosts do not
// match adds DiscoverMax of them, and says once that it left the rest out.
func TestDiscoverMax(t *testing.T) {
	f := newFakePatroni(t)
	ms := []map[string]any{member(t, 0, "leader", "running", nil), member(t, 1, "replica", "streaming", nil)}
	const listed, limit = 50, 3
	for k := range listed {
		// Members at addresses where nothing listens: each a host to
		// probe, were it added.
		ms = append(ms, map[string]any{"name": "ghost" + strconv.Itoa(k), "role": "replica", "state": "streaming",
			"host": "127.0.0.1", "port": 1 + k, "lag": 0})
	}
	f.set(0, ms...)
	p, err := topology.NewPatroni([]string{f.URL}, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var asked, lefts []int
	discover := func(i int, m topology.Member) (topology.Host, bool) {
		mu.Lock()
		asked = append(asked, i)
		mu.Unlock()
		h := hosts(t, "", 2)[0]
		h.Name, h.Addr = m.Name, net.JoinHostPort(m.Host, strconv.Itoa(int(m.Port)))
		h.Config.Host, h.Config.Port = m.Host, m.Port
		return h, true
	}
	top := start(t, hosts(t, "", 0, 1), topology.Options{Interval: 20 * time.Millisecond, Provider: p, Discover: discover,
		DiscoverMax: limit, OnDiscoverLimit: func(left int) { mu.Lock(); lefts = append(lefts, left); mu.Unlock() }})
	first := waitSnap(t, top, 20*time.Second, "a view applied", func(s *topology.Snapshot) bool { return s.Provider.Confirmed.After(time.Time{}) })
	waitSnap(t, top, 20*time.Second, "more views", func(s *topology.Snapshot) bool {
		return s.Provider.Confirmed.After(first.Provider.Confirmed.Add(100 * time.Millisecond))
	})
	s := top.Snapshot()
	if len(s.Hosts) != 2+limit {
		t.Fatalf("%d hosts, want the 2 configured and %d discovered", len(s.Hosts), limit)
	}
	for _, h := range s.Hosts[2:] {
		if !h.Discovered || !h.NoReads || h.Untrusted == "" {
			t.Errorf("discovered host %+v: want untrusted, no reads (nothing listens there)", h)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != limit {
		t.Errorf("Discover asked for hosts %v, want %d", asked, limit)
	}
	if len(lefts) != 1 || lefts[0] != listed-limit {
		t.Errorf("OnDiscoverLimit calls %v, want one with %d", lefts, listed-limit)
	}
}

// TestDiscoverRefused: a host Discover returns Refused is added and shown
// untrusted for that reason, and nothing ever connects to it (a listener
// at its address counts the connections); its refusal is said once, and
// it is removed like any discovered host when it leaves the view.
func TestDiscoverRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	accepted := 0
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted++
			mu.Unlock()
			c.Close()
		}
	}()
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	p, _ := strconv.Atoi(port)
	f := newFakePatroni(t)
	base := []map[string]any{member(t, 0, "leader", "running", nil), member(t, 1, "replica", "streaming", nil)}
	refusedMember := map[string]any{"name": "refused", "role": "replica", "state": "streaming", "host": host, "port": p, "lag": 0}
	f.set(0, append(base, refusedMember)...)
	prov, err := topology.NewPatroni([]string{f.URL}, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	const why = "set sslmode=verify-full or channel_binding=require"
	var said []string
	removed := 0
	discover := func(i int, m topology.Member) (topology.Host, bool) {
		h := hosts(t, "", 2)[0]
		h.Name, h.Addr = m.Name, net.JoinHostPort(m.Host, strconv.Itoa(int(m.Port)))
		h.Config.Host, h.Config.Port = m.Host, m.Port
		h.Refused = why
		h.OnRefuse = func(r string) { mu.Lock(); said = append(said, r); mu.Unlock() }
		h.OnRemove = func() { mu.Lock(); removed++; mu.Unlock() }
		return h, true
	}
	top := start(t, hosts(t, "", 0, 1), topology.Options{Interval: 20 * time.Millisecond, Provider: prov, Discover: discover})
	first := waitSnap(t, top, 20*time.Second, "the refused member added", func(s *topology.Snapshot) bool { return len(s.Hosts) == 3 })
	waitSnap(t, top, 20*time.Second, "more views and probes", func(s *topology.Snapshot) bool {
		return s.Provider.Confirmed.After(first.Provider.Confirmed.Add(200*time.Millisecond)) && s.Hosts[1].Role == topology.RoleStandby
	})
	h := top.Snapshot().Hosts[2]
	if !h.Discovered || !h.NoReads || h.Untrusted != why || h.Healthy || !h.LastProbe.IsZero() || h.SystemID != 0 {
		t.Fatalf("refused host %+v: want discovered, untrusted %q, no reads, never probed", h, why)
	}
	mu.Lock()
	n, s := accepted, append([]string(nil), said...)
	mu.Unlock()
	if n != 0 {
		t.Fatalf("%d connections reached the refused host", n)
	}
	if len(s) != 1 || s[0] != why {
		t.Fatalf("refusals said %q, want %q once", s, why)
	}
	top.ProbeNow(2) // nothing to kick: it must not block or probe
	f.set(0, base...)
	waitSnap(t, top, 20*time.Second, "the refused member removed", func(s *topology.Snapshot) bool { return s.Hosts[2].Removed })
	mu.Lock()
	defer mu.Unlock()
	if removed != 1 || accepted != 0 {
		t.Fatalf("OnRemove called %d times, %d connections: want 1 and 0", removed, accepted)
	}
}
