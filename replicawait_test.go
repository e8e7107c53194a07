//go:build unix

package pgrouted_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
)

// writeReadBack inserts row id into table through c (the driver's
// *sql.DB, sqlClient, or a Pool) and reads it back at once with ctx; it
// fails the test when the read misses the row (a stale read) and returns
// the read's RouteEvent.
func writeReadBack(t *testing.T, ctx context.Context, c client, rec *routes, table string, id int) pgrouted.RouteEvent {
	t.Helper()
	if err := c.ExecContext(ctx, "INSERT INTO "+table+" (id) VALUES ($1)", id); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := c.QueryRowContext(ctx, "SELECT count(*) FROM "+table+" WHERE id = $1", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	ev := lastRead(t, rec)
	if n != 1 {
		t.Fatalf("read-back of row %d found %d rows (a stale read), served by %s (primary %v, reason %s)", id, n, ev.Endpoint, ev.Primary, ev.Reason)
	}
	return ev
}

// TestReplicaWaitServesOwnWrite: with replication delayed by 100 ms on
// every replica, a read-back right after its write cannot be proven fresh
// on any replica; with pgrouted_replica_wait it waits on a replica for the
// write instead of going to the primary, and sees the row. Through the
// driver and through a Pool.
func TestReplicaWaitServesOwnWrite(t *testing.T) {
	forEachClient(t, testReplicaWaitServesOwnWrite)
}

func testReplicaWaitServesOwnWrite(t *testing.T, open opener) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS rwait; CREATE TABLE rwait (id int)")
	replicated(t, ctx)
	db, conn, rec := open(t, "pgrouted_replica_wait=10s")
	replicasReady(t, conn)
	for _, r := range cluster.Replicas() {
		if err := r.ReplicationFault().Latency(100 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	const n = 20
	var waited time.Duration
	for i := range n {
		ev := writeReadBack(t, ctx, db, rec, "rwait", i)
		if ev.Primary {
			t.Fatalf("read-back %d ran on the primary (reason %s), want a replica that waited for the write", i, ev.Reason)
		}
		waited += ev.Waited
	}
	st := conn.Stats()
	if waited != st.ReplicaWaitTime {
		t.Errorf("the read-backs' RouteEvent.Waited add up to %v, Stats.ReplicaWaitTime says %v: every wait is one of theirs", waited, st.ReplicaWaitTime)
	}
	t.Logf("%d read-backs: %d waits, %v waited in all, %d timeouts", n, st.ReplicaWaits, st.ReplicaWaitTime, st.ReplicaWaitTimeouts)
	if st.ReplicaWaits == 0 || st.ReplicaWaitTimeouts != 0 {
		t.Fatalf("Stats: %d waits, %d timeouts; want at least one wait (replication is 100 ms behind) and no timeout within 10s", st.ReplicaWaits, st.ReplicaWaitTimeouts)
	}
}

// TestReplicaWaitTimeout: with replay paused on every replica, a read-back
// that may wait 50 ms (WithReplicaWait) waits, times out and runs on the
// primary, which has the row; once a wait on each replica timed out, the
// replicas are known to lag more than the wait and are not waited on
// again: the next read-backs go to the primary without a wait. The probes
// are an hour apart, so that what they would learn of the lag (see
// TestReplicaWaitSkipsLaggingReplica) does not decide first. Through the
// driver and through a Pool.
func TestReplicaWaitTimeout(t *testing.T) {
	forEachClient(t, testReplicaWaitTimeout)
}

func testReplicaWaitTimeout(t *testing.T, open opener) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS rwaitto; CREATE TABLE rwaitto (id int)")
	replicated(t, ctx)
	// No latency window: the first probes' round trips, noisy on a busy
	// machine, must not keep one replica out of the turns.
	// No staleness budget: probes an hour apart give the replicas no
	// staleness bound until the second primary probe (unknown is not
	// fresh), and the budget is not what this test is about.
	db, conn, rec := open(t, "pgrouted_probe_interval=60m", "pgrouted_lease=120m", "pgrouted_latency_window=off", "pgrouted_max_lag=none")
	replicasReady(t, conn)
	for _, r := range cluster.Replicas() {
		if err := r.PauseReplay(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wctx := pgrouted.WithReplicaWait(ctx, 50*time.Millisecond)

	// Read-backs until a wait on each replica has timed out: each read-back
	// either waits on a replica not yet known to lag, times out and runs on
	// the primary, or, when its turn fell on a replica whose wait already
	// timed out (the picker's turns also move when a read is planned again
	// after its check, which a loaded machine makes vary), runs on the
	// primary without waiting. A replica whose wait timed out is not waited
	// on again, so the timeouts are on distinct replicas.
	replicas := uint64(len(cluster.Replicas()))
	id := 0
	for conn.Stats().ReplicaWaitTimeouts < replicas {
		if id == 8*int(replicas) {
			st := conn.Stats()
			t.Fatalf("%d read-backs: %d waits, %d timed out; want a wait timed out on each of the %d replicas", id, st.ReplicaWaits, st.ReplicaWaitTimeouts, replicas)
		}
		before := conn.Stats()
		ev := writeReadBack(t, wctx, db, rec, "rwaitto", id)
		id++
		after := conn.Stats()
		if !ev.Primary || ev.Reason != pgrouted.ReasonBehind {
			t.Fatalf("read-back ran on %s (primary %v, reason %s) with replay paused, want the primary with reason %s", ev.Endpoint, ev.Primary, ev.Reason, pgrouted.ReasonBehind)
		}
		waits, timeouts := after.ReplicaWaits-before.ReplicaWaits, after.ReplicaWaitTimeouts-before.ReplicaWaitTimeouts
		switch {
		case waits == 1 && timeouts == 1:
			if ev.Waited < 50*time.Millisecond {
				t.Fatalf("read-back %d: RouteEvent.Waited %v after a wait that timed out at 50ms", id-1, ev.Waited)
			}
		case waits == 0 && timeouts == 0 && ev.Waited == 0:
		default:
			t.Fatalf("read-back %d: waits %d→%d, timeouts %d→%d, waited %v; want one wait, timed out, or none", id-1,
				before.ReplicaWaits, after.ReplicaWaits, before.ReplicaWaitTimeouts, after.ReplicaWaitTimeouts, ev.Waited)
		}
	}

	// Both are known to lag more than 50 ms: no more waits.
	before := conn.Stats()
	for range 5 {
		ev := writeReadBack(t, wctx, db, rec, "rwaitto", id)
		id++
		if !ev.Primary {
			t.Fatalf("read-back ran on replica %s with replay paused", ev.Endpoint)
		}
	}
	if after := conn.Stats(); after.ReplicaWaits != before.ReplicaWaits {
		t.Fatalf("%d more waits on replicas whose last wait timed out and that have not replayed since, want none", after.ReplicaWaits-before.ReplicaWaits)
	}

	// Once they replay again (seen by the checks of the reads), reads are
	// served by replicas again.
	for _, r := range cluster.Replicas() {
		if err := r.ResumeReplay(ctx); err != nil {
			t.Fatal(err)
		}
	}
	replicated(t, ctx)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ev := writeReadBack(t, pgrouted.WithReplicaWait(ctx, 10*time.Second), db, rec, "rwaitto", id)
		id++
		if !ev.Primary {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30s after replay resumed, read-backs still run on the primary (reason %s)", ev.Reason)
		}
	}
}

// TestReplicaWaitSkipsLaggingReplica: a replica whose probes show it
// lacking WAL the primary wrote long before (replay paused, a write on the
// primary, until its staleness bound passes 2 s) is not waited on with a
// 50 ms wait: the read-back goes to the primary at once.
func TestReplicaWaitSkipsLaggingReplica(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS rwaitlag; CREATE TABLE rwaitlag (id int)")
	replicated(t, ctx)
	db, conn, rec := open(t)
	replicasReady(t, conn)
	// The standbys replay all the WAL the connector's probes of the
	// primary have seen before their replay is paused, or none of its
	// samples is at or before their replay position and their staleness
	// is unbounded (no bound shown) rather than a bound that grows past
	// 2s. WAL a read writes (page pruning, hint bits of the rows the DDL
	// above changed) stays unflushed, and unsent, until a commit flushes
	// it: the test failed so when run alone twice.
	mustExec(t, ctx, cluster.Primary(), "INSERT INTO rwaitlag VALUES (-2)")
	replicated(t, ctx)
	for _, r := range cluster.Replicas() {
		if err := r.PauseReplay(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mustExec(t, ctx, cluster.Primary(), "INSERT INTO rwaitlag VALUES (-1)")
	deadline := time.Now().Add(30 * time.Second)
	for {
		behind := 0
		top := conn.Topology()
		for _, h := range top.Hosts {
			if h.Name != top.Primary && h.Healthy && h.LagBound != nil && *h.LagBound >= 2*time.Second {
				behind++
			}
		}
		if behind == len(cluster.Replicas()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replicas' staleness bounds did not pass 2s within 30s of pausing replay: %+v", top.Hosts)
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := conn.Stats()
	for i := range 5 {
		ev := writeReadBack(t, pgrouted.WithReplicaWait(ctx, 50*time.Millisecond), sqlClient{db}, rec, "rwaitlag", i)
		if !ev.Primary || ev.Reason != pgrouted.ReasonBehind {
			t.Fatalf("read-back ran on %s (primary %v, reason %s), want the primary with reason %s", ev.Endpoint, ev.Primary, ev.Reason, pgrouted.ReasonBehind)
		}
	}
	if after := conn.Stats(); after.ReplicaWaits != before.ReplicaWaits {
		t.Fatalf("%d waits on replicas whose probes show them more than 2s behind, with a 50ms wait; want none", after.ReplicaWaits-before.ReplicaWaits)
	}
}

// TestReplicaWaitSkipsStalledReplica: a replica whose replay is paused
// while it receives WAL (its probes show its replay standing still with
// WAL to replay) is not waited on, even with a wait far longer than its lag
// floor so far: a read-back that may wait 5 s checks it without waiting and
// goes at once to the other replica, which replays 100 ms behind and is
// waited on. Counted: no wait times out (a wait on the paused one would),
// Stats.ReplicaWaitsSkipped counts the skipped ones, and every read-back
// waited far less than 5 s.
func TestReplicaWaitSkipsStalledReplica(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS rwaitstall; CREATE TABLE rwaitstall (id int)")
	replicated(t, ctx)
	db, conn, rec := open(t, "pgrouted_latency_window=off")
	replicasReady(t, conn)
	stalled, slow := cluster.Replicas()[0], cluster.Replicas()[1]
	if err := slow.ReplicationFault().Latency(100 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	writeWhile(t, ctx)
	if err := stalled.PauseReplay(ctx); err != nil {
		t.Fatal(err)
	}
	// 5 probes of the paused replica since the pause (each measures its
	// round trip anew), each seen by a view: counted, not timed, so that
	// a slow machine waits longer.
	rtt := func() time.Duration {
		for _, h := range conn.Topology().Hosts {
			if h.Name == stalled.Name() {
				return h.RTT
			}
		}
		t.Fatalf("no host %s in the topology", stalled.Name())
		return 0
	}
	last, probes := rtt(), 0
	for deadline := time.Now().Add(60 * time.Second); probes < 5; time.Sleep(5 * time.Millisecond) {
		if r := rtt(); r != last {
			last, probes = r, probes+1
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d probes of %s seen in 60 s, want 5", probes, stalled.Name())
		}
	}
	const wait = 5 * time.Second
	before := conn.Stats()
	for i := range 10 {
		ev := writeReadBack(t, pgrouted.WithReplicaWait(ctx, wait), sqlClient{db}, rec, "rwaitstall", i)
		if ev.Primary || ev.Endpoint != slow.Name() {
			t.Fatalf("read-back %d ran on %s (primary %v, reason %s), want %s, the replica that replays", i, ev.Endpoint, ev.Primary, ev.Reason, slow.Name())
		}
		if ev.Waited > wait/2 {
			t.Fatalf("read-back %d waited %v of its %v: it waited on the paused replica", i, ev.Waited, wait)
		}
	}
	after := conn.Stats()
	t.Logf("waits %d, timeouts %d, skipped %d", after.ReplicaWaits-before.ReplicaWaits, after.ReplicaWaitTimeouts-before.ReplicaWaitTimeouts, after.ReplicaWaitsSkipped-before.ReplicaWaitsSkipped)
	if after.ReplicaWaitTimeouts != before.ReplicaWaitTimeouts {
		t.Errorf("%d waits timed out: a read waited on the paused replica", after.ReplicaWaitTimeouts-before.ReplicaWaitTimeouts)
	}
	if after.ReplicaWaitsSkipped == before.ReplicaWaitsSkipped {
		t.Errorf("Stats.ReplicaWaitsSkipped did not move: the round-robin never offered the paused replica to 10 read-backs?")
	}
	if after.ReplicaWaits == before.ReplicaWaits {
		t.Errorf("no read waited: the replica 100 ms behind is worth waiting on with %v", wait)
	}
}
