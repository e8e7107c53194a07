//go:build unix

package testcluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgrouted/pgrouted/testcluster"
)

// startPoolers starts a PgBouncer in front of each node of c, closed when
// the test ends. A missing pgbouncer fails the test with the command that
// installs it.
func startPoolers(t *testing.T, ctx context.Context, c *testcluster.Cluster, mode testcluster.PoolMode) *testcluster.Poolers {
	t.Helper()
	ps, err := c.StartPoolers(ctx, mode)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ps.Close(); err != nil {
			t.Errorf("close poolers: %v", err)
		}
	})
	return ps
}

// pools returns the admin console's SHOW POOLS row of database db: the
// clients and the server connections linked to them.
func pools(t *testing.T, ctx context.Context, p *testcluster.Pooler, db string) (clActive, svActive int) {
	t.Helper()
	admin := strings.Replace(p.DSN(), "/postgres?", "/pgbouncer?", 1)
	conn := connect(t, ctx, admin)
	rows, err := conn.Query(ctx, "SHOW POOLS", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	found := false
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		row := map[string]any{}
		for i, fd := range rows.FieldDescriptions() {
			row[fd.Name] = vals[i]
		}
		if row["database"] == db {
			found = true
			fmt.Sscan(fmt.Sprint(row["cl_active"]), &clActive)
			fmt.Sscan(fmt.Sprint(row["sv_active"]), &svActive)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatalf("%s: SHOW POOLS has no row for database %s", p, db)
	}
	return clActive, svActive
}

// TestPoolers puts a PgBouncer in front of each node in each pool mode:
// every pooler reaches its own node, the admin console shows whether an
// idle client keeps its server connection (session) or not (transaction),
// and the backend a client talks to is not the one its connection
// announced (the pooler's own key).
func TestPoolers(t *testing.T) {
	ctx := testCtx(t)
	for _, mode := range []testcluster.PoolMode{testcluster.PoolTransaction, testcluster.PoolSession} {
		t.Run(string(mode), func(t *testing.T) {
			ps := startPoolers(t, ctx, shared, mode)
			if ps.Mode() != mode {
				t.Fatalf("Mode() = %s", ps.Mode())
			}
			for _, n := range shared.Nodes() {
				p := ps.Of(n)
				if p.Node() != n || p.Mode() != mode {
					t.Fatalf("Of(%s) = %s", n, p)
				}
				conn := connect(t, ctx, p.DSN())
				var port, pid int
				if err := conn.QueryRow(ctx, "SELECT inet_server_port(), pg_backend_pid()").Scan(&port, &pid); err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				if want := n.DirectAddr(); !strings.HasSuffix(want, fmt.Sprintf(":%d", port)) {
					t.Fatalf("%s: the server's port is %d, want %s's (%s)", p, port, n.Name(), want)
				}
				if uint32(pid) == conn.PgConn().PID() {
					t.Fatalf("%s: the connection's announced pid is the backend's (%d): no pooler in between?", p, pid)
				}
				cl, sv := pools(t, ctx, p, "postgres")
				switch {
				case cl < 1:
					t.Fatalf("%s: SHOW POOLS shows %d active client(s), want the test's", p, cl)
				case mode == testcluster.PoolSession && sv < 1:
					t.Fatalf("%s: an idle client in session mode holds no server connection (sv_active %d)", p, sv)
				case mode == testcluster.PoolTransaction && sv != 0:
					t.Fatalf("%s: an idle client in transaction mode holds %d server connection(s), want 0", p, sv)
				}
			}
			// The DSN through the poolers names the primary's first.
			conn := connect(t, ctx, ps.DSN())
			var rec bool
			if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&rec); err != nil || rec {
				t.Fatalf("the first host of Poolers.DSN() is in recovery (%v, %v), want the primary", rec, err)
			}
		})
	}
}

// TestPoolersClosedWithCluster: a cluster with SCRAM authentication gets
// poolers that authenticate clients with the cluster's password, refuse a
// wrong one, keep the password out of their files' readers and their log,
// and stop with the cluster.
func TestPoolersClosedWithCluster(t *testing.T) {
	ctx := testCtx(t)
	const secret = `pw"with:quote`
	c, err := testcluster.Start(ctx, testcluster.Options{User: "app", Password: secret, Database: "appdb", Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ps, err := c.StartPoolers(ctx, testcluster.PoolTransaction)
	if err != nil {
		t.Fatal(err)
	}
	p := ps.Of(c.Primary())
	if strings.Contains(p.String(), secret) {
		t.Fatalf("String() shows the password: %s", p)
	}
	conn := connect(t, ctx, p.DSN())
	var user string
	if err := conn.QueryRow(ctx, "SELECT current_user").Scan(&user); err != nil || user != "app" {
		t.Fatalf("through the pooler: current_user %q, %v", user, err)
	}
	bad := strings.Replace(p.DSN(), "quote", "nope", 1)
	if bad == p.DSN() {
		t.Fatal("test bug: password not found in DSN")
	}
	if _, err := pgx.Connect(ctx, bad); err == nil {
		t.Fatal("the pooler let in a wrong password")
	}
	log, err := os.ReadFile(p.LogFile())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(log), "quote") {
		t.Fatal("the pooler's log holds the password")
	}
	pids := pgbouncerPIDs(t, c.Dir())
	if len(pids) != 1 {
		t.Fatalf("%d pgbouncer process(es) of the cluster run, want 1", len(pids))
	}
	dir := c.Dir()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	checkGone(t, dir, pids, 0)
}

// pgbouncerPIDs lists the running pgbouncer processes whose configuration
// is under dir.
func pgbouncerPIDs(t *testing.T, dir string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), "pgbouncer") && strings.Contains(string(b), dir+"/") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestRestoreRestartsAnEndedPooler: a PgBouncer whose process ended
// (killed here) is running again on its port once the cluster is
// restored, and serves its node.
func TestRestoreRestartsAnEndedPooler(t *testing.T) {
	ctx := testCtx(t)
	ps := startPoolers(t, ctx, shared, testcluster.PoolTransaction)
	p := ps.Of(shared.Primary())
	var pids []int
	for _, pid := range pgbouncerPIDs(t, shared.Dir()) {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(b), filepath.Dir(p.LogFile())+"/") {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 1 {
		t.Fatalf("%d pgbouncer process(es) of %s, want 1", len(pids), p)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c, err := pgx.Connect(ctx, p.DSN())
		if err != nil {
			break
		}
		c.Close(ctx)
		if time.Now().After(deadline) {
			t.Fatalf("%s still serves 10 s after its process was killed", p)
		}
	}
	if err := shared.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, ctx, p.DSN())
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("%s after the restore: %d, %v", p, one, err)
	}
}

func TestFindPgBouncerMissing(t *testing.T) {
	t.Setenv(testcluster.EnvPgBouncer, t.TempDir()+"/pgbouncer")
	_, err := testcluster.FindPgBouncer()
	if !errors.Is(err, testcluster.ErrNoPgBouncer) || !strings.Contains(err.Error(), testcluster.PgBouncerInstallCommand) {
		t.Fatalf("FindPgBouncer with a missing %s: %v, want ErrNoPgBouncer with the install command", testcluster.EnvPgBouncer, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := shared.StartPoolers(ctx, testcluster.PoolTransaction); !errors.Is(err, testcluster.ErrNoPgBouncer) {
		t.Fatalf("StartPoolers without pgbouncer: %v, want ErrNoPgBouncer", err)
	}
}
