//go:build unix

package pgrouted_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
)

// statOf returns the Stat of the host named name.
func statOf(t *testing.T, p *pgrouted.Pool, name string) pgrouted.HostPool {
	t.Helper()
	for _, h := range p.Stat() {
		if h.Name == name {
			return h
		}
	}
	t.Fatalf("no host %s in Stat: %+v", name, p.Stat())
	return pgrouted.HostPool{}
}

// waitStat waits until ok holds of the Stat of every host in names, and
// fails with the figures it last saw after 30s.
func waitStat(t *testing.T, p *pgrouted.Pool, names []string, what string, ok func(pgrouted.HostPool) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var bad []pgrouted.HostPool
		for _, n := range names {
			if h := statOf(t, p, n); !ok(h) {
				bad = append(bad, h)
			}
		}
		if len(bad) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s: %+v", what, bad)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPoolStatReplicaSettings: the pgrouted_replica_ keys reach every
// replica's pgxpool, and Stat shows pgxpool's figures: the size, the
// connections min_conns keeps open, the ones the lifetime closes, the
// acquires of reads.
func TestPoolStatReplicaSettings(t *testing.T) {
	p, rec := openPool(t, nil, "pgrouted_replica_max_conns=3", "pgrouted_replica_min_conns=2",
		"pgrouted_replica_max_conn_lifetime=1s", "pgrouted_replica_health_check_period=100ms")
	var standbys []string
	for deadline := time.Now().Add(30 * time.Second); len(standbys) != 2; time.Sleep(20 * time.Millisecond) {
		standbys = standbys[:0]
		top := p.Topology()
		for _, h := range top.Hosts {
			if h.Role == "standby" && h.Healthy {
				standbys = append(standbys, h.Name)
			}
		}
		if len(standbys) != 2 && time.Now().After(deadline) {
			t.Fatalf("standbys %v within 30s, want 2: %+v", standbys, top.Hosts)
		}
	}
	for _, h := range p.Stat() {
		if h.Replica.MaxConns != 3 {
			t.Errorf("%s: MaxConns %d, want 3 (pgrouted_replica_max_conns)", h.Name, h.Replica.MaxConns)
		}
	}
	waitStat(t, p, standbys, "pgrouted_replica_min_conns=2 keeps 2 connections open", func(h pgrouted.HostPool) bool {
		return h.Replica.TotalConns >= 2 && h.Replica.NewConnsCount >= 2
	})
	waitStat(t, p, standbys, "pgrouted_replica_max_conn_lifetime=1s closes connections", func(h pgrouted.HostPool) bool {
		return h.Replica.MaxLifetimeDestroyCount > 0
	})

	// Reads borrow the replicas' connections: pgxpool counts them.
	ctx := testCtx(t)
	before := map[string]int64{}
	for _, h := range p.Stat() {
		before[h.Name] = h.Replica.AcquireCount
	}
	for i := range 10 {
		marker := fmt.Sprintf("stat-read-%d", i)
		var n int
		if err := p.QueryRow(ctx, "SELECT 1 /* "+marker+" */").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if ev := eventWith(t, rec, marker); ev.Endpoint == "primary" {
			t.Fatalf("read %d ran on the primary: %+v", i, ev)
		}
	}
	var acquired int64
	for _, h := range p.Stat() {
		acquired += h.Replica.AcquireCount - before[h.Name]
		if h.Replica.AcquireDuration < 0 || h.Replica.EmptyAcquireWaitTime < 0 {
			t.Errorf("%s: negative durations %+v", h.Name, h.Replica)
		}
	}
	if acquired < 10 {
		t.Errorf("%d acquires counted for 10 reads on replicas: %+v", acquired, p.Stat())
	}

	// The Topology shows the same pools.
	for _, h := range p.Topology().Hosts {
		if h.Pool.MaxConns != 3 {
			t.Errorf("Topology: %s: MaxConns %d, want 3", h.Name, h.Pool.MaxConns)
		}
	}
}

// TestSnapshotDurationsInNanoseconds: every duration of a Snapshot is a
// time.Duration, written to JSON as whole nanoseconds.
func TestSnapshotDurationsInNanoseconds(t *testing.T) {
	p, _ := openPool(t, nil)
	deadline := time.Now().Add(30 * time.Second)
	var top pgrouted.Snapshot
	for {
		top = p.Topology()
		ok := top.LeaseRemaining > 0
		for _, h := range top.Hosts {
			ok = ok && h.RTT > 0 && (h.Role != "standby" || h.LagBound != nil)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no RTT, lease or lag bound within 30s: %+v", top)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		LeaseRemaining json.Number `json:"leaseRemaining"`
		Hosts          []struct {
			RTT      json.Number  `json:"rtt"`
			LagBound *json.Number `json:"lagBound"`
			Pool     map[string]json.Number
		} `json:"hosts"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	if raw.LeaseRemaining.String() != fmt.Sprint(int64(top.LeaseRemaining)) {
		t.Errorf("leaseRemaining %s, want %d ns", raw.LeaseRemaining, int64(top.LeaseRemaining))
	}
	for i, h := range raw.Hosts {
		want := top.Hosts[i]
		if h.RTT.String() != fmt.Sprint(int64(want.RTT)) {
			t.Errorf("%s: rtt %s, want %d ns", want.Name, h.RTT, int64(want.RTT))
		}
		if want.LagBound != nil && (h.LagBound == nil || h.LagBound.String() != fmt.Sprint(int64(*want.LagBound))) {
			t.Errorf("%s: lagBound %v, want %d ns", want.Name, h.LagBound, int64(*want.LagBound))
		}
		if len(h.Pool) != 13 {
			t.Errorf("%s: pool has %d figures, want pgxpool.Stat's 13: %v", want.Name, len(h.Pool), h.Pool)
		}
	}
}
