// Package clustertest is what the examples' integration tests share: one
// real primary with two streaming replicas per test package, started in
// TestMain with replication delayed by injected latency, an OnRoute
// recorder, and the suite-wide accounting of reads (where they ran, and
// whether any of them was stale).
//
// It is test support for the examples, not part of their API.
package clustertest

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/testcluster"
)

// ReplicationLatency delays the WAL each replica receives for the whole
// suite, so that a replica really lacks a write for a while after it
// commits: a read routed there too early would be stale.
const ReplicationLatency = 50 * time.Millisecond

// MinReplicaShare is the share of reads that replicas must serve, suite
// wide, for the suite to pass.
const MinReplicaShare = 0.5

// Cluster is the test package's primary (node0) and replicas (node1,
// node2).
var Cluster *testcluster.Cluster

var (
	suiteReads   atomic.Int64 // reads reported to any Recorder
	suiteReplica atomic.Int64 // of which served by a replica
	suiteChecks  atomic.Int64 // freshness checks made with Fresh
	suiteStale   atomic.Int64 // of which failed

	// waiting is above zero while a test waits for a read to reach a
	// replica (UntilReplica): the reads it makes meanwhile show how fast
	// the probes are on this machine, not where the driver routes, and
	// are left out of the suite's share. The examples' tests do not run
	// in parallel.
	waiting atomic.Int32
)

// Main starts the cluster, runs the tests, reports where the suite's reads
// ran and fails the run when a read was stale or when replicas served no
// more than MinReplicaShare of the reads. Call it from TestMain:
//
//	func TestMain(m *testing.M) { clustertest.Main(m) }
//
// The cluster is started, shared and closed by testcluster.Run, as in
// every test package of the library: when PostgreSQL is not installed the
// run fails (never skips) with the error of testcluster.Start, which says
// how to install it, and a cluster that does not close cleanly fails the
// run too.
func Main(m *testing.M) {
	flag.Parse() // for testing.Verbose in Logf
	os.Exit(testcluster.Run(testcluster.Options{
		Replicas: 2,
		Logf: func(f string, a ...any) {
			if testing.Verbose() {
				fmt.Fprintf(os.Stderr, "testcluster: "+f+"\n", a...)
			}
		},
	}, func(c *testcluster.Cluster) int { return run(m, c) }))
}

func run(m *testing.M, c *testcluster.Cluster) int {
	Cluster = c
	for _, r := range c.Replicas() {
		if err := r.ReplicationFault().Latency(ReplicationLatency); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: delay replication to %s: %v\n", r.Name(), err)
			return 1
		}
	}
	code := m.Run()
	closeDirect()
	reads, onReplica := suiteReads.Load(), suiteReplica.Load()
	checks, stale := suiteChecks.Load(), suiteStale.Load()
	share := float64(onReplica) / float64(max(reads, 1))
	fmt.Fprintf(os.Stderr, "suite: replication delayed by %v; %d reads, %d (%.0f%%) served by replicas; %d freshness checks, %d stale\n",
		ReplicationLatency, reads, onReplica, 100*share, checks, stale)
	if code != 0 {
		return code
	}
	if stale != 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d stale reads\n", stale)
		return 1
	}
	if checks == 0 && !filtered() {
		fmt.Fprintf(os.Stderr, "FAIL: no freshness check ran\n")
		return 1
	}
	// Only when the whole suite ran: a -run filter may pick tests that
	// read nothing on purpose.
	if !filtered() && share <= MinReplicaShare {
		fmt.Fprintf(os.Stderr, "FAIL: replicas served %.0f%% of the reads, want more than %.0f%%\n", 100*share, 100*MinReplicaShare)
		return 1
	}
	return 0
}

func filtered() bool {
	for _, a := range os.Args[1:] {
		if strings.HasPrefix(a, "-test.run") || strings.HasPrefix(a, "-test.skip") {
			return true
		}
	}
	return false
}

// DSN is the cluster's DSN with the nodes named after the cluster's own
// names (node0 the primary, node1 and node2 the replicas), fast probes,
// and extra pgrouted_ or pgx parameters ("pgrouted_max_lag=1s").
func DSN(extra ...string) string {
	var names []string
	names = append(names, Cluster.Primary().Name())
	for _, r := range Cluster.Replicas() {
		names = append(names, r.Name())
	}
	dsn := Cluster.DSN() + "&pgrouted_probe_interval=50ms&pgrouted_names=" + strings.Join(names, ",")
	for _, e := range extra {
		dsn += "&" + e
	}
	return dsn
}

// Ctx is a test's context, cancelled when the test ends.
func Ctx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Recorder records the RouteEvents of one *sql.DB; give its Record method
// to Config.OnRoute. Every read it sees also counts in the suite's share.
type Recorder struct {
	mu     sync.Mutex
	events []pgrouted.RouteEvent
}

// Record is an OnRoute hook.
func (r *Recorder) Record(e pgrouted.RouteEvent) {
	if e.Op == pgrouted.OpRead && e.Err == nil && waiting.Load() == 0 {
		suiteReads.Add(1)
		if !e.Primary {
			suiteReplica.Add(1)
		}
	}
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Mark is the position of the next event, for Since.
func (r *Recorder) Mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// Since returns the events recorded since mark.
func (r *Recorder) Since(mark int) []pgrouted.RouteEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]pgrouted.RouteEvent(nil), r.events[mark:]...)
}

// Events returns every event recorded.
func (r *Recorder) Events() []pgrouted.RouteEvent { return r.Since(0) }

// Share counts the successful reads among events and those a replica
// served.
func Share(events []pgrouted.RouteEvent) (onReplica, reads int) {
	for _, e := range events {
		if e.Op == pgrouted.OpRead && e.Err == nil {
			reads++
			if !e.Primary {
				onReplica++
			}
		}
	}
	return onReplica, reads
}

// IsReplica reports whether an endpoint name is one of the replicas.
func IsReplica(endpoint string) bool {
	for _, r := range Cluster.Replicas() {
		if r.Name() == endpoint {
			return true
		}
	}
	return false
}

// Matching returns the events whose query contains every one of parts.
func Matching(events []pgrouted.RouteEvent, parts ...string) []pgrouted.RouteEvent {
	var out []pgrouted.RouteEvent
next:
	for _, e := range events {
		for _, p := range parts {
			if !strings.Contains(e.Query, p) {
				continue next
			}
		}
		out = append(out, e)
	}
	return out
}

// OnPrimary fails the test unless every event ran on the primary, and
// there is at least one.
func OnPrimary(t testing.TB, what string, events []pgrouted.RouteEvent) {
	t.Helper()
	if len(events) == 0 {
		t.Errorf("%s: no statement recorded", what)
	}
	primary := Cluster.Primary().Name()
	for _, e := range events {
		if e.Err != nil {
			t.Errorf("%s: %q failed: %v", what, e.Query, e.Err)
		}
		if !e.Primary || e.Endpoint != primary {
			t.Errorf("%s: %q (%s) ran on %q (%s), want the primary %s", what, e.Query, e.Op, e.Endpoint, e.Reason, primary)
		}
	}
}

// OnReplicas fails the test unless every event is a read that a replica
// served, and there is at least one.
func OnReplicas(t testing.TB, what string, events []pgrouted.RouteEvent) {
	t.Helper()
	if len(events) == 0 {
		t.Errorf("%s: no statement recorded", what)
	}
	for _, e := range events {
		if e.Err != nil {
			t.Errorf("%s: %q failed: %v", what, e.Query, e.Err)
		}
		if e.Op != pgrouted.OpRead || e.Primary || !IsReplica(e.Endpoint) {
			t.Errorf("%s: %q (%s) ran on %q (%s), want a replica", what, e.Query, e.Op, e.Endpoint, e.Reason)
		}
	}
}

// WaitCatalog waits for conn's first read of the function catalog. Until
// then a statement calling a function (sum, count, current_database) waits
// for it at most 5 s, then counts as a call of an unknown function and pins
// its connection to the primary for as long as database/sql keeps it: a
// test that opened a connector on a loaded machine and migrated at once
// kept such connections, and its reads later ran "pinned" (seen once in
// CI). Tests wait for it before their first statement.
func WaitCatalog(t testing.TB, conn *pgrouted.Connector) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for conn.Stats().CatalogReads == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the function catalog was not read within 45s of the connector's start")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// WaitReplicaRoute waits until a plain read would go to a replica: the
// probes know the roles and have seen the replicas replay every write made
// through conn (its read-your-writes watermark). It asks the driver
// itself, with Explain, which has no side effect. A decision of
// ReasonCheck is not enough: that read would first check the replica's
// replay position, and fall back to the primary while it is behind. It
// waits for the function catalog first (WaitCatalog).
func WaitReplicaRoute(t testing.TB, conn *pgrouted.Connector) {
	t.Helper()
	// Generous: on a CI machine whose CPUs are shared by every lane,
	// probes can time out for seconds, and the circuits they open back off.
	WaitCatalog(t, conn)
	deadline := time.Now().Add(45 * time.Second)
	for {
		d, err := conn.Explain(context.Background(), "SELECT 1")
		if err == nil && !d.Primary && IsReplica(d.Endpoint) && d.Reason == pgrouted.ReasonReplica {
			return
		}
		if time.Now().After(deadline) {
			top, _ := json.Marshal(conn.Topology())
			t.Fatalf("reads still do not go to a replica after 45s: %+v, %v; topology: %s", d, err, top)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// UntilReplica runs read until it reports that it ran on a replica (it
// returns the endpoint it ran on and whether the route was recorded), or
// fails the test, saying what, after 45 s of reads 5 ms apart: a deadline,
// not a count of reads, which a machine without the race detector runs
// before the probes have seen the replicas hold the caller's write. The
// reads it makes do not count in the suite's share: how many it takes
// depends on the machine's speed, not on the driver.
func UntilReplica(t testing.TB, what string, read func() (endpoint string, recorded bool)) {
	t.Helper()
	waiting.Add(1)
	defer waiting.Add(-1)
	deadline := time.Now().Add(45 * time.Second)
	for {
		node, rec := read()
		if rec && IsReplica(node) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached a replica in 45s; last on %s", what, node)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Fresh records one freshness check: ok is false when a read missed the
// test's own earlier write. A stale read fails the test and the suite.
func Fresh(t testing.TB, ok bool, format string, args ...any) {
	t.Helper()
	suiteChecks.Add(1)
	if !ok {
		suiteStale.Add(1)
		t.Errorf("stale read: "+format, args...)
	}
}

// NodeByPort names the node whose PostgreSQL listens on port, the value of
// inet_server_port() in a session: where a statement really ran.
func NodeByPort(t testing.TB, port int) string {
	t.Helper()
	for _, n := range Cluster.Nodes() {
		if strings.HasSuffix(n.DirectAddr(), fmt.Sprintf(":%d", port)) {
			return n.Name()
		}
	}
	t.Fatalf("no node listens on port %d", port)
	return ""
}

// ReplicasBehind reports whether no replica has replayed the primary's
// current WAL position yet, asked of the servers directly (bypassing
// pgrouted and the fault points): a read that a replica served now could
// miss the latest write.
func ReplicasBehind(ctx context.Context, t testing.TB) bool {
	t.Helper()
	var primary string
	if err := direct(ctx, t, Cluster.Primary()).QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&primary); err != nil {
		t.Fatal(err)
	}
	for _, r := range Cluster.Replicas() {
		var caughtUp bool
		if err := direct(ctx, t, r).QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", primary).Scan(&caughtUp); err != nil {
			t.Fatal(err)
		}
		if caughtUp {
			return false
		}
	}
	return true
}

var (
	directMu    sync.Mutex
	directConns = map[*testcluster.Node]*pgx.Conn{}
)

// direct is a connection to n that bypasses pgrouted and the fault
// points, kept for the test package's life: opening one per check would
// take longer than the replication delay.
func direct(ctx context.Context, t testing.TB, n *testcluster.Node) *pgx.Conn {
	t.Helper()
	directMu.Lock()
	defer directMu.Unlock()
	if c := directConns[n]; c != nil && !c.IsClosed() {
		return c
	}
	c, err := n.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	directConns[n] = c
	return c
}

func closeDirect() {
	directMu.Lock()
	defer directMu.Unlock()
	for n, c := range directConns {
		c.Close(context.Background())
		delete(directConns, n)
	}
}

// migrated is true while the example's schema is in place (see Clean).
var migrated atomic.Bool

// Reset drops and recreates the public schema on the primary, waits until
// the replicas have replayed it, for a test that needs an empty database.
func Reset(t testing.TB) {
	t.Helper()
	migrated.Store(false)
	execReplicated(t, "DROP SCHEMA public CASCADE; CREATE SCHEMA public")
}

// Clean prepares an empty database for a test: when a test migrated the
// schema (and called Migrated), it empties tables; otherwise it resets
// the database and returns true: the caller migrates, then calls
// Migrated. Migrating once per package keeps the suite fast.
func Clean(t testing.TB, tables ...string) (migrate bool) {
	t.Helper()
	if !migrated.Load() {
		Reset(t)
		return true
	}
	execReplicated(t, "TRUNCATE "+strings.Join(tables, ", ")+" RESTART IDENTITY CASCADE")
	return false
}

// Migrated records that the example's schema is in place.
func Migrated() { migrated.Store(true) }

// execReplicated runs sql on the primary, bypassing pgrouted, and waits
// until the replicas have replayed it: reads through pgrouted cannot tell
// it from older data otherwise, since it is not their own write.
func execReplicated(t testing.TB, sql string) {
	t.Helper()
	ctx := Ctx(t)
	p := Cluster.Primary()
	if err := p.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
	lsn, err := p.CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range Cluster.Replicas() {
		if err := r.WaitReplayed(ctx, lsn); err != nil {
			t.Fatal(err)
		}
	}
}

// Guard turns a panic in the test's goroutine into a test failure, so that
// one crashing statement does not hide the rest of the suite's results.
// Defer it first thing in a test: defer clustertest.Guard(t).
func Guard(t testing.TB) {
	if r := recover(); r != nil {
		t.Errorf("panic: %v\n%s", r, debug.Stack())
	}
}
