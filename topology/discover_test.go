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
