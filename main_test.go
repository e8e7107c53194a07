//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/internal/testhelp"
	"github.com/pgrouted/pgrouted/testcluster"
)

// cluster is this package's primary with two streaming replicas, started
// once; every statement is logged so tests can see where one really ran.
var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	if os.Getenv(globalHelperEnv) != "" {
		// An exec of this binary as a second process (global_test.go).
		os.Exit(globalHelper())
	}
	os.Exit(testcluster.Run(testcluster.Options{
		Replicas: 2,
		Conf:     []string{"log_statement = 'all'"},
		Logf:     testhelp.Logf,
	}, func(c *testcluster.Cluster) int {
		cluster = c
		code := m.Run()
		// The Patroni cluster, when a test left it open.
		if err := closePatroni(); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: close the Patroni cluster: %v\n", err)
			code = 1
		}
		return code
	}))
}

// testCtx is a context for one test: it ends after 3 minutes or with the test.
func testCtx(t testing.TB) context.Context {
	t.Helper()
	return testhelp.Context(t, 3*time.Minute)
}

// restore puts the cluster back when the test ends, for a test that breaks it.
func restore(t *testing.T) {
	t.Helper()
	testhelp.Restore(t, cluster)
}

// routes records every RouteEvent.
type routes struct {
	mu     sync.Mutex
	events []pgrouted.RouteEvent
}

func (r *routes) record(e pgrouted.RouteEvent) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *routes) snapshot() []pgrouted.RouteEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]pgrouted.RouteEvent(nil), r.events...)
}

// open opens a *sql.DB on the cluster through a Connector with an OnRoute
// recorder. extra are DSN parameters ("pgrouted_fallback=error").
func open(t testing.TB, extra ...string) (*sql.DB, *pgrouted.Connector, *routes) {
	t.Helper()
	dsn := cluster.DSN() + "&pgrouted_probe_interval=100ms&pgrouted_lease=5s&pgrouted_write_timeout=20s&pgrouted_names=" + names()
	for _, e := range extra {
		dsn += "&" + e
	}
	return openDSN(t, dsn, nil)
}

// openDSN opens a *sql.DB through a Connector on dsn, with an OnRoute
// recorder, after tweak (when not nil) changed the parsed Config. It waits
// until reads go to a replica; the DB is closed when the test ends.
func openDSN(t testing.TB, dsn string, tweak func(*pgrouted.Config)) (*sql.DB, *pgrouted.Connector, *routes) {
	t.Helper()
	cfg, err := pgrouted.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	rec := &routes{}
	cfg.OnRoute = rec.record
	if tweak != nil {
		tweak(cfg)
	}
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	waitReplicaRoute(t, conn)
	// The first read of the function catalog runs on a primary pool
	// connection: let it be done before a test counts anything.
	deadline := time.Now().Add(30 * time.Second)
	for conn.Stats().CatalogReads == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the function catalog was not read within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return db, conn, rec
}

// waitReplicaRoute waits until a plain read would go to a replica and the
// primary is known: the probes know the roles and the replicas hold the
// connector's writes.
func waitReplicaRoute(t testing.TB, conn *pgrouted.Connector) {
	t.Helper()
	// A read of every relation: it needs every write of the connector
	// (a read of no relation, SELECT 1, needs none).
	// Generous: on a CI machine whose CPUs are shared by every lane,
	// probes can time out for seconds, and the circuits they open back off.
	deadline := time.Now().Add(45 * time.Second)
	for {
		d, err := conn.Explain(context.Background(), readOfEveryRelation)
		// "replica-check" is not enough: the check may still send the
		// read to the primary.
		if err == nil && !d.Primary && d.Reason == pgrouted.ReasonReplica && conn.Topology().Primary != "" {
			return
		}
		if time.Now().After(deadline) {
			top, _ := json.Marshal(conn.Topology())
			t.Fatalf("reads still do not go to a replica after 45s: %+v, %v; topology: %s", d, err, top)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readOfEveryRelation is a read whose relations the text does not name (a
// function in FROM): it needs every write of its connector or Session, as
// every read did before read-your-writes was scoped by relation.
const readOfEveryRelation = "SELECT * FROM generate_series(1, 1)"

// replicasReady waits until every standby answered a probe of conn (healthy,
// circuit closed, replay position known): from then on a read may go to any
// of them. waitReplicaRoute returns as soon as one replica is eligible; a
// test of how reads spread over all of them needs this too.
func replicasReady(t testing.TB, conn *pgrouted.Connector) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		top := conn.Topology()
		ready, standbys := top.Primary != "", 0
		for _, h := range top.Hosts {
			if h.Name == top.Primary {
				continue
			}
			standbys++
			if h.Role != "standby" || !h.Healthy || h.Circuit != "closed" || h.ReplayLSN == "" {
				ready = false
			}
		}
		if ready && standbys > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standbys are not all eligible after 45s: %+v", top.Hosts)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// every runs f every d in a goroutine of its own until stop, which waits
// for it (and which the test's cleanup calls too).
func every(t testing.TB, d time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				f()
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// lagsKnown waits until conn has bounded every standby's staleness
// (HostInfo.LagBound): a connector just opened knows none of a replica
// that replays behind every sample of its history (a delayed one), and
// the staleness check skips it until its samples go back that far.
func lagsKnown(t testing.TB, conn *pgrouted.Connector) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		top := conn.Topology()
		known := top.Primary != ""
		for _, h := range top.Hosts {
			if h.Name != top.Primary && h.LagBound == nil {
				known = false
			}
		}
		if known {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a standby's staleness is still unbounded after 45s: %+v", top.Hosts)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// nodeByPort maps inet_server_port() to a node.
func nodeByPort(t testing.TB, port int) *testcluster.Node {
	t.Helper()
	for _, n := range cluster.Nodes() {
		if strings.HasSuffix(n.DirectAddr(), fmt.Sprintf(":%d", port)) {
			return n
		}
	}
	t.Fatalf("no node on port %d", port)
	return nil
}

// ranOn returns the nodes whose server log holds marker: where a statement
// carrying it ran (every statement is logged).
func ranOn(t testing.TB, marker string) []string {
	t.Helper()
	var on []string
	for _, n := range cluster.Nodes() {
		b, err := os.ReadFile(n.LogFile())
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), marker) {
			on = append(on, n.Name())
		}
	}
	return on
}

func mustExec(t testing.TB, ctx context.Context, n *testcluster.Node, sql string) {
	t.Helper()
	if err := n.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
}

// replicated waits until every replica has replayed the primary's current
// position.
func replicated(t testing.TB, ctx context.Context) {
	t.Helper()
	if err := cluster.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
}

// replicatedInserted is replicated for a test whose client reads a write's
// position as pgrouted does, pg_current_wal_insert_lsn(): that counts WAL
// the primary inserted and has not flushed yet (a read's hint-bit images
// under wal_log_hints), which standbys receive only once flushed, at the
// next commit or up to 15 s later (the bgwriter's standby snapshot). When
// some is pending, a transaction ID is committed first, which flushes it.
// Other tests keep replicated: this one leaves a commit on an idle primary.
func replicatedInserted(t testing.TB, ctx context.Context) {
	t.Helper()
	var pending bool
	if err := cluster.Primary().QueryRow(ctx, "SELECT pg_current_wal_insert_lsn() > pg_current_wal_flush_lsn()", nil, &pending); err != nil {
		t.Fatal(err)
	}
	if pending {
		if err := cluster.Primary().Exec(ctx, "SELECT txid_current()"); err != nil {
			t.Fatal(err)
		}
	}
	replicated(t, ctx)
}

// names are the nodes' names in the order of cluster.DSN(), for
// pgrouted_names, so that endpoints read node0, node1, ...
func names() string {
	var ns []string
	ns = append(ns, cluster.Primary().Name())
	for _, r := range cluster.Replicas() {
		ns = append(ns, r.Name())
	}
	return strings.Join(ns, ",")
}
