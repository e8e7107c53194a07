//go:build unix

package topology_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgrouted/pgrouted/testcluster"
	"github.com/pgrouted/pgrouted/topology"
)

// TestProbeThroughPooler probes node0 directly and node1 and node2 through
// a PgBouncer in transaction mode: the probes see the pooler in front of
// node1 and node2 only, and when node1 restarts between two probes under
// the probe connection (which the pooler keeps open), the next probe sees another server process and
// another server start: the host's connection incarnation (Conn) moves on,
// as it does after a reconnection, so that nothing learned of the old
// server process is trusted.
func TestProbeThroughPooler(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	ps, err := cluster.StartPoolers(ctx, testcluster.PoolTransaction)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	hs := hosts(t, "", 0, 1, 2)
	for i := 1; i <= 2; i++ {
		cfg, err := pgconn.ParseConfig(ps.Of(cluster.Node(i)).DSN())
		if err != nil {
			t.Fatal(err)
		}
		hs[i].Config, hs[i].Addr = cfg, ps.Of(cluster.Node(i)).Addr()
	}
	// Probes far apart: node1 restarts between two of them, and the probe
	// after it (asked for with ProbeNow) runs on the same connection. A
	// probe that fails (one during the restart) closes its connection.
	top := start(t, hs, topology.Options{Interval: time.Minute})
	s, _ := waitFor(t, top, 15*time.Second, "every host probed", func(s *topology.Snapshot) bool {
		return rolesKnown(s) && s.Hosts[0].Healthy && s.Hosts[1].Healthy && s.Hosts[2].Healthy
	})
	if s.Hosts[0].Pooler || !s.Hosts[1].Pooler || !s.Hosts[2].Pooler {
		t.Fatalf("Pooler = %v, %v, %v; want false (direct), true, true (through PgBouncer)", s.Hosts[0].Pooler, s.Hosts[1].Pooler, s.Hosts[2].Pooler)
	}
	if s.Hosts[1].BackendSwitched {
		t.Fatal("node1: BackendSwitched before anything moved the probe to another server process")
	}
	conn := s.Hosts[1].Conn
	if err := cluster.Node(1).Restart(ctx); err != nil {
		t.Fatal(err)
	}
	top.ProbeNow(1)
	s, _ = waitFor(t, top, 15*time.Second, "node1 probed after its restart", func(s *topology.Snapshot) bool {
		return s.Hosts[1].Healthy && s.Hosts[1].Conn != conn
	})
	if !s.Hosts[1].BackendSwitched {
		t.Fatal("node1: the probe connection did not survive the server's restart (BackendSwitched is false): the pooler closed it, or the probe reconnected")
	}
	if !s.Hosts[1].Pooler || s.Hosts[1].Role != topology.RoleStandby {
		t.Fatalf("node1 after its restart: %+v", s.Hosts[1])
	}
}
