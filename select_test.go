//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/testcluster"
)

// TestKilledReplicaCostsNoRead: 16 readers; a replica is killed with
// SIGKILL: no read fails, its circuit opens, the other replica takes the
// reads; once restarted, a good probe brings it back. Read latency
// percentiles are logged for each phase. Through the driver and through
// the Pool.
func TestKilledReplicaCostsNoRead(t *testing.T) {
	forEachClient(t, testKilledReplicaCostsNoRead)
}

func testKilledReplicaCostsNoRead(t *testing.T, open opener) {
	ctx := testCtx(t)
	restore(t)
	// The open circuit's probes back off, doubling from the probe interval
	// (100ms) for as long as node2 is down (longer on a loaded machine):
	// capped at 2s, a good probe comes well within the wait for node2 to
	// come back, whatever the schedule reached.
	db, conn, rec := open(t, "pgrouted_circuit_max_backoff=2s")
	db.SetMaxIdleConns(16)
	waitClientReads(t, db, rec, 10*time.Second, "reads on node2", func(on map[string]int) bool { return on["node2"] > 0 })
	var phase atomic.Int32 // 0 before, 1 killed, 2 restarted
	var mu sync.Mutex
	lat := [3][]time.Duration{}
	inPhase := func(ph int) int {
		mu.Lock()
		defer mu.Unlock()
		return len(lat[ph])
	}
	var errs, reads atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var halted sync.Once
	halt := func() { halted.Do(func() { close(stop); wg.Wait() }) }
	// On failure, the workers stop at once, even one stuck in a read.
	wctx, cancelWork := context.WithCancel(ctx)
	defer func() { cancelWork(); halt() }()
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				began := time.Now()
				var one int
				err := db.QueryRowContext(wctx, "SELECT 1").Scan(&one)
				d := time.Since(began)
				if err != nil {
					errs.Add(1)
					t.Logf("read error: %v", err)
				}
				reads.Add(1)
				mu.Lock()
				ph := phase.Load()
				lat[ph] = append(lat[ph], d)
				mu.Unlock()
			}
		}()
	}
	// waitPhase waits until n reads ran in phase ph.
	waitPhase := func(ph, n int) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); inPhase(ph) < n; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("phase %d: %d reads in 30s, want %d", ph, inPhase(ph), n)
			}
		}
	}
	waitPhase(0, 500)
	phase.Store(1)
	if err := cluster.Node(2).Kill(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if h := conn.Topology().Hosts[2]; h.Name == "node2" && h.Circuit == "open" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node2's circuit did not open within 15s of its kill: %+v", conn.Topology().Hosts[2])
		}
	}
	if on := clientReadsOn(t, db, rec, 40); on["node2"] != 0 || on["node1"] == 0 {
		t.Errorf("while node2 is down, reads went to %v", on)
	}
	waitPhase(1, 500)
	if err := cluster.Node(2).Start(ctx); err != nil {
		t.Fatal(err)
	}
	phase.Store(2)
	waitClientReads(t, db, rec, 15*time.Second, "node2 back", func(on map[string]int) bool { return on["node2"] > 0 })
	waitPhase(2, 500)
	halt()
	if errs.Load() != 0 {
		t.Fatalf("%d of %d reads failed while a replica was killed", errs.Load(), reads.Load())
	}
	if h := conn.Topology().Hosts[2]; h.Circuit != "closed" {
		t.Fatalf("node2's circuit after the restart: %+v", h)
	}
	for i, name := range []string{"before", "node2 killed", "after restart"} {
		t.Logf("%-14s %6d reads  p50 %v  p99 %v", name, len(lat[i]), pct(lat[i], 50), pct(lat[i], 99))
	}
}

// pct returns the p-th percentile of ds.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// TestBlackholedReplicaHoldsReadsOnce: a replica whose network swallows
// everything holds each reader at most once, until its circuit opens and the
// reads stuck on it are interrupted and run elsewhere: once the circuit is
// open, every reader reads again, and no read fails.
//
// A read held by the replica is one that started there and ran again
// elsewhere (RouteEvent.Retried): counted from the route events, each
// reader's statement carrying its number, not guessed from durations a busy
// machine stretches anyway. The slowest read is logged, not judged.
// Through the driver and through the Pool.
func TestBlackholedReplicaHoldsReadsOnce(t *testing.T) {
	forEachClient(t, testBlackholedReplicaHoldsReadsOnce)
}

func testBlackholedReplicaHoldsReadsOnce(t *testing.T, open opener) {
	restore(t)
	// A read held by node2 needs a reader's read to reach it after the
	// blackhole began and before its circuit opened: each attempt that
	// saw none is logged with what the reads did, and tried again.
	for attempt := 1; ; attempt++ {
		held, diag := blackholeOnce(t, open)
		if t.Failed() || len(held) > 0 {
			return
		}
		t.Logf("attempt %d: no read was held by the blackholed replica; %s", attempt, diag)
		if attempt == 3 {
			t.Error("no read was held by the blackholed replica in 3 attempts: the test did not exercise it")
			return
		}
		if err := cluster.Node(2).Fault().Heal(); err != nil {
			t.Fatal(err)
		}
	}
}

// blackholeOnce is one attempt of testBlackholedReplicaHoldsReadsOnce: it
// returns the reads held by node2 per reader (each at most once, or the
// test fails), and when there is none, what the reads did after the
// blackhole began.
func blackholeOnce(t *testing.T, open opener) (held map[int]int, diag string) {
	ctx := testCtx(t)
	const connectTimeout = 3 * time.Second
	db, conn, rec := open(t, fmt.Sprintf("connect_timeout=%d", int(connectTimeout/time.Second)))
	waitClientReads(t, db, rec, 30*time.Second, "reads on node2", func(on map[string]int) bool { return on["node2"] > 0 })
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var halted sync.Once
	halt := func() { halted.Do(func() { close(stop); wg.Wait() }) }
	// On failure, the workers stop at once, even one stuck in a read.
	wctx, cancelWork := context.WithCancel(ctx)
	defer func() { cancelWork(); halt() }()
	var mu sync.Mutex
	var worst time.Duration
	const readers = 8
	var done [readers]atomic.Int64 // reads each reader completed
	for g := 0; g < readers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := fmt.Sprintf("SELECT %d /* reader %d */", g, g)
			for {
				select {
				case <-stop:
					return
				default:
				}
				began := time.Now()
				var one int
				if err := db.QueryRowContext(wctx, q).Scan(&one); err != nil {
					t.Errorf("reader %d: %v", g, err)
					return
				}
				d := time.Since(began)
				done[g].Add(1)
				mu.Lock()
				worst = max(worst, d)
				mu.Unlock()
			}
		}()
	}
	// waitEveryReader waits until every reader completed more reads than
	// in from: none is stuck.
	waitEveryReader := func(what string, from []int64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for g := 0; g < readers; {
			if done[g].Load() > from[g] {
				g++
				continue
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: reader %d completed no read in 30s", what, g)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	counts := func() []int64 {
		c := make([]int64, readers)
		for g := range c {
			c[g] = done[g].Load()
		}
		return c
	}
	waitEveryReader("before the blackhole", make([]int64, readers))
	before := conn.Topology().Hosts[2]
	from := len(rec.snapshot())
	if err := cluster.Node(2).Fault().Blackhole(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if h := conn.Topology().Hosts[2]; h.Name == "node2" && h.Circuit == "open" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node2's circuit did not open within 30s of the blackhole: %+v", conn.Topology().Hosts[2])
		}
	}
	// Twice: a read stuck on node2 when the circuit opened is released
	// (its first completed read), then the reader goes on.
	waitEveryReader("once node2's circuit is open", counts())
	waitEveryReader("once node2's circuit is open", counts())
	halt()
	held = map[int]int{}
	events := rec.snapshot()
	for _, e := range events {
		var g int
		if e.Retried && e.Err == nil {
			if _, err := fmt.Sscanf(e.Query, "SELECT %d /* reader", &g); err == nil {
				held[g]++
			}
		}
		if e.Err != nil {
			t.Errorf("a read failed: %v", e.Err)
		}
	}
	t.Logf("slowest read %v (connect timeout %v); reads held by the blackholed replica per reader: %v", worst.Round(time.Millisecond), connectTimeout, held)
	for g, n := range held {
		if n > 1 {
			t.Errorf("reader %d was held %d times by one blackholed replica", g, n)
		}
	}
	if len(held) == 0 {
		after := map[string]int{}
		for _, e := range events[from:] {
			after[e.Endpoint+" "+string(e.Reason)]++
		}
		diag = fmt.Sprintf("node2 before the blackhole: %+v; reads after it by endpoint and reason: %v", before, after)
	}
	return held, diag
}

func TestSelectionPolicies(t *testing.T) {
	restore(t)
	// The probes' round trips are noisy on a busy test machine: the
	// latency window is off where it is not what is tested.
	t.Run("weighted", func(t *testing.T) {
		db, conn, rec := open(t, "pgrouted_select=weighted", "pgrouted_weights=1,3,1", "pgrouted_latency_window=off")
		replicasReady(t, conn)
		on := readsOn(t, db, rec, 200)
		share := float64(on["node1"]) / float64(on["node1"]+on["node2"])
		t.Logf("weights 3:1 gave %v (node1 %.0f%%)", on, 100*share)
		if share < 0.65 || share > 0.85 {
			t.Fatalf("node1 (weight 3 of 4) served %.0f%% of reads", 100*share)
		}
	})
	t.Run("random", func(t *testing.T) {
		db, conn, rec := open(t, "pgrouted_select=random", "pgrouted_latency_window=off")
		replicasReady(t, conn)
		if on := readsOn(t, db, rec, 100); on["node1"] == 0 || on["node2"] == 0 {
			t.Fatalf("random used %v", on)
		}
	})
	t.Run("custom", func(t *testing.T) {
		var calls atomic.Int64
		db, conn, rec := openDSN(t, cluster.DSN()+"&pgrouted_probe_interval=100ms&pgrouted_latency_window=off&pgrouted_names="+names(), func(cfg *pgrouted.Config) {
			cfg.Select = func(_ context.Context, cs []pgrouted.Candidate) string {
				calls.Add(1)
				if len(cs) < 2 {
					panic("Select called with fewer than two candidates")
				}
				return "node2"
			}
		})
		replicasReady(t, conn)
		// Every read that asked Select went to node2 (a read with a single
		// eligible replica does not ask).
		if on := readsOn(t, db, rec, 30); int64(on["node2"]) < calls.Load() || calls.Load() < 20 {
			t.Fatalf("custom Select: %v after %d calls", on, calls.Load())
		}
	})
	t.Run("latency", func(t *testing.T) {
		// 150 ms: a window is at least the fastest replica's round trip
		// (max(window, fastest)), which a loaded machine can push to tens
		// of milliseconds; node1 stays out unless the fastest takes 75.
		if err := cluster.Node(1).Fault().Latency(150 * time.Millisecond); err != nil {
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
			{[]string{"pgrouted_latency_window=300ms"}, true},   // a wide one: both
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
				t.Fatalf("%v with node1 150ms slower: reads went to %v", tc.params, on)
			}
			_ = conn
		}
	})
	t.Run("least-inflight", func(t *testing.T) {
		db, conn, rec := open(t, "pgrouted_select=least-inflight", "pgrouted_latency_window=off")
		replicasReady(t, conn)
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
	db, conn, rec := open(t, "pgrouted_replica_max_conns=1")
	// Both replicas eligible, so that the two reads held below take the
	// one connection of each (open waits for one only: a busy machine sent
	// the second to the primary, which left a replica's pool free).
	replicasReady(t, conn)
	var held []*sql.Rows
	// Closed before the DB, which waits for them, when the test fails.
	t.Cleanup(func() {
		for _, r := range held {
			r.Close()
		}
	})
	for len(held) < 2 {
		rows, err := db.QueryContext(ctx, "SELECT generate_series(1, 5)")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, rows)
	}
	var reason pgrouted.Reason
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

// TestWeightedOverThreeReplicas: weights 1,2,3 over 6000 reads serve 1/6,
// 2/6 and 3/6 of them, within 2 percentage points, over a window in which
// every replica stayed eligible (healthy, its circuit closed, in its
// staleness budget, not ramping back). On a starved machine a late probe
// may take one out for a while, its share going to the others: that
// window is measured again (steadyReadsOn).
func TestWeightedOverThreeReplicas(t *testing.T) {
	ctx := testCtx(t)
	c, err := testcluster.Start(ctx, testcluster.Options{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg, err := pgrouted.ParseConfig(c.DSN() + "&pgrouted_probe_interval=100ms&pgrouted_select=weighted&pgrouted_latency_window=off" +
		"&pgrouted_names=p,r1,r2,r3&pgrouted_weights=1,1,2,3")
	if err != nil {
		t.Fatal(err)
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
	replicasReady(t, conn)
	// Every replica eligible (its first probes done, its staleness bound
	// known) before the count: a replica that joins the turns late leaves
	// its share to the others.
	waitReads(t, db, rec, 30*time.Second, "every replica to serve reads", func(on map[string]int) bool {
		return on["r1"] > 0 && on["r2"] > 0 && on["r3"] > 0
	})
	on := steadyReadsOn(t, db, conn, rec, 6000)
	total := on["r1"] + on["r2"] + on["r3"]
	for name, want := range map[string]float64{"r1": 1.0 / 6, "r2": 2.0 / 6, "r3": 3.0 / 6} {
		got := float64(on[name]) / float64(total)
		if got < want-0.02 || got > want+0.02 {
			t.Errorf("%s served %.1f%% of reads, want %.1f%% ± 2", name, 100*got, 100*want)
		}
	}
	t.Logf("weights 1,2,3 over %d reads: %v", total, on)
}

// steadyReadsOn is readsOn for n reads during which every standby of conn
// stayed eligible, as its topology says before each read; a window in
// which one did not is read again, 5 windows at most.
func steadyReadsOn(t *testing.T, db *sql.DB, conn *pgrouted.Connector, rec *routes, n int) map[string]int {
	t.Helper()
	for window := 1; ; window++ {
		left := ""
		on := clientReadsOnEach(t, sqlClient{db}, rec, n, func() {
			if left == "" {
				left = notEligible(conn.Topology())
			}
		})
		if left == "" {
			return on
		}
		if window == 5 {
			t.Fatalf("no window of %d reads with every replica eligible in 5: the last %v, %s", n, on, left)
		}
		t.Logf("window %d: %s, reads %v: measured again", window, left, on)
	}
}

// notEligible says which standby of s is not eligible for reads, and why,
// or "" when every one is.
func notEligible(s pgrouted.Snapshot) string {
	for _, h := range s.Hosts {
		if h.Name == s.Primary {
			continue
		}
		if !h.Healthy || h.Circuit != "closed" || (h.Budget != "" && h.Budget != "in") {
			return fmt.Sprintf("%s was not eligible (healthy %v, circuit %s, budget %q)", h.Name, h.Healthy, h.Circuit, h.Budget)
		}
	}
	return ""
}
