//go:build unix

package testcluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgrouted/pgrouted/internal/testhelp"
	"github.com/pgrouted/pgrouted/testcluster"
)

// shared is the cluster of this package's tests: a primary and two
// replicas, started once in TestMain. Tests that break it call Restore.
var shared *testcluster.Cluster

const childEnv = "PGROUTED_TESTCLUSTER_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		childPanics()
	}
	testcluster.Main(m, testcluster.Options{
		Replicas: 2,
		Logf:     testhelp.Logf,
	}, func(c *testcluster.Cluster) { shared = c })
}

// testCtx is a context for one test: it ends after 90 seconds or with the test.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	return testhelp.Context(t, 90*time.Second)
}

// restore puts the cluster back when the test ends, for a test that breaks it.
func restore(t *testing.T) {
	t.Helper()
	testhelp.Restore(t, shared)
}

func connect(t *testing.T, ctx context.Context, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func mustExec(t *testing.T, ctx context.Context, n *testcluster.Node, sql string, args ...any) {
	t.Helper()
	if err := n.Exec(ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
}

// count returns the rows of table on node n, through its fault point.
func count(t *testing.T, ctx context.Context, n *testcluster.Node, table string, where string) int {
	t.Helper()
	conn := connect(t, ctx, n.DSN())
	var c int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE "+where).Scan(&c); err != nil {
		t.Fatalf("%s: count: %v", n, err)
	}
	return c
}

func TestRolesAfterStart(t *testing.T) {
	ctx := testCtx(t)
	for i, n := range shared.Nodes() {
		rec, err := n.IsInRecovery(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := i != 0; rec != want {
			t.Errorf("%s: in recovery = %v, want %v", n, rec, want)
		}
	}
	if got := len(shared.Replicas()); got != 2 {
		t.Fatalf("Replicas() = %d nodes, want 2", got)
	}
	// The multi-host DSN reaches every node, primary first.
	dsn := shared.DSN()
	for _, n := range shared.Nodes() {
		if !strings.Contains(dsn, n.Addr()) {
			t.Errorf("DSN %q lacks %s", dsn, n.Addr())
		}
	}
	if !strings.Contains(dsn, "@"+shared.Primary().Addr()+",") {
		t.Errorf("DSN %q does not name the primary %s first", dsn, shared.Primary().Addr())
	}
	conn := connect(t, ctx, dsn)
	var rec bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&rec); err != nil || rec {
		t.Fatalf("first host of DSN: in recovery = %v, %v; want the primary", rec, err)
	}
}

// DSNOf names the given nodes only, in the given order: a client on the
// primary and the second replica reaches those two and never the first.
func TestDSNOf(t *testing.T) {
	ctx := testCtx(t)
	p, rs := shared.Primary(), shared.Replicas()
	dsn := shared.DSNOf(p, rs[1])
	if want := "@" + p.Addr() + "," + rs[1].Addr() + "/"; !strings.Contains(dsn, want) {
		t.Errorf("DSNOf(primary, replica 1) = %q, want the hosts %q", dsn, want)
	}
	if strings.Contains(dsn, rs[0].Addr()) {
		t.Errorf("DSNOf(primary, replica 1) = %q names replica 0 (%s)", dsn, rs[0].Addr())
	}
	if got, want := shared.DSNOf(append([]*testcluster.Node{p}, rs...)...), shared.DSN(); got != want {
		t.Errorf("DSNOf(every node, primary first) = %q, want DSN() %q", got, want)
	}
	// pgx tries the hosts in order: the replica alone answers in recovery,
	// the pair answers from the primary.
	for _, c := range []struct {
		dsn  string
		want bool
	}{{shared.DSNOf(rs[1]), true}, {dsn, false}} {
		conn := connect(t, ctx, c.dsn)
		var rec bool
		if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&rec); err != nil || rec != c.want {
			t.Errorf("%s: in recovery = %v, %v; want %v", conn.Config().Host, rec, err, c.want)
		}
	}
}

// TestServerProcesses checks Node.PostmasterPID and Node.ServerProcesses
// (what the benchmarks measure a server's CPU time from): a connection's
// backend is among its node's server processes, and no other node's.
func TestServerProcesses(t *testing.T) {
	ctx := testCtx(t)
	for _, n := range shared.Nodes() {
		if n.PostmasterPID() == 0 {
			t.Fatalf("%s: PostmasterPID 0 while it runs", n)
		}
		conn := connect(t, ctx, n.DSN())
		var be int
		if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&be); err != nil {
			t.Fatal(err)
		}
		for _, o := range shared.Nodes() {
			if got := slices.Contains(o.ServerProcesses(), be); got != (o == n) {
				t.Errorf("backend %d of %s: among %s's server processes: %v", be, n, o, got)
			}
		}
		if slices.Contains(n.ServerProcesses(), n.PostmasterPID()) {
			t.Errorf("%s: the postmaster is among its own server processes", n)
		}
	}
}

func TestWriteOnPrimaryReadOnEachReplica(t *testing.T) {
	ctx := testCtx(t)
	p := shared.Primary()
	mustExec(t, ctx, p, "CREATE TABLE IF NOT EXISTS readback (id int PRIMARY KEY, v text)")
	mustExec(t, ctx, p, "INSERT INTO readback VALUES (1, 'hello') ON CONFLICT (id) DO UPDATE SET v = excluded.v")
	lsn, err := p.CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range shared.Replicas() {
		if err := r.WaitReplayed(ctx, lsn); err != nil {
			t.Fatal(err)
		}
		conn := connect(t, ctx, r.DSN())
		var v string
		if err := conn.QueryRow(ctx, "SELECT v FROM readback WHERE id = 1").Scan(&v); err != nil || v != "hello" {
			t.Fatalf("%s: read back %q, %v; want hello", r, v, err)
		}
		replay, err := r.ReplayLSN(ctx)
		if err != nil || replay < lsn {
			t.Fatalf("%s: replay LSN %v < %v (%v)", r, replay, lsn, err)
		}
		t.Logf("%s read the row back; replay LSN %v >= %v", r, replay, lsn)
		// A standby refuses writes.
		_, err = conn.Exec(ctx, "INSERT INTO readback VALUES (2, 'x')")
		if !strings.Contains(fmt.Sprint(err), "25006") {
			t.Fatalf("%s: write on a standby: %v, want SQLSTATE 25006", r, err)
		}
	}
}

func TestPauseReplayFallsBehind(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	p, rs := shared.Primary(), shared.Replicas()
	paused, other := rs[0], rs[1]
	mustExec(t, ctx, p, "DROP TABLE IF EXISTS pausing; CREATE TABLE pausing (id int)")
	lsn0, _ := p.CurrentLSN(ctx)
	for _, r := range rs {
		if err := r.WaitReplayed(ctx, lsn0); err != nil {
			t.Fatal(err)
		}
	}
	if err := paused.PauseReplay(ctx); err != nil {
		t.Fatal(err)
	}
	mustExec(t, ctx, p, "INSERT INTO pausing VALUES (42)")
	lsn, err := p.CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.WaitReplayed(ctx, lsn); err != nil {
		t.Fatal(err)
	}
	if got := count(t, ctx, other, "pausing", "id = 42"); got != 1 {
		t.Fatalf("%s (not paused) sees %d rows, want 1", other, got)
	}
	// The paused replica stays behind however long we wait for it.
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = paused.WaitReplayed(wctx, lsn)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("paused replica: WaitReplayed = %v, want a deadline error", err)
	}
	replay, err := paused.ReplayLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if replay >= lsn {
		t.Fatalf("paused replica replayed %v >= %v", replay, lsn)
	}
	if got := count(t, ctx, paused, "pausing", "id = 42"); got != 0 {
		t.Fatalf("paused %s sees %d rows, want 0", paused, got)
	}
	t.Logf("%s paused at %v, %d bytes behind the primary at %v", paused, replay, lsn.Sub(replay), lsn)
	if err := paused.ResumeReplay(ctx); err != nil {
		t.Fatal(err)
	}
	if err := paused.WaitReplayed(ctx, lsn); err != nil {
		t.Fatal(err)
	}
	if got := count(t, ctx, paused, "pausing", "id = 42"); got != 1 {
		t.Fatalf("resumed %s sees %d rows, want 1", paused, got)
	}
}

func TestPromoteAndWrite(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	old := shared.Primary()
	promoted := shared.Replicas()[0]
	mustExec(t, ctx, old, "DROP TABLE IF EXISTS promo; CREATE TABLE promo (id int, at text)")
	tli0, err := old.Timeline(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := promoted.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if shared.Primary() != promoted {
		t.Fatalf("Primary() = %s, want %s", shared.Primary(), promoted)
	}
	rec, err := promoted.IsInRecovery(ctx)
	if err != nil || rec {
		t.Fatalf("promoted: in recovery = %v, %v", rec, err)
	}
	tli, err := promoted.Timeline(ctx)
	if err != nil || tli != tli0+1 {
		t.Fatalf("promoted timeline = %d, %v; want %d", tli, err, tli0+1)
	}
	conn := connect(t, ctx, promoted.DSN())
	if _, err := conn.Exec(ctx, "INSERT INTO promo VALUES (7, 'after promotion')"); err != nil {
		t.Fatalf("write on the promoted node: %v", err)
	}
	// The remaining standby follows the new primary onto its timeline.
	follower := shared.Replicas()[1]
	if err := follower.Follow(ctx, promoted); err != nil {
		t.Fatal(err)
	}
	lsn, _ := promoted.CurrentLSN(ctx)
	if err := follower.WaitReplayed(ctx, lsn); err != nil {
		t.Fatal(err)
	}
	if got := count(t, ctx, follower, "promo", "id = 7"); got != 1 {
		t.Fatalf("follower sees %d rows, want 1", got)
	}
	// Restore makes node0 the primary again and keeps what was written on
	// the promoted node. The promoted node (stopped once node0 has all its
	// WAL) and its follower follow node0 as they are: their data
	// directories are not replaced by new base backups.
	kept := map[*testcluster.Node]os.FileInfo{}
	for _, n := range []*testcluster.Node{promoted, follower} {
		fi, err := os.Stat(filepath.Join(n.DataDir(), "PG_VERSION"))
		if err != nil {
			t.Fatal(err)
		}
		kept[n] = fi
	}
	if err := shared.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	if shared.Primary() != shared.Node(0) {
		t.Fatalf("after Restore, Primary() = %s", shared.Primary())
	}
	for _, n := range shared.Nodes() {
		if got := count(t, ctx, n, "promo", "id = 7"); got != 1 {
			t.Fatalf("after Restore %s sees %d rows, want 1", n, got)
		}
	}
	for n, before := range kept {
		fi, err := os.Stat(filepath.Join(n.DataDir(), "PG_VERSION"))
		if err != nil {
			t.Fatal(err)
		}
		if !os.SameFile(before, fi) {
			t.Errorf("after Restore, %s has a new data directory: it was rebuilt rather than made to follow node0", n)
		}
	}
	// And they replicate what node0 writes now.
	mustExec(t, ctx, shared.Node(0), "INSERT INTO promo VALUES (8, 'after Restore')")
	lsn, err = shared.Node(0).CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range shared.Replicas() {
		if err := n.WaitReplayed(ctx, lsn); err != nil {
			t.Fatal(err)
		}
		if got := count(t, ctx, n, "promo", "id = 8"); got != 1 {
			t.Fatalf("after Restore %s sees %d rows written on node0 since, want 1", n, got)
		}
	}
}

func TestKillAndRestart(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	for _, n := range []*testcluster.Node{shared.Replicas()[1], shared.Primary()} {
		conn := connect(t, ctx, n.DSN())
		if err := n.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		if n.Running() {
			t.Fatalf("%s still running after Kill", n)
		}
		if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
			t.Fatalf("%s: a query on a connection to a killed node succeeded", n)
		}
		if _, err := pgx.Connect(ctx, n.DSN()); err == nil {
			t.Fatalf("%s: connect to a killed node succeeded", n)
		}
		if err := n.Start(ctx); err != nil {
			t.Fatal(err)
		}
		conn2 := connect(t, ctx, n.DSN())
		var one int
		if err := conn2.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatalf("%s after restart: %v", n, err)
		}
		t.Logf("%s killed with SIGKILL and started again through crash recovery", n)
	}
	// The replicas stream again from the restarted primary.
	p := shared.Primary()
	mustExec(t, ctx, p, "DROP TABLE IF EXISTS afterkill; CREATE TABLE afterkill (id int)")
	mustExec(t, ctx, p, "INSERT INTO afterkill VALUES (1)")
	lsn, _ := p.CurrentLSN(ctx)
	for _, r := range shared.Replicas() {
		if err := r.WaitReplayed(ctx, lsn); err != nil {
			t.Fatal(err)
		}
	}
	// Restart (fast stop + start) of a replica.
	r := shared.Replicas()[0]
	if err := r.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if got := count(t, ctx, r, "afterkill", "true"); got != 1 {
		t.Fatalf("%s after restart sees %d rows", r, got)
	}
}

// TestStartOnATakenPort: another process took the primary's port while it
// was down (make test runs several test processes, each with clusters on
// free ports it picked): Start moves it to a free port, and clients, which
// go through its fault point, and the replicas' replication links follow.
func TestStartOnATakenPort(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	p := shared.Primary()
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	old, addr := p.DirectAddr(), p.Addr()
	taken, err := net.Listen("tcp", old)
	if err != nil {
		t.Fatalf("take %s: %v", old, err)
	}
	defer taken.Close()
	if err := p.Start(ctx); err != nil {
		t.Fatalf("start with its port taken: %v", err)
	}
	if p.DirectAddr() == old {
		t.Fatalf("%s started on %s, the port taken", p, old)
	}
	if p.Addr() != addr {
		t.Fatalf("%s's fault point moved from %s to %s", p, addr, p.Addr())
	}
	mustExec(t, ctx, p, "DROP TABLE IF EXISTS takenport; CREATE TABLE takenport (id int); INSERT INTO takenport VALUES (1)")
	lsn, err := p.CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range shared.Replicas() {
		if err := r.WaitReplayed(ctx, lsn); err != nil {
			t.Fatalf("%s does not follow the primary on its new port: %v", r, err)
		}
		if got := count(t, ctx, r, "takenport", "true"); got != 1 {
			t.Fatalf("%s sees %d rows of takenport, want 1", r, got)
		}
	}
}

// rtt measures the fastest of a few round trips on conn.
func rtt(t *testing.T, ctx context.Context, conn *pgx.Conn) time.Duration {
	t.Helper()
	best := time.Hour
	for i := 0; i < 5; i++ {
		start := time.Now()
		if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		best = min(best, time.Since(start))
	}
	return best
}

func TestFaultLatency(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	n := shared.Replicas()[0]
	conn := connect(t, ctx, n.DSN())
	before := rtt(t, ctx, conn)
	if err := n.Fault().Latency(30 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	with := rtt(t, ctx, conn)
	// The fault point holds every reply back at least 30ms: a lower bound, not a
	// timing of our own code.
	if with < 30*time.Millisecond {
		t.Fatalf("round trip with 30ms latency took %v", with)
	}
	direct := connect(t, ctx, n.DirectDSN())
	if d := rtt(t, ctx, direct); d >= 30*time.Millisecond {
		t.Logf("note: direct round trip took %v (busy machine?)", d)
	}
	if err := n.Fault().Latency(0); err != nil {
		t.Fatal(err)
	}
	t.Logf("round trip through the fault point: %v, with 30ms latency: %v, after removal: %v", before, with, rtt(t, ctx, conn))
}

func TestReplicationLatencyDelaysReplay(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	p, r := shared.Primary(), shared.Replicas()[0]
	mustExec(t, ctx, p, "CREATE TABLE IF NOT EXISTS replat (id int)")
	// Long enough that the three connections the checks below open, on a
	// busy machine, cannot cover it.
	const latency = 3 * time.Second
	if err := r.ReplicationFault().Latency(latency); err != nil {
		t.Fatal(err)
	}
	mustExec(t, ctx, p, "INSERT INTO replat VALUES (1)")
	committed := time.Now()
	lsn, _ := p.CurrentLSN(ctx)
	// Right after the commit, the delayed replica cannot have it yet.
	replay, err := r.ReplayLSN(ctx)
	if err != nil || (replay >= lsn && time.Since(committed) < latency) {
		t.Fatalf("replica with %v replication latency already replayed %v >= %v (%v)", latency, replay, lsn, err)
	}
	if err := r.WaitReplayed(ctx, lsn); err != nil {
		t.Fatal(err)
	}
}

func TestFaultBlackholeAndHeal(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	n := shared.Replicas()[1]
	conn := connect(t, ctx, n.DSN())
	if err := n.Fault().Blackhole(); err != nil {
		t.Fatal(err)
	}
	qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := conn.Exec(qctx, "SELECT 1")
	cancel()
	if err == nil {
		t.Fatal("a query through a blackhole succeeded")
	}
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = pgx.Connect(cctx, n.DSN())
	cancel()
	if err == nil {
		t.Fatal("a connection through a blackhole succeeded")
	}
	// PostgreSQL itself is fine.
	if rec, err := n.IsInRecovery(ctx); err != nil || !rec {
		t.Fatalf("direct connection during blackhole: %v, %v", rec, err)
	}
	if err := n.Fault().Heal(); err != nil {
		t.Fatal(err)
	}
	conn2 := connect(t, ctx, n.DSN())
	if _, err := conn2.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("after Heal: %v", err)
	}
}

// TestFreezeAndThaw: a frozen node keeps its connections open and answers
// nothing, on them or on new ones; once thawed, the query that waited on it
// completes and new connections work.
func TestFreezeAndThaw(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	n := shared.Replicas()[1]
	conn := connect(t, ctx, n.DirectDSN())
	if err := n.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			n.Thaw()
		}
	}()
	done := make(chan error, 1)
	go func() {
		var one int
		done <- conn.QueryRow(ctx, "SELECT 1").Scan(&one)
	}()
	select {
	case err := <-done:
		t.Fatalf("a query on a frozen node returned: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := pgx.Connect(cctx, n.DirectDSN())
	cancel()
	if err == nil {
		t.Fatal("a connection to a frozen node succeeded")
	}
	if !n.Running() {
		t.Fatal("a frozen node is not running")
	}
	if err := n.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the query held by the frozen node: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the query held by the frozen node did not complete within 30s of the thaw")
	}
	conn2 := connect(t, ctx, n.DSN())
	if _, err := conn2.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("after Thaw: %v", err)
	}
}

func TestFaultReset(t *testing.T) {
	ctx := testCtx(t)
	n := shared.Primary()
	conn := connect(t, ctx, n.DSN())
	if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if err := n.Fault().Reset(); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("a query on a reset connection succeeded")
	}
	conn2 := connect(t, ctx, n.DSN())
	if _, err := conn2.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("new connection after Reset: %v", err)
	}
}

// TestPasswordSyncAndClose starts a second cluster with SCRAM authentication
// and a synchronous standby in remote_apply mode, and checks that Close
// leaves no process and no directory behind.
func TestPasswordSyncAndClose(t *testing.T) {
	ctx := testCtx(t)
	const secret = "s3cr:et'pw"
	c, err := testcluster.Start(ctx, testcluster.Options{
		Replicas:          1,
		SyncReplicas:      1,
		SynchronousCommit: "remote_apply",
		User:              "app",
		Password:          secret,
		Database:          "appdb",
		Conf:              []string{"max_connections = 40"},
		Logf:              t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, r := c.Primary(), c.Replicas()[0]
	if strings.Contains(p.String(), secret) || strings.Contains(fmt.Sprint(p), secret) {
		t.Fatalf("String() shows the password: %s", p)
	}
	conn := connect(t, ctx, p.DSN())
	var method, sync, maxConns string
	if err := conn.QueryRow(ctx, "SELECT current_setting('password_encryption'), current_setting('max_connections')").Scan(&method, &maxConns); err != nil {
		t.Fatal(err)
	}
	if method != "scram-sha-256" || maxConns != "40" {
		t.Fatalf("password_encryption=%s max_connections=%s", method, maxConns)
	}
	if err := conn.QueryRow(ctx, "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'node1'").Scan(&sync); err != nil || sync != "sync" {
		t.Fatalf("node1 sync_state = %q, %v; want sync", sync, err)
	}
	bad := strings.Replace(p.DSN(), "s3cr", "nope", 1)
	if bad == p.DSN() {
		t.Fatal("test bug: password not found in DSN")
	}
	if _, err := pgx.Connect(ctx, bad); err == nil || !strings.Contains(err.Error(), "28P01") {
		t.Fatalf("connect with a wrong password: %v, want SQLSTATE 28P01", err)
	}
	// remote_apply: once the commit returns, the synchronous standby has
	// applied it, with no waiting.
	if _, err := conn.Exec(ctx, "CREATE TABLE s (id int); INSERT INTO s VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	rconn := connect(t, ctx, r.DSN())
	var n int
	if err := rconn.QueryRow(ctx, "SELECT count(*) FROM s").Scan(&n); err != nil || n != 1 {
		t.Fatalf("synchronous standby sees %d rows (%v) right after commit, want 1", n, err)
	}
	// Restore brings a synchronous standby whose link was cut back as a
	// synchronous one before it returns: its replication connection is
	// reset by the heal, and the standby must connect again.
	if err := r.ReplicationFault().Blackhole(); err != nil {
		t.Fatal(err)
	}
	restoring := time.Now()
	if err := c.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	// The connection that went through the blackhole is dead: only one
	// made during Restore counts.
	if err := conn.QueryRow(ctx, "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'node1' AND backend_start >= $1", restoring).Scan(&sync); err != nil || sync != "sync" {
		t.Fatalf("after Restore, node1 sync_state = %q, %v on a replication connection made by Restore; want sync", sync, err)
	}

	dir := c.Dir()
	var pids []int
	for _, node := range c.Nodes() {
		pid := node.PostmasterPID()
		if pid == 0 {
			t.Fatalf("%s: no postmaster.pid", node)
		}
		pids = append(pids, pid)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	checkGone(t, dir, pids, 0)
}

// checkGone waits up to wait for the processes and the directory to
// disappear, and fails if they do not.
func checkGone(t *testing.T, dir string, pids []int, wait time.Duration) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		var left []string
		if _, err := os.Stat(dir); err == nil {
			left = append(left, "directory "+dir)
		}
		for _, pid := range pids {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && (strings.Contains(string(b), "postgres") || strings.Contains(string(b), "pgbouncer")) {
				left = append(left, fmt.Sprintf("process %d (%s)", pid, strings.ReplaceAll(string(b), "\x00", " ")))
			} else if err == nil {
				_ = syscall.Kill(pid, 0)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("left behind: %s", strings.Join(left, ", "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNothingLeftAfterPanic runs a child test process that starts a cluster
// with a PgBouncer in front of each node and panics without closing it: the
// watchdog must stop PostgreSQL and PgBouncer and remove the directory.
func TestNothingLeftAfterPanic(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("child did not fail:\n%s", out)
	}
	var info struct {
		Dir  string
		PIDs []int
	}
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "CLUSTER "); ok {
			if err := json.Unmarshal([]byte(rest), &info); err != nil {
				t.Fatal(err)
			}
		}
	}
	if info.Dir == "" || len(info.PIDs) != 4 {
		t.Fatalf("child did not report its cluster:\n%s", out)
	}
	if !strings.Contains(string(out), "panic: deliberate") {
		t.Fatalf("child did not panic:\n%s", out)
	}
	checkGone(t, info.Dir, info.PIDs, 20*time.Second)
	t.Logf("after the child panicked, postmasters and pgbouncers %v and %s are gone", info.PIDs, info.Dir)
}

// childPanics is the child process of TestNothingLeftAfterPanic: it starts
// a cluster, reports it, and panics without closing it.
func childPanics() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := testcluster.Start(ctx, testcluster.Options{Replicas: 1})
	if err != nil {
		fmt.Println("child:", err)
		os.Exit(3)
	}
	var pids []int
	for _, n := range c.Nodes() {
		b, err := os.ReadFile(n.DataDir() + "/postmaster.pid")
		if err != nil {
			fmt.Println("child:", err)
			os.Exit(3)
		}
		var pid int
		fmt.Sscan(string(b), &pid)
		pids = append(pids, pid)
	}
	// A PgBouncer in front of each node: the watchdog stops them too.
	if _, err := c.StartPoolers(ctx, testcluster.PoolTransaction); err != nil {
		fmt.Println("child:", err)
		os.Exit(3)
	}
	for _, n := range c.Nodes() {
		f, _ := filepath.Glob(c.Dir() + "/pgbouncer*-" + n.Name() + "/pgbouncer.pid")
		if len(f) != 1 {
			fmt.Println("child: no pgbouncer pid file for", n.Name())
			os.Exit(3)
		}
		b, _ := os.ReadFile(f[0])
		var pid int
		fmt.Sscan(string(b), &pid)
		pids = append(pids, pid)
	}
	b, _ := json.Marshal(map[string]any{"Dir": c.Dir(), "PIDs": pids})
	fmt.Printf("CLUSTER %s\n", b)
	panic("deliberate: the cluster is not closed")
}

func TestFindBinDirMissing(t *testing.T) {
	t.Setenv(testcluster.EnvBinDir, t.TempDir())
	_, err := testcluster.FindBinDir()
	if !errors.Is(err, testcluster.ErrNoPostgres) {
		t.Fatalf("FindBinDir with an empty %s: %v, want ErrNoPostgres", testcluster.EnvBinDir, err)
	}
	if !strings.Contains(err.Error(), testcluster.InstallCommand) {
		t.Fatalf("error does not say how to install PostgreSQL: %v", err)
	}
	_, err = testcluster.Start(context.Background(), testcluster.Options{})
	if !errors.Is(err, testcluster.ErrNoPostgres) {
		t.Fatalf("Start without binaries: %v, want ErrNoPostgres", err)
	}
}

// TestStartCancelled: a context that ends during the boot stops it
// promptly, and nothing is left behind.
func TestStartCancelled(t *testing.T) {
	// A directory the PostgreSQL user can enter when the test runs as root.
	dir, err := os.MkdirTemp("", "pgrouted-cancel-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	cancelled := 0
	for _, after := range []time.Duration{300 * time.Millisecond, 1500 * time.Millisecond, 2500 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), after)
		began := time.Now()
		c, err := testcluster.Start(ctx, testcluster.Options{Replicas: 2, Dir: dir})
		ctxErr := ctx.Err()
		cancel()
		if err == nil {
			c.Close()
			continue // it booted in time: nothing to test at this delay
		}
		if ctxErr == nil {
			t.Fatalf("Start failed, but not because its context ended: %v", err)
		}
		cancelled++
		t.Logf("boot cancelled after %v: returned after %v", after, time.Since(began).Round(time.Millisecond))
		if took := time.Since(began); took > after+20*time.Second {
			t.Fatalf("a boot cancelled after %v returned after %v", after, took)
		}
		left, _ := filepath.Glob(filepath.Join(dir, "pgrouted-testcluster-*"))
		if len(left) != 0 {
			t.Fatalf("cancelled after %v: left %v", after, left)
		}
	}
	if out, err := exec.Command("pgrep", "-af", dir+"/").Output(); err == nil && len(out) > 0 {
		t.Fatalf("processes left behind:\n%s", out)
	}
	if cancelled == 0 {
		t.Fatal("every boot finished before its context ended: nothing was tested")
	}
}
