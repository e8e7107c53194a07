package pgrouted_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
)

// TestKilledReplicaCostsNoRead: reads go on without an error while a replica
// is killed, its circuit opens and no read goes to it; after a restart a
// successful probe closes the circuit and it serves reads again.
func TestKilledReplicaCostsNoRead(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	db, _, rec := open(t)
	waitReads(t, db, rec, 10*time.Second, "reads on node2", func(on map[string]int) bool { return on["node2"] > 0 })
	var errs, reads atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var one int
				if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
					errs.Add(1)
					t.Logf("read error: %v", err)
				}
				reads.Add(1)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	if err := cluster.Node(2).Kill(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if errs.Load() != 0 {
		t.Fatalf("%d of %d reads failed while a replica was killed", errs.Load(), reads.Load())
	}
	if on := readsOn(t, db, rec, 40); on["node2"] != 0 {
		t.Fatalf("killed replica still chosen: %v", on)
	}
	if err := cluster.Node(2).Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitReads(t, db, rec, 15*time.Second, "node2 back", func(on map[string]int) bool { return on["node2"] > 0 })
	t.Logf("%d reads, none failed, while node2 was killed and came back", reads.Load())
}

func TestSelectionPolicies(t *testing.T) {
	restore(t)
	// The probes' round trips are noisy on a busy test machine: the
	// latency window is off where it is not what is tested.
	t.Run("weighted", func(t *testing.T) {
		db, _, rec := open(t, "pgrouted_select=weighted", "pgrouted_weights=1,3,1", "pgrouted_latency_window=off")
		on := readsOn(t, db, rec, 200)
		share := float64(on["node1"]) / float64(on["node1"]+on["node2"])
		t.Logf("weights 3:1 gave %v (node1 %.0f%%)", on, 100*share)
		if share < 0.65 || share > 0.85 {
			t.Fatalf("node1 (weight 3 of 4) served %.0f%% of reads", 100*share)
		}
	})
	t.Run("random", func(t *testing.T) {
		db, _, rec := open(t, "pgrouted_select=random", "pgrouted_latency_window=off")
		if on := readsOn(t, db, rec, 100); on["node1"] == 0 || on["node2"] == 0 {
			t.Fatalf("random used %v", on)
		}
	})
	t.Run("custom", func(t *testing.T) {
		cfg, err := pgrouted.ParseConfig(cluster.DSN() + "&pgrouted_probe_interval=100ms&pgrouted_names=" + names())
		if err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int64
		cfg.Select = func(_ context.Context, cs []pgrouted.Candidate) string {
			calls.Add(1)
			if len(cs) < 2 {
				panic("Select called with fewer than two candidates")
			}
			return "node2"
		}
		rec := &routes{}
		cfg.OnRoute = rec.record
		conn, err := pgrouted.NewConnector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		db := sql.OpenDB(conn)
		defer db.Close()
		waitReplicaRoute(t, conn)
		// Every read that asked Select went to node2 (a read with a single
		// eligible replica does not ask).
		if on := readsOn(t, db, rec, 30); int64(on["node2"]) < calls.Load() || calls.Load() < 20 {
			t.Fatalf("custom Select: %v after %d calls", on, calls.Load())
		}
	})
	t.Run("latency", func(t *testing.T) {
		if err := cluster.Node(1).Fault().Latency(40 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		defer cluster.Node(1).Fault().Latency(0)
		for _, tc := range []struct {
			params []string
			both   bool
		}{
			{[]string{"pgrouted_select=nearest"}, false},
			{[]string{"pgrouted_select=round-robin"}, false},    // 20ms window leaves node1 out
			{[]string{"pgrouted_select=least-inflight"}, false}, // so does least-inflight's
			{[]string{"pgrouted_latency_window=off"}, true},     // no window: both
			{[]string{"pgrouted_latency_window=100ms"}, true},   // a wide one: both
			{[]string{"pgrouted_select=weighted", "pgrouted_weights=1,5,1"}, false},
		} {
			db, conn, rec := open(t, tc.params...)
			// Wait for the RTT EWMA to see the latency.
			deadline := time.Now().Add(10 * time.Second)
			for {
				on := readsOn(t, db, rec, 20)
				if (on["node1"] > 0) == tc.both && on["node2"] > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%v: reads went to %v", tc.params, on)
				}
				time.Sleep(100 * time.Millisecond)
			}
			on := readsOn(t, db, rec, 40)
			if (on["node1"] > 0) != tc.both {
				t.Fatalf("%v with node1 40ms slower: reads went to %v", tc.params, on)
			}
			_ = conn
		}
	})
	t.Run("least-inflight", func(t *testing.T) {
		db, _, rec := open(t, "pgrouted_select=least-inflight", "pgrouted_latency_window=off")
		ctx := testCtx(t)
		// Keep a read open on node1.
		var held []*sql.Rows
		defer func() {
			for _, r := range held {
				r.Close()
			}
		}()
		for tries := 0; len(held) < 1; tries++ {
			if tries > 200 {
				t.Fatal("no read landed on node1")
			}
			rows, err := db.QueryContext(ctx, "SELECT inet_server_port() FROM generate_series(1, 3)")
			if err != nil {
				t.Fatal(err)
			}
			var port int
			rows.Next()
			if err := rows.Scan(&port); err != nil {
				t.Fatal(err)
			}
			if nodeByPort(t, port).Name() == "node1" {
				held = append(held, rows)
			} else {
				rows.Close()
			}
		}
		// Two candidates: the power of two choices compares both, and
		// node2 has nothing in flight. (Round-robin would send node1 half
		// of them; a read or two may find node2 briefly out of rotation
		// on a busy machine.)
		on := readsOn(t, db, rec, 40)
		if on["node1"] > 2 || on["node2"] < 38 {
			t.Fatalf("with a read in flight on node1, least-inflight sent reads to %v", on)
		}
		held[0].Close()
		held = nil
		if on := readsOn(t, db, rec, 100); on["node1"] == 0 || on["node2"] == 0 {
			t.Fatalf("with nothing in flight, least-inflight sent reads to %v", on)
		}
	})
}

// TestSaturatedReplicas: with every replica's pool exhausted, automatic
// reads run on the primary (reason saturated); a forced replica read waits
// for a connection instead.
func TestSaturatedReplicas(t *testing.T) {
	ctx := testCtx(t)
	db, _, rec := open(t, "pgrouted_replica_max_conns=1")
	var held []*sql.Rows
	for len(held) < 2 {
		rows, err := db.QueryContext(ctx, "SELECT generate_series(1, 5)")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, rows)
	}
	var reason string
	var primary bool
	var one int
	if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
	evs := rec.snapshot()
	last := evs[len(evs)-1]
	reason, primary = last.Reason, last.Primary
	if !primary || reason != pgrouted.ReasonSaturated {
		t.Fatalf("read with both replica pools exhausted: %+v", last.Decision)
	}
	wctx, cancel := context.WithTimeout(pgrouted.WithRoute(ctx, pgrouted.Replica), 300*time.Millisecond)
	err := db.QueryRowContext(wctx, "SELECT 1").Scan(&one)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("forced replica read with exhausted pools: %v, want it to wait (deadline exceeded)", err)
	}
	for _, r := range held {
		r.Close()
	}
	if err := db.QueryRowContext(pgrouted.WithRoute(ctx, pgrouted.Replica), "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("forced replica read once a connection is free: %v", err)
	}
}

// TestStrictBoot: with pgrouted_strict_boot=true, the first use fails while
// a configured host is unreachable, naming it; without it, that host is
// just unhealthy.
func TestStrictBoot(t *testing.T) {
	ctx := testCtx(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close() // nothing listens there now
	base := strings.Replace(cluster.DSN(), "@", "@"+dead+",", 1) + "&pgrouted_probe_interval=100ms&pgrouted_names=ghost," + names()
	strict, err := sql.Open("pgrouted", base+"&pgrouted_strict_boot=true")
	if err != nil {
		t.Fatal(err)
	}
	defer strict.Close()
	err = strict.PingContext(ctx)
	if err == nil || !strings.Contains(err.Error(), "ghost") || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("strict boot with an unreachable host: %v", err)
	}
	t.Logf("strict boot: %v", err)
	lenient, err := sql.Open("pgrouted", base)
	if err != nil {
		t.Fatal(err)
	}
	defer lenient.Close()
	var one int
	if err := lenient.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("without strict boot, an unreachable host broke a read: %v", err)
	}
}
