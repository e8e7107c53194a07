//go:build unix

package pgrouted_test

import (
	"context"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/topology"
)

// ordinaryRole creates (once) a LOGIN role that is no superuser and is a
// member of no predefined role (no pg_monitor, no pg_read_all_stats, no
// pg_read_server_files), grants it SELECT and INSERT on tables, and, when
// history is set, EXECUTE on pg_read_file(text), the grant that reads the
// timeline history. It checks the role has nothing more.
func ordinaryRole(t *testing.T, ctx context.Context, name string, history bool, tables ...string) {
	t.Helper()
	p := cluster.Primary()
	mustExec(t, ctx, p, `DO $$ BEGIN
		IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '`+name+`') THEN CREATE ROLE `+name+` LOGIN; END IF;
	END $$`)
	for _, tbl := range tables {
		mustExec(t, ctx, p, "GRANT SELECT, INSERT ON "+tbl+" TO "+name)
	}
	if history {
		mustExec(t, ctx, p, "GRANT EXECUTE ON FUNCTION pg_read_file(text) TO "+name)
	} else {
		mustExec(t, ctx, p, "REVOKE EXECUTE ON FUNCTION pg_read_file(text) FROM "+name)
	}
	var super bool
	var member int
	if err := p.QueryRow(ctx, `SELECT r.rolsuper, (SELECT count(*) FROM pg_auth_members m WHERE m.member = r.oid)
		FROM pg_roles r WHERE r.rolname = $1`, []any{name}, &super, &member); err != nil {
		t.Fatal(err)
	}
	if super || member != 0 {
		t.Fatalf("role %s: superuser %v, member of %d roles; want an ordinary role", name, super, member)
	}
	replicated(t, ctx)
}

// asRole is the cluster's DSN for user, with extra parameters.
func asRole(t *testing.T, user string, extra ...string) string {
	t.Helper()
	u, err := url.Parse(cluster.DSN() + "&pgrouted_probe_interval=100ms&pgrouted_names=" + names())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(user)
	s := u.String()
	for _, e := range extra {
		s += "&" + e
	}
	return s
}

// missingReported checks the connector's report of what the role lacks:
// every host lists want in Topology, and the log has one line per grant,
// not one per probe.
func missingReported(t *testing.T, conn *pgrouted.Connector, logs *syncBuffer, want ...string) {
	t.Helper()
	// Many probes (100 ms apart) after the first report.
	time.Sleep(time.Second)
	for _, h := range conn.Topology().Hosts {
		if !h.Healthy {
			continue
		}
		if !slices.Equal(h.MissingPrivileges, want) {
			t.Errorf("%s: Topology's missingPrivileges %q, want %q", h.Name, h.MissingPrivileges, want)
		}
	}
	text := logs.String()
	if n := strings.Count(text, "lacks a privilege"); n != len(want) {
		t.Errorf("%d log lines on missing privileges, want one for each of %q:\n%s", n, want, text)
	}
	for _, g := range want {
		if !strings.Contains(text, g) {
			t.Errorf("the log does not name %q:\n%s", g, text)
		}
	}
}

// TestOrdinaryRole: an application role with only table grants gets the
// routing (reads on replicas, writes on the primary), read-your-writes
// (by the probes' positions, the replica check and the replica wait) and
// both lag gates, and is told once what it lacks.
func TestOrdinaryRole(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS priv_rows; CREATE TABLE priv_rows (id int)")
	ordinaryRole(t, ctx, "app_ordinary", false, "priv_rows")
	logs := &syncBuffer{}
	db, conn, rec := openDSN(t, asRole(t, "app_ordinary", "pgrouted_replica_wait=10s"), func(cfg *pgrouted.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	replicasReady(t, conn)

	// Routing, and where each statement really ran.
	if _, err := db.ExecContext(ctx, "INSERT INTO priv_rows VALUES (1) /* priv-write */"); err != nil {
		t.Fatal(err)
	}
	if on := ranOn(t, "priv-write"); len(on) != 1 || on[0] != "node0" {
		t.Fatalf("the write ran on %v, want node0", on)
	}
	replicated(t, ctx)
	untilReplica(t, ctx, sqlClient{db}, rec, "SELECT count(*) FROM priv_rows /* priv-read */", 1)
	if on := ranOn(t, "priv-read"); !slices.Contains(on, "node1") && !slices.Contains(on, "node2") {
		t.Fatalf("no read ran on a standby: %v", on)
	}

	// Read-your-writes with the replicas 300 ms behind: every read-back
	// sees its row, and the replica wait serves some of them.
	for _, r := range cluster.Replicas() {
		if err := r.ReplicationFault().Latency(300 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	onReplica := 0
	for i := 10; i < 20; i++ {
		if !writeReadBack(t, ctx, sqlClient{db}, rec, "priv_rows", i).Primary {
			onReplica++
		}
	}
	if st := conn.Stats(); onReplica == 0 || st.ReplicaWaits == 0 {
		t.Fatalf("%d read-backs on a replica, %d replica waits: the wait serves none as an ordinary role", onReplica, st.ReplicaWaits)
	}
	// Without the wait, a read-back goes to the primary (the replicas
	// lack the row) or to a replica that checked it has it.
	sctx := pgrouted.WithReplicaWait(pgrouted.WithSession(ctx, pgrouted.NewSession()), 0)
	for i := 20; i < 25; i++ {
		if ev := writeReadBack(t, sctx, sqlClient{db}, rec, "priv_rows", i); !ev.Primary && ev.Reason != pgrouted.ReasonCheck && ev.Reason != pgrouted.ReasonReplica {
			t.Fatalf("read-back on %s, reason %s", ev.Endpoint, ev.Reason)
		}
	}
	for _, r := range cluster.Replicas() {
		if err := r.ReplicationFault().Heal(); err != nil {
			t.Fatal(err)
		}
	}

	missingReported(t, conn, logs, topology.GrantReadFile, topology.GrantReadAllStats)
}

// TestOrdinaryRoleLagGates: the time and byte budgets close on a paused
// replica and open again after it resumes, as an ordinary role.
func TestOrdinaryRoleLagGates(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	ordinaryRole(t, ctx, "app_ordinary", false)
	for _, tc := range []struct {
		budget string
		pad    int
	}{{"pgrouted_max_lag=2s", 10}, {"pgrouted_max_lag=256KB", 2000}} {
		t.Run(tc.budget, func(t *testing.T) {
			db, _, rec := openDSN(t, asRole(t, "app_ordinary", tc.budget), nil)
			paused := cluster.Node(1)
			keepWriting(t, tc.pad)
			waitReads(t, db, rec, 10*time.Second, "reads on node1", func(on map[string]int) bool { return on["node1"] > 0 })
			if err := paused.PauseReplay(ctx); err != nil {
				t.Fatal(err)
			}
			waitReads(t, db, rec, 20*time.Second, "node1 excluded", func(on map[string]int) bool { return on["node1"] == 0 && on["node2"] > 0 })
			if err := paused.ResumeReplay(ctx); err != nil {
				t.Fatal(err)
			}
			waitReads(t, db, rec, 20*time.Second, "node1 back", func(on map[string]int) bool { return on["node1"] > 0 })
		})
	}
}

// TestOrdinaryRoleFailover: an ordinary role follows a failover, and its
// read-your-writes across it holds with and without the grant that reads
// the timeline history. With it, a write the old primary acknowledged and
// no standby received is reported lost; without it, the write is reported
// as possibly lost and read from the new primary until the new timeline's
// position is known. Either way reads go back to the replicas. Through
// the driver and through the Pool.
func TestOrdinaryRoleFailover(t *testing.T) {
	forEachClientDSN(t, testOrdinaryRoleFailover)
}

func testOrdinaryRoleFailover(t *testing.T, open dsnOpener) {
	for _, history := range []bool{true, false} {
		name := map[bool]string{true: "history", false: "no-history"}[history]
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			restore(t)
			role := "app_" + strings.ReplaceAll(name, "-", "_")
			mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS priv_fail; CREATE TABLE priv_fail (id int)")
			ordinaryRole(t, ctx, role, history, "priv_fail")
			logs := &syncBuffer{}
			db, conn, rec := open(t, asRole(t, role), func(cfg *pgrouted.Config) {
				cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
			})
			sctx := pgrouted.WithSession(ctx, pgrouted.NewSession())
			writeNoStandbyGets(t, sctx, db, "INSERT INTO priv_fail VALUES (1)")
			failOver(t, ctx, conn, true)
			var n int
			if err := db.QueryRowContext(sctx, "SELECT count(*) FROM priv_fail").Scan(&n); err != nil || n != 0 {
				t.Fatalf("read after the failover: %d, %v; want 0 (the write is gone)", n, err)
			}
			ev := lastRead(t, rec)
			if history {
				if !ev.WriteLost || conn.Stats().LostWrites != 1 || !strings.Contains(logs.String(), "was lost with the old primary") {
					t.Fatalf("the lost write was not reported: %+v, stats %+v, logs %q", ev, conn.Stats(), logs.String())
				}
			} else {
				if ev.WriteLost || !ev.Primary || ev.Endpoint != "node1" || ev.Reason != pgrouted.ReasonPositionUnknown {
					t.Fatalf("first read after the failover: %+v (lost %v), want the new primary (position-unknown)", ev.Decision, ev.WriteLost)
				}
				if conn.Stats().TimelineResets == 0 || !strings.Contains(logs.String(), "may have been lost") || strings.Contains(logs.String(), "was lost") {
					t.Fatalf("the possible loss was not reported as such: stats %+v, logs %q", conn.Stats(), logs.String())
				}
			}
			untilReplica(t, sctx, db, rec, "SELECT count(*) FROM priv_fail", 0)
			want := []string{topology.GrantReadAllStats}
			if !history {
				want = []string{topology.GrantReadFile, topology.GrantReadAllStats}
			}
			missingReported(t, conn, logs, want...)
		})
	}
}

// TestOrdinaryRoleStandbyTimeline: without pg_read_all_stats a standby
// that followed the promoted one is known on the new timeline only from
// its next restartpoint. Until then the session's reads (whose position
// moved to the new timeline) run on the new primary and see their write;
// after it they go back to the standby.
func TestOrdinaryRoleStandbyTimeline(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS priv_tl; CREATE TABLE priv_tl (id int)")
	ordinaryRole(t, ctx, "app_history", true, "priv_tl")
	db, conn, rec := openDSN(t, asRole(t, "app_history"), nil)
	sctx := pgrouted.WithSession(ctx, pgrouted.NewSession())
	if _, err := db.ExecContext(sctx, "INSERT INTO priv_tl VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	// Every WAL the Session's position (the insert position after the
	// write) counts reaches the standbys before the failover: else the
	// position may lie past the new timeline's switch point and the write
	// be taken for lost (a fresh-clone run saw "lost true" under load).
	replicatedInserted(t, ctx)
	failOver(t, ctx, conn, false)
	top := conn.Topology()
	t.Logf("after the failover: node1 timeline %d, node2 (followed, not rebuilt) timeline %d", top.Hosts[1].Timeline, top.Hosts[2].Timeline)
	for range 5 {
		var n int
		if err := db.QueryRowContext(sctx, "SELECT count(*) FROM priv_tl").Scan(&n); err != nil || n != 1 {
			t.Fatalf("read after the failover: %d, %v; want 1", n, err)
		}
		if ev := lastRead(t, rec); ev.WriteLost || (!ev.Primary && conn.Topology().Hosts[2].Timeline < top.Hosts[1].Timeline) {
			t.Fatalf("read on %s (lost %v) while node2 is seen on an older timeline", ev.Endpoint, ev.WriteLost)
		}
	}
	// The restartpoint: a checkpoint on the new primary, replayed, then
	// one on the standby.
	mustExec(t, ctx, cluster.Node(1), "CHECKPOINT")
	lsn, err := cluster.Node(1).CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Node(2).WaitReplayed(ctx, lsn); err != nil {
		t.Fatal(err)
	}
	mustExec(t, ctx, cluster.Node(2), "CHECKPOINT")
	untilReplica(t, sctx, sqlClient{db}, rec, "SELECT count(*) FROM priv_tl", 1)
	if h := conn.Topology().Hosts[2]; h.Timeline != top.Hosts[1].Timeline {
		t.Fatalf("node2 seen on timeline %d after its restartpoint, want %d", h.Timeline, top.Hosts[1].Timeline)
	}
}
