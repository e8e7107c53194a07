//go:build unix

package promcollector_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/internal/testhelp"
	"github.com/pgrouted/pgrouted/promcollector"
	"github.com/pgrouted/pgrouted/testcluster"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// cluster is this package's primary with two streaming replicas, started
// once. Tests that break it restore it.
var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	testcluster.Main(m, testcluster.Options{
		Replicas: 2,
		Logf:     testhelp.Logf,
	}, func(c *testcluster.Cluster) { cluster = c })
}

// testCtx is a context for one test: it ends after 3 minutes or with the test.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	return testhelp.Context(t, 3*time.Minute)
}

// restore puts the cluster back when the test ends, for a test that breaks it.
func restore(t *testing.T) {
	t.Helper()
	testhelp.Restore(t, cluster)
}

// marker is a password that must appear in no metric. Trust authentication
// ignores it.
const marker = "hunter2marker"

// open opens a *sql.DB through a Connector whose hosts are named node0,
// node1, node2 (primary first), with a marker password in the DSN, and
// registers its Collector in a pedantic registry.
func open(t *testing.T) (*sql.DB, *pgrouted.Connector, *prometheus.Registry) {
	t.Helper()
	var names []string
	names = append(names, cluster.Primary().Name())
	for _, r := range cluster.Replicas() {
		names = append(names, r.Name())
	}
	// An open circuit's probes back off to 2s at most: the tests wait for a
	// killed host to come back, and the backoff reached otherwise depends
	// on how long it was down.
	dsn := strings.Replace(cluster.DSN(), "postgres@", "postgres:"+marker+"@", 1) +
		"&pgrouted_probe_interval=100ms&pgrouted_lease=5s&pgrouted_write_timeout=20s&pgrouted_circuit_max_backoff=2s&pgrouted_names=" + strings.Join(names, ",")
	cfg, err := pgrouted.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promcollector.New(conn))
	// The first probes are done: the primary is known (else a failover
	// right away would be the first primary this Connector sees, epoch 1),
	// and reads go to a replica.
	waitFor(t, 45*time.Second, "the primary known and reads routed to a replica", func() bool {
		d, err := conn.Explain(context.Background(), "SELECT 1")
		return err == nil && !d.Primary && d.Endpoint != "" && conn.Topology().Primary == cluster.Primary().Name()
	})
	return db, conn, reg
}

// waitFor polls ok every 20ms until it holds, or fails the test after d.
func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	testhelp.WaitFor(t, d, 20*time.Millisecond, what, ok)
}

// value returns the value of the series name{labels} in reg, and whether
// it exists.
func value(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

func mustValue(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	v, ok := value(t, reg, name, labels...)
	if !ok {
		t.Fatalf("no series %s%v", name, labels)
	}
	return v
}

// replicated waits until every replica has replayed the primary's position.
func replicated(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := cluster.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestStatementsCounted: the counters follow the statements run.
func TestStatementsCounted(t *testing.T) {
	ctx := testCtx(t)
	if err := cluster.Primary().Exec(ctx, "CREATE TABLE IF NOT EXISTS pc (id int)"); err != nil {
		t.Fatal(err)
	}
	replicated(t, ctx)
	db, _, reg := open(t)
	reads := func() float64 {
		var n float64
		for _, h := range []string{"node0", "node1", "node2"} {
			n += mustValue(t, reg, "pgrouted_statements_total", "endpoint", h, "op", "read")
		}
		return n
	}
	replicaReads := func() float64 {
		return mustValue(t, reg, "pgrouted_statements_total", "endpoint", "node1", "op", "read") +
			mustValue(t, reg, "pgrouted_statements_total", "endpoint", "node2", "op", "read")
	}
	writes0 := mustValue(t, reg, "pgrouted_statements_total", "endpoint", "node0", "op", "write")
	reads0, replica0 := reads(), replicaReads()
	if writes0 != 0 || reads0 != 0 {
		t.Fatalf("a new Connector counts %v writes, %v reads", writes0, reads0)
	}
	for i := 0; i < 10; i++ {
		if _, err := db.ExecContext(ctx, "INSERT INTO pc VALUES ($1)", i); err != nil {
			t.Fatal(err)
		}
	}
	if got := mustValue(t, reg, "pgrouted_statements_total", "endpoint", "node0", "op", "write"); got != 10 {
		t.Fatalf("writes on node0: %v, want 10", got)
	}
	replicated(t, ctx)
	for i := 0; i < 20; i++ {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM pc").Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	if got := reads(); got != 20 {
		t.Fatalf("reads: %v, want 20", got)
	}
	if got := replicaReads(); got <= replica0 {
		t.Fatalf("replicas served no read: %v", got)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM pc"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := mustValue(t, reg, "pgrouted_statements_total", "endpoint", "node0", "op", "tx"); got < 1 {
		t.Fatalf("transactions on node0: %v", got)
	}
	before := mustValue(t, reg, "pgrouted_route_errors_total", "reason", string(pgrouted.ReasonWriteOnReplica))
	if _, err := db.ExecContext(pgrouted.WithRoute(ctx, pgrouted.Replica), "DELETE FROM pc"); err == nil {
		t.Fatal("a write forced to a replica ran")
	}
	if got := mustValue(t, reg, "pgrouted_route_errors_total", "reason", string(pgrouted.ReasonWriteOnReplica)); got != before+1 {
		t.Fatalf("write-on-replica errors: %v, want %v", got, before+1)
	}
	for _, h := range []string{"node0", "node1", "node2"} {
		if v := mustValue(t, reg, "pgrouted_healthy", "endpoint", h); v != 1 {
			t.Errorf("%s healthy = %v", h, v)
		}
		if v := mustValue(t, reg, "pgrouted_circuit_open", "endpoint", h); v != 0 {
			t.Errorf("%s circuit_open = %v", h, v)
		}
		if v := mustValue(t, reg, "pgrouted_probe_rtt_seconds", "endpoint", h); v <= 0 || v > 5 {
			t.Errorf("%s rtt = %v s", h, v)
		}
	}
	if v := mustValue(t, reg, "pgrouted_role", "endpoint", "node0", "role", "primary"); v != 1 {
		t.Errorf("node0 is not the primary: %v", v)
	}
	if v := mustValue(t, reg, "pgrouted_current_primary", "endpoint", "node0"); v != 1 {
		t.Errorf("node0 is not the current primary: %v", v)
	}
	if v := mustValue(t, reg, "pgrouted_role", "endpoint", "node1", "role", "standby"); v != 1 {
		t.Errorf("node1 is not a standby: %v", v)
	}
	if v := mustValue(t, reg, "pgrouted_primary_epoch"); v != 1 {
		t.Errorf("epoch %v", v)
	}
	if v := mustValue(t, reg, "pgrouted_primary_lease_remaining_seconds"); v <= 0 {
		t.Errorf("lease %v", v)
	}
	if v := mustValue(t, reg, "pgrouted_conflicting_primaries_total"); v != 0 {
		t.Errorf("conflicts %v", v)
	}
	for _, h := range []string{"node1", "node2"} {
		if _, ok := value(t, reg, "pgrouted_replica_lag_bytes", "endpoint", h); !ok {
			t.Errorf("no lag bytes for %s", h)
		}
		if _, ok := value(t, reg, "pgrouted_replica_lag_bound_seconds", "endpoint", h); !ok {
			t.Errorf("no lag bound for %s", h)
		}
	}
	if _, ok := value(t, reg, "pgrouted_replica_lag_bytes", "endpoint", "node0"); ok {
		t.Errorf("the primary has a replica lag")
	}
}

// TestLagAndCircuit: a paused replica's lag grows in bytes and in time; a
// killed one's circuit opens and it turns unhealthy, and both come back.
func TestLagAndCircuit(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	if err := cluster.Primary().Exec(ctx, "CREATE TABLE IF NOT EXISTS pl (id int, pad text)"); err != nil {
		t.Fatal(err)
	}
	db, _, reg := open(t)
	node1, node2 := cluster.Node(1), cluster.Node(2)

	if err := node1.PauseReplay(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if _, err := db.ExecContext(ctx, "INSERT INTO pl SELECT g, repeat('x', 100) FROM generate_series(1, 100) g"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 45*time.Second, "node1's lag in bytes and seconds", func() bool {
		b, ok1 := value(t, reg, "pgrouted_replica_lag_bytes", "endpoint", "node1")
		s, ok2 := value(t, reg, "pgrouted_replica_lag_bound_seconds", "endpoint", "node1")
		return ok1 && ok2 && b > 100*1024 && s > 0.5
	})
	if err := node1.ResumeReplay(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 45*time.Second, "node1 caught up", func() bool {
		b, ok := value(t, reg, "pgrouted_replica_lag_bytes", "endpoint", "node1")
		return ok && b < 100*1024
	})

	if err := node2.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 45*time.Second, "node2's circuit open", func() bool {
		return mustValue(t, reg, "pgrouted_circuit_open", "endpoint", "node2") == 1 &&
			mustValue(t, reg, "pgrouted_healthy", "endpoint", "node2") == 0
	})
	if _, ok := value(t, reg, "pgrouted_replica_lag_bytes", "endpoint", "node2"); ok {
		t.Errorf("an unhealthy replica has a known lag")
	}
	if v := mustValue(t, reg, "pgrouted_circuit_open", "endpoint", "node1"); v != 0 {
		t.Errorf("node1's circuit open: %v", v)
	}
	if err := node2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "node2's circuit closed", func() bool {
		return mustValue(t, reg, "pgrouted_circuit_open", "endpoint", "node2") == 0 &&
			mustValue(t, reg, "pgrouted_healthy", "endpoint", "node2") == 1
	})
}

// TestFailoverMetrics: after a promotion the epoch and the failover counter
// move, and the roles follow.
func TestFailoverMetrics(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	db, _, reg := open(t)
	old, promoted, other := cluster.Node(0), cluster.Node(1), cluster.Node(2)
	if v := mustValue(t, reg, "pgrouted_failovers_total"); v != 0 {
		t.Fatalf("failovers before any: %v", v)
	}
	if err := old.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := promoted.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.Follow(ctx, promoted); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS pf (id int)"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 45*time.Second, "the new primary in the metrics", func() bool {
		return mustValue(t, reg, "pgrouted_current_primary", "endpoint", "node1") == 1
	})
	if v := mustValue(t, reg, "pgrouted_role", "endpoint", "node1", "role", "primary"); v != 1 {
		t.Errorf("node1's role is not primary: %v", v)
	}
	if v := mustValue(t, reg, "pgrouted_primary_epoch"); v != 2 {
		t.Errorf("epoch %v, want 2", v)
	}
	if v := mustValue(t, reg, "pgrouted_failovers_total"); v != 1 {
		t.Errorf("failovers %v, want 1", v)
	}
	if v := mustValue(t, reg, "pgrouted_statements_total", "endpoint", "node1", "op", "write"); v < 1 {
		t.Errorf("writes on node1 %v", v)
	}
	if v := mustValue(t, reg, "pgrouted_healthy", "endpoint", "node0"); v != 0 {
		t.Errorf("stopped node0 healthy: %v", v)
	}
	// A host that does not answer keeps its last role: node0 was last
	// seen a primary, but it takes no writes.
	if v := mustValue(t, reg, "pgrouted_current_primary", "endpoint", "node0"); v != 0 {
		t.Errorf("stopped node0 still the current primary")
	}
}

// TestExpositionHasNoPassword scrapes the metrics over HTTP, as Prometheus
// would, and looks for the DSN's password.
func TestExpositionHasNoPassword(t *testing.T) {
	ctx := testCtx(t)
	db, _, reg := open(t)
	var one int
	if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
	status, body := scrape(t, reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
	if status != 200 || !strings.Contains(body, `pgrouted_statements_total{endpoint="`) {
		t.Fatalf("scrape: %d\n%s", status, body)
	}
	if strings.Contains(body, marker) {
		t.Fatalf("the password is in the metrics:\n%s", body)
	}
	if n, err := testutil.GatherAndCount(reg, "pgrouted_healthy"); err != nil || n != 3 {
		t.Fatalf("pgrouted_healthy: %d series, %v", n, err)
	}
}

// TestPoolMetricsLive: a Collector over a *pgrouted.Pool exports the
// primary sessions' figures (Pool.Stat's Primary) on the primary's
// endpoint, under pool_max_conns, beside the replica pools', each between
// what Pool.Stat said before and after the scrape.
func TestPoolMetricsLive(t *testing.T) {
	ctx := testCtx(t)
	primary := cluster.Primary().Name()
	names := []string{primary}
	for _, r := range cluster.Replicas() {
		names = append(names, r.Name())
	}
	pool, err := pgrouted.NewPool(ctx, cluster.DSN()+"&pool_max_conns=5&pgrouted_probe_interval=100ms&pgrouted_names="+strings.Join(names, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	waitFor(t, 45*time.Second, "the primary known", func() bool { return pool.Topology().Primary == primary })
	for i := 0; i < 3; i++ {
		if _, err := pool.Exec(ctx, "SELECT pg_catalog.txid_current()"); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promcollector.New(pool))
	primaryOf := func(st []pgrouted.HostPool) *pgrouted.PoolInfo {
		for _, hp := range st {
			if hp.Primary != nil {
				return hp.Primary
			}
		}
		t.Fatalf("Pool.Stat gives no primary sessions: %+v", st)
		return nil
	}
	before := primaryOf(pool.Stat())
	acquires := mustValue(t, reg, "pgrouted_primary_pool_acquires_total", "endpoint", primary)
	newConns := mustValue(t, reg, "pgrouted_primary_pool_new_connections_total", "endpoint", primary)
	after := primaryOf(pool.Stat())
	if acquires < float64(before.AcquireCount) || acquires > float64(after.AcquireCount) || acquires < 3 {
		t.Errorf("pgrouted_primary_pool_acquires_total = %v; Pool.Stat said %d, then %d", acquires, before.AcquireCount, after.AcquireCount)
	}
	if newConns < float64(before.NewConnsCount) || newConns > float64(after.NewConnsCount) || newConns < 1 {
		t.Errorf("pgrouted_primary_pool_new_connections_total = %v; Pool.Stat said %d, then %d", newConns, before.NewConnsCount, after.NewConnsCount)
	}
	if v := mustValue(t, reg, "pgrouted_primary_pool_max_connections", "endpoint", primary); v != 5 {
		t.Errorf("pgrouted_primary_pool_max_connections = %v, want pool_max_conns 5", v)
	}
	if n, err := testutil.GatherAndCount(reg, "pgrouted_primary_pool_connections"); err != nil || n != 3 {
		t.Errorf("pgrouted_primary_pool_connections: %d series (want idle, acquired, constructing of the primary), %v", n, err)
	}
	if n, err := testutil.GatherAndCount(reg, "pgrouted_replica_pool_acquires_total"); err != nil || n != len(names) {
		t.Errorf("pgrouted_replica_pool_acquires_total: %d series (want one per host), %v", n, err)
	}
}
