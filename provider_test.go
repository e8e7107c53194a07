//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/testcluster"
	"github.com/pgrouted/pgrouted/topology"
)

// memberOf is node n as a provider reports it, at the address the DSN
// names.
func memberOf(t testing.TB, n *testcluster.Node, role, state string) topology.Member {
	t.Helper()
	host, port, err := net.SplitHostPort(n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	return topology.Member{Name: n.Name(), Host: host, Port: uint16(p), Role: role, State: state, Lag: -1}
}

// realView is the cluster as it is: the primary leads, the replicas stream.
func realView(t testing.TB) []topology.Member {
	ms := []topology.Member{memberOf(t, cluster.Primary(), topology.MemberLeader, topology.StateRunning)}
	for _, r := range cluster.Replicas() {
		ms = append(ms, memberOf(t, r, topology.MemberReplica, topology.StateStreaming))
	}
	return ms
}

// openManual opens a Connector on the cluster driven by a Manual provider
// that starts with the real view. extra are DSN parameters.
func openManual(t *testing.T, extra ...string) (*sql.DB, *pgrouted.Connector, *routes, *topology.Manual) {
	t.Helper()
	c, conn, rec, m := openManualClient(t, openSQLClientDSN, extra...)
	return c.(sqlClient).DB, conn, rec, m
}

// openManualClient is openManual for a client that open opens.
func openManualClient(t *testing.T, open dsnOpener, extra ...string) (client, *pgrouted.Connector, *routes, *topology.Manual) {
	t.Helper()
	m := topology.NewManual()
	m.SetMembers(realView(t))
	dsn := cluster.DSN() + "&pgrouted_probe_interval=100ms&pgrouted_names=" + names()
	for _, e := range extra {
		dsn += "&" + e
	}
	db, conn, rec := open(t, dsn, func(c *pgrouted.Config) { c.Provider = m })
	return db, conn, rec, m
}

// waitTopology waits until cond holds for conn.Topology(), or fails after
// limit saying what it waited for.
func waitTopology(t *testing.T, conn *pgrouted.Connector, limit time.Duration, what string, cond func(pgrouted.Snapshot) bool) pgrouted.Snapshot {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		s := conn.Topology()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, still not %s: %+v (provider %+v)", limit, what, s, s.Provider)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// insertMarked writes a row carrying a unique marker and returns where
// the write ran (the RouteEvent's endpoint) and its error.
func insertMarked(t *testing.T, ctx context.Context, db *sql.DB, rec *routes, marker string) (string, error) {
	t.Helper()
	q := fmt.Sprintf("INSERT INTO provider_t VALUES ('%s')", marker)
	_, err := db.ExecContext(ctx, q)
	for _, e := range rec.snapshot() {
		if e.Query == q {
			return e.Endpoint, err
		}
	}
	return "", err
}

func TestManualProvider(t *testing.T) {
	ctx := testCtx(t)
	mustExec(t, ctx, cluster.Primary(), "CREATE TABLE IF NOT EXISTS provider_t (v text)")
	primary := cluster.Primary().Name()

	t.Run("names the real primary", func(t *testing.T) {
		db, conn, rec, _ := openManual(t)
		top := conn.Topology()
		if top.Provider == nil || top.Provider.Name != "manual" || top.Provider.Leader != primary || top.Primary != primary {
			t.Fatalf("topology %+v, provider %+v: want the manual provider naming %s, the primary", top, top.Provider, primary)
		}
		marker := fmt.Sprintf("manual-primary-%d", time.Now().UnixNano())
		on, err := insertMarked(t, ctx, db, rec, marker)
		if err != nil || on != primary {
			t.Fatalf("write ran on %q (%v), want %s", on, err, primary)
		}
		if got := ranOn(t, marker); len(got) != 1 || got[0] != primary {
			t.Fatalf("the write's marker is in the logs of %v, want only %s", got, primary)
		}
		// Reads still go to the replicas, once they replayed that write
		// (read-your-writes).
		replicated(t, ctx)
		waitReplicaRoute(t, conn)
		var x int
		if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&x); err != nil {
			t.Fatal(err)
		}
		ev := rec.snapshot()
		if last := ev[len(ev)-1]; last.Primary || last.Endpoint == primary {
			t.Fatalf("a read went to %s (%s), want a replica", last.Endpoint, last.Reason)
		}
	})

	t.Run("names a replica leader", func(t *testing.T) {
		db, conn, rec, m := openManual(t, "pgrouted_write_timeout=1s", "pgrouted_lease=1s")
		replica := cluster.Replicas()[0]
		host, port, _ := net.SplitHostPort(replica.Addr())
		p, _ := strconv.Atoi(port)
		m.SetPrimary(host, uint16(p))
		waitTopology(t, conn, 10*time.Second, "the provider naming "+replica.Name(), func(s pgrouted.Snapshot) bool {
			return s.Provider.Leader == replica.Name() && s.Primary == ""
		})
		marker := fmt.Sprintf("manual-replica-%d", time.Now().UnixNano())
		began := time.Now()
		on, err := insertMarked(t, ctx, db, rec, marker)
		if !errors.Is(err, pgrouted.ErrNoPrimary) {
			t.Fatalf("write with a replica named leader: ran on %q, err %v; want ErrNoPrimary", on, err)
		}
		if waited := time.Since(began); waited < time.Second {
			t.Fatalf("the write failed after %v, before pgrouted_write_timeout (1s)", waited)
		}
		if got := ranOn(t, marker); len(got) != 0 {
			t.Fatalf("the refused write reached %v", got)
		}
	})

	t.Run("cleared, then set again", func(t *testing.T) {
		db, conn, rec, m := openManual(t, "pgrouted_write_timeout=60s")
		m.ClearPrimary()
		waitTopology(t, conn, 10*time.Second, "no primary once cleared", func(s pgrouted.Snapshot) bool {
			return s.Primary == "" && s.Provider.Leader == ""
		})
		type result struct {
			on  string
			err error
			at  time.Time
		}
		done := make(chan result, 1)
		marker := fmt.Sprintf("manual-cleared-%d", time.Now().UnixNano())
		go func() {
			on, err := insertMarked(t, ctx, db, rec, marker)
			done <- result{on, err, time.Now()}
		}()
		// The write waits for a primary: it holds its connection, and has
		// not returned. Then name the primary again.
		inFlight := time.Now().Add(30 * time.Second)
		for db.Stats().InUse == 0 {
			if time.Now().After(inFlight) {
				t.Fatal("the write did not start within 30s")
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond) // it had its chance to run without a primary
		select {
		case r := <-done:
			t.Fatalf("the write returned with no primary named: ran on %q, %v", r.on, r.err)
		default:
		}
		host, port, _ := net.SplitHostPort(cluster.Primary().Addr())
		p, _ := strconv.Atoi(port)
		setAt := time.Now()
		m.SetPrimary(host, uint16(p))
		var r result
		select {
		case r = <-done:
		case <-time.After(90 * time.Second):
			t.Fatal("the waiting write did not finish within 90s of the primary being set again")
		}
		if r.err != nil || r.on != primary {
			t.Fatalf("the waiting write ran on %q (%v), want %s", r.on, r.err, primary)
		}
		if !r.at.After(setAt) {
			t.Fatal("the write finished before the primary was set again: it did not wait")
		}
	})

	t.Run("two leaders", func(t *testing.T) {
		db, conn, rec, m := openManual(t, "pgrouted_write_timeout=500ms")
		before := conn.Topology().ConflictingPrimaries
		ms := realView(t)
		ms[1].Role = topology.MemberLeader
		m.SetMembers(ms)
		top := waitTopology(t, conn, 10*time.Second, "a conflict counted", func(s pgrouted.Snapshot) bool {
			return s.ConflictingPrimaries > before && s.Provider.Conflict
		})
		if top.Primary != "" {
			t.Fatalf("primary %s with two leaders", top.Primary)
		}
		marker := fmt.Sprintf("manual-conflict-%d", time.Now().UnixNano())
		if on, err := insertMarked(t, ctx, db, rec, marker); !errors.Is(err, pgrouted.ErrNoPrimary) {
			t.Fatalf("write with two leaders: ran on %q, err %v; want ErrNoPrimary", on, err)
		}
		if got := ranOn(t, marker); len(got) != 0 {
			t.Fatalf("the refused write reached %v", got)
		}
	})

	t.Run("unavailable past the lease", func(t *testing.T) {
		db, conn, rec, m := openManual(t, "pgrouted_write_timeout=500ms", "pgrouted_lease=1s")
		m.SetUnavailable(errors.New("orchestrator unreachable"))
		// No primary once the provider's lease ran out (a primary probe
		// stalled on a busy machine may clear it sooner: wait for both).
		waitTopology(t, conn, 10*time.Second, "no primary once the provider's lease ran out", func(s pgrouted.Snapshot) bool {
			return s.Primary == "" && s.Provider.LastError != "" && s.Provider.LeaseRemaining == 0
		})
		marker := fmt.Sprintf("manual-unavailable-%d", time.Now().UnixNano())
		if on, err := insertMarked(t, ctx, db, rec, marker); !errors.Is(err, pgrouted.ErrNoPrimary) {
			t.Fatalf("write with the provider unreachable past the lease: ran on %q, err %v; want ErrNoPrimary (never the probes alone)", on, err)
		}
		m.SetUnavailable(nil)
		waitTopology(t, conn, 10*time.Second, "the primary back once the provider answers", func(s pgrouted.Snapshot) bool {
			return s.Primary == primary
		})
		if on, err := insertMarked(t, ctx, db, rec, marker+"-back"); err != nil || on != primary {
			t.Fatalf("write after the provider came back ran on %q (%v), want %s", on, err, primary)
		}
	})

	t.Run("noloadbalance and stopped members serve no reads", func(t *testing.T) {
		db, conn, rec, m := openManual(t, "pgrouted_fallback=primary")
		ms := realView(t)
		ms[1].NoLoadBalance = true
		ms[2].State = "stopped"
		m.SetMembers(ms)
		waitTopology(t, conn, 10*time.Second, "both replicas excluded", func(s pgrouted.Snapshot) bool {
			n := 0
			for _, h := range s.Hosts {
				if h.NoReads {
					n++
				}
			}
			return n == 2
		})
		var x int
		if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&x); err != nil {
			t.Fatal(err)
		}
		ev := rec.snapshot()
		if last := ev[len(ev)-1]; !last.Primary || last.Reason != pgrouted.ReasonNoReplicas {
			t.Fatalf("read ran on %s (%s), want the primary for want of replicas", last.Endpoint, last.Reason)
		}
	})
}

func TestProviderConfigErrors(t *testing.T) {
	cfg, err := pgrouted.ParseConfig(cluster.DSN() + "&pgrouted_topology=patroni&pgrouted_patroni_endpoints=http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Provider = topology.NewManual()
	if _, err := pgrouted.NewConnector(cfg); err == nil {
		t.Error("NewConnector accepted pgrouted_topology=patroni with Config.Provider")
	}
	cfg, err = pgrouted.ParseConfig(cluster.DSN() + "&pgrouted_discover=true")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pgrouted.NewConnector(cfg); err == nil {
		t.Error("NewConnector accepted pgrouted_discover=true without a provider")
	}
}

// dsnOf returns the cluster's DSN naming only nodes (through their fault
// points), with their names.
func dsnOf(t *testing.T, nodes ...*testcluster.Node) string {
	t.Helper()
	all := []string{cluster.Primary().Addr()}
	for _, r := range cluster.Replicas() {
		all = append(all, r.Addr())
	}
	var addrs, names []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
		names = append(names, n.Name())
	}
	full := cluster.DSN()
	sub := strings.Replace(full, "@"+strings.Join(all, ",")+"/", "@"+strings.Join(addrs, ",")+"/", 1)
	if sub == full {
		t.Fatalf("cannot take hosts out of the cluster's DSN")
	}
	return sub + "&pgrouted_names=" + strings.Join(names, ",")
}

// markedReadsOn runs n plain reads carrying marker and returns the nodes whose
// logs hold it.
func markedReadsOn(t *testing.T, ctx context.Context, db *sql.DB, n int, marker string) []string {
	t.Helper()
	for k := 0; k < n; k++ {
		var s string
		if err := db.QueryRowContext(ctx, "SELECT '"+marker+"'").Scan(&s); err != nil {
			t.Fatal(err)
		}
	}
	return ranOn(t, marker)
}

func TestDiscover(t *testing.T) {
	ctx := testCtx(t)
	primary, replicas := cluster.Primary(), cluster.Replicas()
	named, unnamed := replicas[0], replicas[1]
	m := topology.NewManual()
	// The named replica serves no reads (noloadbalance): the member the
	// DSN does not name is the only one that can.
	view := func(withUnnamed bool) []topology.Member {
		ms := []topology.Member{memberOf(t, primary, topology.MemberLeader, topology.StateRunning)}
		nb := memberOf(t, named, topology.MemberReplica, topology.StateStreaming)
		nb.NoLoadBalance = true
		ms = append(ms, nb)
		if withUnnamed {
			ms = append(ms, memberOf(t, unnamed, topology.MemberReplica, topology.StateStreaming))
		}
		return ms
	}
	m.SetMembers(view(true))
	dsn := dsnOf(t, primary, named) + "&pgrouted_probe_interval=100ms&pgrouted_discover=true&pgrouted_latency_window=off"
	db, conn, rec := openDSN(t, dsn, func(c *pgrouted.Config) { c.Provider = m })

	top := conn.Topology()
	var found *pgrouted.HostInfo
	for i := range top.Hosts {
		if top.Hosts[i].Name == unnamed.Name() {
			found = &top.Hosts[i]
		}
	}
	if len(top.Hosts) != 3 || found == nil || !found.Discovered || found.Address != unnamed.Addr() || found.Role != "standby" {
		t.Fatalf("hosts %+v: want the DSN's two and %s discovered at %s as a standby", top.Hosts, unnamed.Name(), unnamed.Addr())
	}
	marker := fmt.Sprintf("discover-%d", time.Now().UnixNano())
	if on := markedReadsOn(t, ctx, db, 5, marker); len(on) != 1 || on[0] != unnamed.Name() {
		t.Fatalf("reads ran on %v, want only the discovered %s", on, unnamed.Name())
	}
	for _, e := range rec.snapshot() {
		if strings.Contains(e.Query, marker) && e.Endpoint != unnamed.Name() {
			t.Fatalf("a read's route event names %s (%s), want %s", e.Endpoint, e.Reason, unnamed.Name())
		}
	}
	if n := conn.Stats().Statements[unnamed.Name()][pgrouted.OpRead]; n < 5 {
		t.Fatalf("Stats counts %d reads on %s, want at least 5", n, unnamed.Name())
	}

	// The member leaves: the host is dropped, reads fall back to the
	// primary.
	m.SetMembers(view(false))
	waitTopology(t, conn, 10*time.Second, unnamed.Name()+" dropped", func(s pgrouted.Snapshot) bool {
		return len(s.Hosts) == 2
	})
	marker = fmt.Sprintf("discover-left-%d", time.Now().UnixNano())
	if on := markedReadsOn(t, ctx, db, 3, marker); len(on) != 1 || on[0] != primary.Name() {
		t.Fatalf("reads after %s left ran on %v, want only the primary", unnamed.Name(), on)
	}

	// It comes back: a new host of the same name takes reads again.
	m.SetMembers(view(true))
	waitTopology(t, conn, 20*time.Second, unnamed.Name()+" back and probed", func(s pgrouted.Snapshot) bool {
		for _, h := range s.Hosts {
			if h.Name == unnamed.Name() && h.Role == "standby" && h.ReplayLSN != "" {
				return true
			}
		}
		return false
	})
	waitReplicaRoute(t, conn)
	marker = fmt.Sprintf("discover-back-%d", time.Now().UnixNano())
	if on := markedReadsOn(t, ctx, db, 3, marker); len(on) != 1 || on[0] != unnamed.Name() {
		t.Fatalf("reads after %s came back ran on %v, want only it", unnamed.Name(), on)
	}
	if n := conn.Stats().Statements[unnamed.Name()][pgrouted.OpRead]; n < 8 {
		t.Fatalf("Stats counts %d reads on %s across both incarnations, want at least 8", n, unnamed.Name())
	}
	// Writes still go to the leader.
	mustExec(t, ctx, primary, "CREATE TABLE IF NOT EXISTS provider_t (v text)")
	if on, err := insertMarked(t, ctx, db, rec, marker+"-w"); err != nil || on != primary.Name() {
		t.Fatalf("write ran on %q (%v), want %s", on, err, primary.Name())
	}
}

// TestDiscoverChurn: reads keep succeeding while a discovered member comes
// and goes (under -race, the host table and the snapshots are read while
// the tracker grows them).
func TestDiscoverChurn(t *testing.T) {
	ctx := testCtx(t)
	primary, replicas := cluster.Primary(), cluster.Replicas()
	m := topology.NewManual()
	base := []topology.Member{
		memberOf(t, primary, topology.MemberLeader, topology.StateRunning),
		memberOf(t, replicas[0], topology.MemberReplica, topology.StateStreaming),
	}
	extra := memberOf(t, replicas[1], topology.MemberReplica, topology.StateStreaming)
	m.SetMembers(append(base, extra))
	dsn := dsnOf(t, primary, replicas[0]) + "&pgrouted_probe_interval=50ms&pgrouted_discover=true&pgrouted_latency_window=off"
	db, conn, _ := openDSN(t, dsn, func(c *pgrouted.Config) { c.Provider = m })

	stop := make(chan struct{})
	errs := make(chan error, 4)
	var reads [4]int
	for w := range 4 {
		go func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				var x int
				if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&x); err != nil {
					errs <- err
					return
				}
				reads[w]++
				_ = conn.Topology()
				_ = conn.Stats()
			}
		}()
	}
	for k := 0; k < 6; k++ {
		with := k%2 == 1
		if with {
			m.SetMembers(append(base, extra))
		} else {
			m.SetMembers(base)
		}
		waitTopology(t, conn, 10*time.Second, fmt.Sprintf("round %d applied", k), func(s pgrouted.Snapshot) bool {
			return (len(s.Hosts) == 3) == with
		})
	}
	close(stop)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("a read failed while the member came and went: %v", err)
		}
	}
	total := 0
	for _, n := range reads {
		total += n
	}
	if total == 0 {
		t.Fatal("no read ran during the churn")
	}
}
