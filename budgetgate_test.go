//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
)

// hostState is a host's budget gate in conn's topology.
func hostState(conn *pgrouted.Connector, name string) (string, uint64) {
	for _, h := range conn.Topology().Hosts {
		if h.Name == name {
			return h.Budget, h.BudgetChanges
		}
	}
	return "", 0
}

// writeWhile writes to the primary every 10 ms until the test's cleanup,
// so that the primary's WAL moves on and a replica that does not replay
// it falls behind in time.
func writeWhile(t *testing.T, ctx context.Context) {
	t.Helper()
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS gate_ticks; CREATE TABLE gate_ticks (at timestamptz)")
	db, err := sql.Open("pgx", cluster.Primary().DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() }) // after the writes stop: cleanups run last first
	every(t, 10*time.Millisecond, func() { db.ExecContext(ctx, "INSERT INTO gate_ticks VALUES (now())") })
}

// TestBudgetGateHysteresisAndRamp: a replica beyond the staleness budget
// (replication 3 s behind, budget 2 s) leaves the reads; while its lag
// then hovers around the budget (1.9 s behind: its bound moves between
// about 1.91 and 2.01 s with the probes on a 2-CPU machine) it does not
// come back until it is well within the budget (hysteresis: no flapping); once its lag is gone it comes back and its
// share of the reads grows gradually (ramp) to its whole share. Its budget
// state changes twice in all; the other replica's never.
func TestBudgetGateHysteresisAndRamp(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS gate_rows; CREATE TABLE gate_rows (id int); INSERT INTO gate_rows VALUES (1)")
	replicated(t, ctx)
	db, conn, rec := open(t, "pgrouted_consistency=eventual", "pgrouted_max_lag=2s", "pgrouted_latency_window=off")
	replicasReady(t, conn)
	writeWhile(t, ctx)
	a, b := cluster.Replicas()[0].Name(), cluster.Replicas()[1].Name()

	read := func() pgrouted.RouteEvent {
		t.Helper()
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM gate_rows").Scan(&n); err != nil {
			t.Fatal(err)
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		ev := rec.events[len(rec.events)-1]
		rec.events = rec.events[:0]
		return ev
	}

	// Out and back, as many times as it takes to see 200 reads while a
	// ramps (its ramp lasts 3 probe intervals: a slow machine reads less
	// in it, 25 a cycle under the race detector), each time with the same
	// checks. While it ramps a took 20 % to 33 % of the reads (the phase
	// of its ramp's turns against the round robin's), 50 % once whole: of
	// 25 reads, 11 (44 %) came at 33 %; of 200, 45 % comes about once in
	// 5,000 runs, and a replica that took its whole share at once would
	// pass about once in 12.
	var ramp, rampA, whole, wholeA int
	cycles := 0
	for ramp < 200 {
		if cycles == 16 {
			t.Fatalf("only %d reads while %s ramped back, in %d cycles: too few to judge", ramp, a, cycles)
		}
		cycles++
		r, rA, w, wA := gateCycle(t, conn, read, a, uint64(2*cycles-2))
		ramp, rampA, whole, wholeA = ramp+r, rampA+rA, whole+w, wholeA+wA
	}
	t.Logf("%s: %d of %d reads while ramping, %d of %d after", a, rampA, ramp, wholeA, whole)
	rampShare, wholeShare := float64(rampA)/float64(ramp), float64(wholeA)/float64(whole)
	if rampShare >= 0.45 || wholeShare < 0.35 || rampShare >= wholeShare {
		t.Errorf("%s took %.0f%% of the reads while ramping back, %.0f%% after: want less than 45%% while ramping (gradual), at least 35%% after", a, 100*rampShare, 100*wholeShare)
	}
	if _, changes := hostState(conn, a); changes != uint64(2*cycles) {
		t.Errorf("%s changed budget state %d times in %d cycles, want %d (out, back each)", a, changes, cycles, 2*cycles)
	}
	if st, changes := hostState(conn, b); st != "in" || changes != 0 {
		t.Errorf("%s, never behind: state %q after %d changes, want in after none", b, st, changes)
	}
}

// gateCycle takes replica a of conn beyond the staleness budget of
// TestBudgetGateHysteresisAndRamp (out), holds its lag around the budget
// (it must stay out: its budget state changes once, from before changes),
// then lets it catch up, and counts the reads (by read) while it ramps
// back and the 200 after, and those of them a served.
func gateCycle(t *testing.T, conn *pgrouted.Connector, read func() pgrouted.RouteEvent, a string, before uint64) (ramp, rampA, whole, wholeA int) {
	t.Helper()
	// Beyond the budget: out.
	if err := cluster.Replicas()[0].ReplicationFault().Latency(3000 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		read()
		if st, _ := hostState(conn, a); st == "out" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s, 3 s behind with a budget of 2s, never left the reads: %+v", a, conn.Topology().Hosts)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Then around the budget, 3 s of reads (30 probes): it stays out.
	if err := cluster.Replicas()[0].ReplicationFault().Latency(1900 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	hovered := 0
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		if ev := read(); ev.Endpoint == a {
			hovered++
		}
	}
	if st, changes := hostState(conn, a); st != "out" || changes != before+1 {
		t.Fatalf("%s, lag around the budget: state %q after %d changes, want out after %d (no flapping); it served %d reads", a, st, changes, before+1, hovered)
	}

	// The lag gone: back, ramping.
	if err := cluster.Replicas()[0].ReplicationFault().Latency(0); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(60 * time.Second)
	for whole < 200 {
		st, _ := hostState(conn, a)
		ev := read()
		if ev.Primary {
			t.Fatalf("a read ran on the primary (reason %s)", ev.Reason)
		}
		switch st {
		case "ramp":
			ramp++
			if ev.Endpoint == a {
				rampA++
			}
		case "in": // it was out before this loop: back, whole
			whole++
			if ev.Endpoint == a {
				wholeA++
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not back within 60s: %+v", a, conn.Topology().Hosts)
		}
	}
	return ramp, rampA, whole, wholeA
}
