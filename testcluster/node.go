//go:build unix

package testcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// Node is one PostgreSQL server of a [Cluster]. Every control waits until
// its effect is real, or its ctx ends (the error then says what was still
// missing): Start returns when the server accepts connections, Stop and
// Kill when its processes are gone, Promote when it is out of recovery,
// PauseReplay when replay has stopped, ResumeReplay when it is no longer
// paused, Follow and Rejoin when the primary reports the standby streaming
// on a live connection.
type Node struct {
	c       *Cluster
	index   int
	name    string
	port    int    // PostgreSQL's own port on 127.0.0.1
	dataDir string // owned by the PostgreSQL user
	logFile string
	fault   *Fault // in front of the node, for clients
	link    *Fault // the node's replication connection to its primary

	monMu     sync.Mutex
	mon       *pgx.Conn // kept by positionRow between its queries
	monClosed bool      // set by the cluster's Close: keep no connection
}

// Name is the node's name, "node0", "node1", ...; it is also the
// application_name of its replication connection.
func (n *Node) Name() string { return n.name }

// String returns the node's name and address; it never holds a password.
func (n *Node) String() string { return n.name + "@" + n.Addr() }

// Addr is the host:port clients use: the node's fault point.
func (n *Node) Addr() string { return n.fault.Addr() }

// Port is the port of Addr.
func (n *Node) Port() int {
	_, p, _ := net.SplitHostPort(n.Addr())
	port, _ := strconv.Atoi(p)
	return port
}

// DirectAddr is PostgreSQL's own host:port, which no fault affects.
func (n *Node) DirectAddr() string { return n.pgAddr() }

func (n *Node) pgAddr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)) }

// DSN is a connection string for this node alone, through its fault point.
func (n *Node) DSN() string { return n.c.dsn([]string{n.Addr()}) }

// DirectDSN is a connection string for this node alone that bypasses its
// fault point.
func (n *Node) DirectDSN() string { return n.c.dsn([]string{n.pgAddr()}) }

// DataDir is the node's data directory.
func (n *Node) DataDir() string { return n.dataDir }

// LogFile is the node's server log.
func (n *Node) LogFile() string { return n.logFile }

// PostmasterPID is the process id of the node's server (its postmaster),
// from postmaster.pid in its data directory: 0 when the server is not
// running.
func (n *Node) PostmasterPID() int { return postmasterPID(n.dataDir) }

// ServerProcesses lists the processes the node's postmaster started, from
// /proc: backends, walsenders and its own processes (checkpointer, WAL
// writer, the startup process of a standby, …), not the postmaster itself.
// It is empty when the server is not running.
func (n *Node) ServerProcesses() []int {
	pm := n.PostmasterPID()
	if pm == 0 {
		return nil
	}
	return childrenOf(pm)
}

// Fault is the network fault point in front of the node: latency, blackhole
// and connection resets for every client connection. The replication
// connections of the node's standbys do not go through it; each standby's
// [Node.ReplicationFault] acts on those.
func (n *Node) Fault() *Fault { return n.fault }

// ReplicationFault is the fault point on the node's own replication
// connection to its primary (meaningful while it is a standby): latency here
// delays the WAL the node receives, a blackhole stops it.
func (n *Node) ReplicationFault() *Fault { return n.link }

// Connect opens a pgx connection to the node that bypasses its fault point,
// for test setup and checks. The caller closes it.
func (n *Node) Connect(ctx context.Context) (*pgx.Conn, error) {
	return n.connect(ctx, n.c.opts.Database)
}

func (n *Node) connect(ctx context.Context, database string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(n.DirectDSN() + "&connect_timeout=10&application_name=testcluster")
	if err == nil {
		cfg.Database = database
	}
	if err != nil {
		return nil, fmt.Errorf("testcluster: %s: %w", n.name, err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("testcluster: connect to %s: %w", n.name, err)
	}
	return conn, nil
}

// Exec runs sql on the node (bypassing its fault point).
func (n *Node) Exec(ctx context.Context, sql string, args ...any) error {
	conn, err := n.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("testcluster: %s: %w", n.name, err)
	}
	return nil
}

// QueryRow runs sql on the node (bypassing its fault point) and scans its
// single row into dest.
func (n *Node) QueryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	conn, err := n.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, sql, args...).Scan(dest...); err != nil {
		return fmt.Errorf("testcluster: %s: %w", n.name, err)
	}
	return nil
}

// IsInRecovery reports pg_is_in_recovery(): true on a standby.
func (n *Node) IsInRecovery(ctx context.Context) (bool, error) {
	var rec bool
	err := n.positionRow(ctx, "SELECT pg_is_in_recovery()", nil, &rec)
	return rec, err
}

// Timeline is the node's current timeline (the one it writes on a primary,
// the one it replays on a standby).
func (n *Node) Timeline(ctx context.Context) (int, error) {
	var tli int
	// On a primary the timeline is in the name of the current WAL file;
	// pg_control_checkpoint() lags until the first checkpoint after a
	// promotion.
	err := n.positionRow(ctx, `SELECT CASE WHEN pg_is_in_recovery()
		THEN coalesce((SELECT received_tli FROM pg_stat_wal_receiver WHERE received_tli > 0),
		              (SELECT timeline_id FROM pg_control_checkpoint()))
		ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END`, nil, &tli)
	return tli, err
}

// CurrentLSN is the primary's current WAL write position,
// pg_current_wal_lsn(). A commit that has returned is at or before it.
func (n *Node) CurrentLSN(ctx context.Context) (lagmeter.LSN, error) {
	return n.lsn(ctx, "SELECT pg_current_wal_lsn()::text")
}

// ReplayLSN is a standby's last replayed WAL position,
// pg_last_wal_replay_lsn().
func (n *Node) ReplayLSN(ctx context.Context) (lagmeter.LSN, error) {
	return n.lsn(ctx, "SELECT pg_last_wal_replay_lsn()::text")
}

func (n *Node) lsn(ctx context.Context, sql string) (lagmeter.LSN, error) {
	var s *string
	if err := n.positionRow(ctx, sql, nil, &s); err != nil {
		return 0, err
	}
	if s == nil {
		return 0, fmt.Errorf("testcluster: %s: %s returned NULL", n.name, sql)
	}
	return lagmeter.ParseLSN(*s)
}

// WaitReplayed waits until the standby has replayed WAL up to lsn, or ctx
// ends.
func (n *Node) WaitReplayed(ctx context.Context, lsn lagmeter.LSN) error {
	var last string
	for {
		var ok, rec bool
		var replay *string
		err := n.positionRow(ctx, "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text, coalesce(pg_last_wal_replay_lsn() >= $1::text::pg_lsn, false)", []any{lsn.String()}, &rec, &replay, &ok)
		if err != nil {
			return fmt.Errorf("testcluster: %s: wait for replay of %s: %w", n.name, lsn, err)
		}
		if !rec {
			return fmt.Errorf("testcluster: %s is not a standby: cannot wait for replay of %s", n.name, lsn)
		}
		if ok {
			return nil
		}
		if replay != nil {
			last = *replay
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testcluster: %s: replay at %s has not reached %s: %w", n.name, last, lsn, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// positionRow runs a read-only query of the node's state (its WAL
// positions, recovery, timeline, replication: those of CurrentLSN,
// ReplayLSN, WaitReplayed, IsInRecovery, Timeline and of the waits of
// Restore, Follow and Rejoin) and scans its single row into dest, on a
// connection the node keeps for them: WaitReplicated runs thousands of
// times in a suite, and a connection each, a server process each, was
// most of its cost. When the kept connection fails (the server
// restarted, or a test ended its session), the query runs once more on a
// new connection, which is kept in its place.
func (n *Node) positionRow(ctx context.Context, sql string, args []any, dest ...any) error {
	n.monMu.Lock()
	conn := n.mon
	n.mon = nil
	n.monMu.Unlock()
	if conn != nil {
		if err := conn.QueryRow(ctx, sql, args...).Scan(dest...); err == nil {
			n.keepPositionConn(conn)
			return nil
		}
		conn.Close(context.Background())
	}
	conn, err := n.Connect(ctx)
	if err != nil {
		return err
	}
	if err := conn.QueryRow(ctx, sql, args...).Scan(dest...); err != nil {
		conn.Close(context.Background())
		return fmt.Errorf("testcluster: %s: %w", n.name, err)
	}
	n.keepPositionConn(conn)
	return nil
}

// keepPositionConn keeps conn for positionRow, or closes it when another
// is kept already or the cluster is closed.
func (n *Node) keepPositionConn(conn *pgx.Conn) {
	n.monMu.Lock()
	if n.mon == nil && !n.monClosed {
		n.mon, conn = conn, nil
	}
	n.monMu.Unlock()
	if conn != nil {
		conn.Close(context.Background())
	}
}

// closePositionConn closes the connection kept for positionRow, and keeps
// none from then on.
func (n *Node) closePositionConn() {
	n.monMu.Lock()
	conn := n.mon
	n.mon, n.monClosed = nil, true
	n.monMu.Unlock()
	if conn != nil {
		conn.Close(context.Background())
	}
}

// Running reports whether the node's postmaster is running.
func (n *Node) Running() bool {
	pid := postmasterPID(n.dataDir)
	return pid > 0 && processAlive(pid)
}

// Start starts the node's server and waits until it accepts connections.
func (n *Node) Start(ctx context.Context) error {
	began := time.Now()
	for attempt := 0; ; attempt++ {
		err := n.c.run.run(ctx, "pg_ctl", "start", "-w", "-t", "120", "-D", n.dataDir, "-l", n.logFile,
			"-o", fmt.Sprintf("-p %d -c cluster_name=%s", n.port, n.name))
		if err == nil {
			break
		}
		tail := n.logTail()
		if attempt < 3 && strings.Contains(tail, "could not bind") {
			// Another process took the free port picked for this node
			// (clusters of parallel test binaries): move to a new one.
			if perr := n.c.movePort(n); perr == nil {
				continue
			}
		}
		return fmt.Errorf("%w\n%s", err, tail)
	}
	n.c.opts.Logf("testcluster: %s started on %s (postgres on %s) in %s", n.name, n.Addr(), n.pgAddr(), time.Since(began).Round(time.Millisecond))
	return nil
}

// Stop shuts the node down in fast mode (clients are disconnected, a
// primary first sends its remaining WAL to connected standbys) and waits
// until it is down.
func (n *Node) Stop(ctx context.Context) error {
	if err := n.stop(ctx, "fast"); err != nil {
		return err
	}
	n.c.opts.Logf("testcluster: %s stopped", n.name)
	return nil
}

func (n *Node) stop(ctx context.Context, mode string) error {
	if !n.Running() {
		return nil
	}
	return n.c.run.run(ctx, "pg_ctl", "stop", "-w", "-t", "60", "-m", mode, "-D", n.dataDir)
}

// Kill sends SIGKILL to the node's postmaster and to its child processes, as
// a crash of the machine would, and waits until they are gone. Start brings
// the node back through crash recovery.
func (n *Node) Kill(ctx context.Context) error {
	pid := postmasterPID(n.dataDir)
	if pid == 0 || !processAlive(pid) {
		return fmt.Errorf("testcluster: kill %s: not running", n.name)
	}
	if err := killTree(ctx, pid, n.dataDir); err != nil {
		return err
	}
	n.c.opts.Logf("testcluster: %s killed (postmaster pid %d)", n.name, pid)
	return nil
}

// Restart stops the node (fast) and starts it again.
func (n *Node) Restart(ctx context.Context) error {
	if err := n.Stop(ctx); err != nil {
		return err
	}
	return n.Start(ctx)
}

// Promote turns the standby into a primary and waits until it is out of
// recovery and accepts writes. The other standbys keep following their
// current primary; see [Node.Follow] and [Node.Rejoin].
func (n *Node) Promote(ctx context.Context) error {
	began := time.Now()
	if err := n.c.run.run(ctx, "pg_ctl", "promote", "-w", "-t", "60", "-D", n.dataDir); err != nil {
		return fmt.Errorf("%w\n%s", err, n.logTail())
	}
	for {
		rec, err := n.IsInRecovery(ctx)
		if err == nil && !rec {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testcluster: %s still in recovery after promote: %w", n.name, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	n.c.mu.Lock()
	n.c.primary = n.index
	n.c.mu.Unlock()
	n.c.opts.Logf("testcluster: %s promoted in %s", n.name, time.Since(began).Round(time.Millisecond))
	return nil
}

// PauseReplay pauses WAL replay on the standby (pg_wal_replay_pause()) and
// waits until replay has actually stopped. WAL is still received.
func (n *Node) PauseReplay(ctx context.Context) error {
	if err := n.Exec(ctx, "SELECT pg_wal_replay_pause()"); err != nil {
		return err
	}
	for {
		var state string
		if err := n.positionRow(ctx, pauseStateSQL(n.c.Major()), nil, &state); err != nil {
			return err
		}
		if state == "paused" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testcluster: %s: replay pause state is %q: %w", n.name, state, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// ResumeReplay resumes WAL replay on the standby (pg_wal_replay_resume())
// and waits until the standby reports replay as no longer paused.
func (n *Node) ResumeReplay(ctx context.Context) error {
	if err := n.Exec(ctx, "SELECT pg_wal_replay_resume()"); err != nil {
		return err
	}
	for {
		var state string
		if err := n.positionRow(ctx, pauseStateSQL(n.c.Major()), nil, &state); err != nil {
			return err
		}
		if state == "not paused" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testcluster: %s: replay pause state is %q after resume: %w", n.name, state, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Follow points the standby's replication link at primary (for example a
// newly promoted node) and waits until it streams from it. It works when the
// standby has not replayed past the point where primary's timeline forked;
// otherwise use [Node.Rejoin].
func (n *Node) Follow(ctx context.Context, primary *Node) error {
	moved := n.link.upstream() != primary.pgAddr()
	if err := n.link.setUpstream(primary.pgAddr()); err != nil {
		return err
	}
	var since time.Time
	if moved {
		// setUpstream has closed the connection to the old upstream: only
		// a connection made after it counts.
		since = time.Now()
	}
	return n.waitStreaming(ctx, primary, since)
}

// Rejoin turns the node, running or not (typically an old primary), into a
// standby of primary: it stops the node, replaces its data directory with a
// fresh base backup of primary (pg_basebackup -R -X stream, or a copy where
// there is no pg_basebackup, see the package documentation), starts it and
// waits until it streams.
func (n *Node) Rejoin(ctx context.Context, primary *Node) error {
	if n == primary {
		return fmt.Errorf("testcluster: %s cannot rejoin itself", n.name)
	}
	if err := n.stop(ctx, "fast"); err != nil {
		if pid := postmasterPID(n.dataDir); pid > 0 {
			if kerr := killTree(ctx, pid, n.dataDir); kerr != nil {
				return errors.Join(err, kerr)
			}
		}
	}
	if err := os.RemoveAll(n.dataDir); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	since := time.Now()
	if err := n.clone(ctx, primary); err != nil {
		return err
	}
	return n.waitStreaming(ctx, primary, since)
}

// clone makes the node a standby of primary with a base backup (taken
// straight from primary by pg_basebackup, or copied by copyFrom), whose
// replication connection goes through its link, and starts it.
func (n *Node) clone(ctx context.Context, primary *Node) error {
	began := time.Now()
	if err := n.link.Heal(); err != nil {
		return err
	}
	if err := n.link.setUpstream(primary.pgAddr()); err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(n.link.Addr())
	conninfo := fmt.Sprintf("host=%s port=%s user=%s application_name=%s", host, port, n.c.opts.User, n.name)
	how := "pg_basebackup"
	if n.c.hasBasebackup() {
		// Not through the link, whose proxy would copy every byte of
		// the backup once more: the standby's own settings, as -R
		// writes them, but naming the link.
		direct := fmt.Sprintf("host=127.0.0.1 port=%d user=%s application_name=%s", primary.port, n.c.opts.User, n.name)
		if err := n.c.run.run(ctx, "pg_basebackup", "-D", n.dataDir, "-X", "stream",
			"--checkpoint=fast", "--no-sync", "-d", direct); err != nil {
			return err
		}
		if err := n.c.run.writeFile(filepath.Join(n.dataDir, "standby.signal"), nil, 0o600); err != nil {
			return fmt.Errorf("testcluster: %w", err)
		}
		line := "\n# testcluster: standby of " + primary.name + "\nprimary_conninfo = " + quoteLiteral(conninfo) + "\n"
		if err := appendFile(filepath.Join(n.dataDir, "postgresql.auto.conf"), line); err != nil {
			return fmt.Errorf("testcluster: %w", err)
		}
	} else {
		how = "a copy"
		if err := n.copyFrom(ctx, primary, conninfo); err != nil {
			return err
		}
	}
	// PostgreSQL refuses a data directory with group or other access.
	if err := os.Chmod(n.dataDir, 0o700); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	n.c.opts.Logf("testcluster: %s cloned from %s with %s in %s", n.name, primary.name, how, time.Since(began).Round(time.Millisecond))
	return n.Start(ctx)
}

// waitStreaming waits until the standby's WAL receiver streams, through
// its replication link, from primary, and primary reports it as streaming
// and has received its first status reply (from then on it counts as a
// candidate synchronous standby). When since is not zero, a connection
// counts only when it began at or after since or replied since then, so
// that a walsender the primary has not yet seen die (after a reset of the
// link) is not taken for a live one.
func (n *Node) waitStreaming(ctx context.Context, primary *Node, since time.Time) error {
	want := primary.pgAddr()
	if got := n.link.upstream(); got != want {
		return fmt.Errorf("testcluster: %s replicates from %s, not from %s", n.name, got, primary.name)
	}
	var after *time.Time
	if !since.IsZero() {
		after = &since
	}
	var lastErr error
	for {
		var streaming bool
		err := primary.positionRow(ctx, `SELECT count(*) > 0 FROM pg_stat_replication
			WHERE application_name = $1 AND state = 'streaming' AND flush_lsn IS NOT NULL
			AND ($2::timestamptz IS NULL OR backend_start >= $2 OR reply_time >= $2)`,
			[]any{n.name, after}, &streaming)
		if err == nil && streaming {
			err = n.positionRow(ctx, "SELECT coalesce((SELECT status = 'streaming' FROM pg_stat_wal_receiver), false)", nil, &streaming)
		}
		if err == nil && streaming {
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("testcluster: %s does not stream from %s (last error: %v): %w\n%s", n.name, primary.name, lastErr, ctx.Err(), n.logTail())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// logTail returns the last lines of the node's log, for error messages.
func (n *Node) logTail() string {
	b, err := os.ReadFile(n.logFile)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return "--- " + filepath.Base(n.logFile) + " (last lines) ---\n" + strings.Join(lines, "\n")
}
