//go:build unix

package testcluster

import (
	"context"
	"errors"
	"fmt"
	"github.com/pgrouted/pgrouted/lagmeter"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options configure a cluster. The zero value is one primary and no replica,
// trust authentication, user and database "postgres".
type Options struct {
	// Replicas is the number of streaming replicas besides the primary.
	Replicas int

	// SyncReplicas is how many replicas are synchronous standbys: the
	// primary gets synchronous_standby_names = 'FIRST n (node1, node2, ...)'.
	// 0 means asynchronous replication.
	SyncReplicas int

	// SynchronousCommit is the primary's synchronous_commit (on, off, local,
	// remote_write, remote_apply). Empty means PostgreSQL's default, on.
	// With SyncReplicas > 0, "remote_apply" makes a commit wait until the
	// synchronous standbys have applied it.
	SynchronousCommit string

	// User is the superuser the cluster is created with and the DSNs use.
	// Default "postgres".
	User string

	// Password, when set, turns on SCRAM-SHA-256 password authentication for
	// TCP connections (clients and replication) and gives User this
	// password. Empty means trust authentication.
	Password string

	// Database is the database the DSNs name. It is created when it is not
	// "postgres". Default "postgres".
	Database string

	// Conf holds extra postgresql.conf lines (for example
	// "max_connections = 50"), written on the primary before the replicas
	// are copied from it, so every node has them.
	Conf []string

	// BinDir is the directory of the PostgreSQL server binaries. Empty means
	// [FindBinDir].
	BinDir string

	// OSUser is the unprivileged system user PostgreSQL runs as when the
	// process is root. Default "postgres". Ignored when not root.
	OSUser string

	// Dir is the directory in which the cluster's temporary directory is
	// created. Empty means os.TempDir().
	Dir string

	// Logf, when set, receives one line per step (boot, promotion, ...), for
	// example testing.T.Logf. Lines never hold the password.
	Logf func(format string, args ...any)
}

// Cluster is a running PostgreSQL primary with streaming replicas, each
// behind a network fault point. Its methods are safe for concurrent use,
// but tests that change the topology should not run in parallel.
type Cluster struct {
	opts    Options
	bin     string
	version int
	verStr  string
	base    string
	run     *runner
	nodes   []*Node

	watchdog     *exec.Cmd
	watchdogPipe *os.File

	mu      sync.Mutex
	primary int // index of the node believed to be primary
	closed  bool

	// poolers are the PgBouncers started by StartPoolers and not closed
	// yet (pgbouncer.go); poolerSeq numbers their directories.
	poolers   []*Poolers
	poolerSeq int
}

// Start boots a primary and opts.Replicas streaming replicas in a new
// temporary directory, on free loopback ports, and returns when every replica
// streams from the primary and, with opts.SyncReplicas, when the primary
// reports the first opts.SyncReplicas replicas as synchronous standbys
// (sync_state 'sync'), so that commits wait for them. The caller must Close
// the cluster; even when it does not (a panic, os.Exit, a killed test
// binary) a watchdog process stops every PostgreSQL process and removes the
// directory when the calling process ends.
//
// When no PostgreSQL binaries are found the error wraps [ErrNoPostgres],
// whose text gives the command that installs them.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	began := time.Now()
	if opts.Replicas < 0 || opts.SyncReplicas < 0 || opts.SyncReplicas > opts.Replicas {
		return nil, fmt.Errorf("testcluster: Options.SyncReplicas (%d) must be between 0 and Options.Replicas (%d)", opts.SyncReplicas, opts.Replicas)
	}
	if opts.User == "" {
		opts.User = "postgres"
	}
	if opts.Database == "" {
		opts.Database = "postgres"
	}
	if opts.OSUser == "" {
		opts.OSUser = "postgres"
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	c := &Cluster{opts: opts, bin: opts.BinDir}
	if c.bin == "" {
		if c.bin, err = FindBinDir(); err != nil {
			return nil, err
		}
	} else if missing := missingBins(c.bin); len(missing) > 0 {
		return nil, fmt.Errorf("%w: Options.BinDir %s lacks %s", ErrNoPostgres, c.bin, strings.Join(missing, ", "))
	}
	if c.version, c.verStr, err = serverVersion(c.bin); err != nil {
		return nil, err
	}
	if err := c.checkMajor(opts.BinDir == ""); err != nil {
		return nil, err
	}

	if c.base, err = os.MkdirTemp(opts.Dir, "pgrouted-testcluster-"); err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	if c.run, err = newRunner(c.bin, c.base, opts.OSUser); err != nil {
		os.RemoveAll(c.base)
		return nil, err
	}
	if err := c.run.own(c.base); err != nil {
		os.RemoveAll(c.base)
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	if c.watchdog, c.watchdogPipe, err = c.run.startWatchdog(c.base); err != nil {
		os.RemoveAll(c.base)
		return nil, err
	}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if err := c.boot(ctx); err != nil {
		return nil, err
	}
	c.opts.Logf("testcluster: %s: primary %s and %d replica(s) streaming in %s (%s)",
		c.verStr, c.nodes[0].name, opts.Replicas, time.Since(began).Round(time.Millisecond), c.base)
	return c, nil
}

func (c *Cluster) boot(ctx context.Context) error {
	n := 1 + c.opts.Replicas
	ports, err := freePorts(n)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		node := &Node{c: c, index: i, name: "node" + strconv.Itoa(i), port: ports[i]}
		node.dataDir = filepath.Join(c.base, node.name)
		node.logFile = filepath.Join(c.base, node.name+".log")
		if node.fault, err = newFault(node.name, node.pgAddr()); err != nil {
			return err
		}
		// The replication link of every node starts pointed at the primary.
		if node.link, err = newFault(node.name+"-replication", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))); err != nil {
			node.fault.stop() // Close only stops the faults of listed nodes
			return err
		}
		c.nodes = append(c.nodes, node)
	}

	if c.opts.Password != "" {
		if err := c.run.writeFile(filepath.Join(c.base, "pgpass"),
			[]byte("*:*:*:*:"+pgpassEscape(c.opts.Password)+"\n"), 0o600); err != nil {
			return fmt.Errorf("testcluster: %w", err)
		}
	}
	primary := c.nodes[0]
	if err := c.initdb(ctx, primary); err != nil {
		return err
	}
	if err := primary.Start(ctx); err != nil {
		return err
	}
	if c.opts.Database != "postgres" {
		conn, err := primary.connect(ctx, "postgres")
		if err != nil {
			return err
		}
		// No standby streams yet: do not wait for a synchronous one.
		_, err = conn.Exec(ctx, "SET synchronous_commit = local")
		if err == nil {
			_, err = conn.Exec(ctx, "CREATE DATABASE "+quoteIdent(c.opts.Database))
		}
		conn.Close(context.Background())
		if err != nil {
			return fmt.Errorf("testcluster: create database %s: %w", c.opts.Database, err)
		}
	}
	since := time.Now()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for _, node := range c.nodes[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[node.index] = node.clone(ctx, primary)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, r := range c.nodes[1:] {
		if err := r.waitStreaming(ctx, primary, since); err != nil {
			return err
		}
	}
	return c.waitSync(ctx, primary)
}

// initdb creates the primary's data directory and its configuration.
func (c *Cluster) initdb(ctx context.Context, n *Node) error {
	args := []string{"-D", n.dataDir, "-U", c.opts.User, "-E", "UTF8", "--locale=C", "-N"}
	if c.opts.Password != "" {
		pw := filepath.Join(c.base, "pwfile")
		if err := c.run.writeFile(pw, []byte(c.opts.Password+"\n"), 0o600); err != nil {
			return fmt.Errorf("testcluster: %w", err)
		}
		defer os.Remove(pw)
		args = append(args, "--pwfile="+pw, "--auth-local=trust", "--auth-host=scram-sha-256")
	} else {
		args = append(args, "--auth=trust")
	}
	if err := c.run.run(ctx, "initdb", args...); err != nil {
		return err
	}
	conf := []string{
		"",
		"# testcluster",
		"listen_addresses = '127.0.0.1'",
		"unix_socket_directories = " + quoteLiteral(c.base),
		"fsync = off",
		"full_page_writes = off",
		"wal_level = replica",
		"wal_log_hints = on",
		"max_wal_senders = 16",
		"max_replication_slots = 16",
		"wal_keep_size = '256MB'",
		"hot_standby = on",
		"wal_receiver_status_interval = 1s",
		"wal_retrieve_retry_interval = 200ms",
		"shared_buffers = 16MB",
		"max_connections = 200",
		"log_line_prefix = '%m [%p] %q%a '",
		"log_min_messages = warning",
	}
	if c.opts.SynchronousCommit != "" {
		conf = append(conf, "synchronous_commit = "+c.opts.SynchronousCommit)
	}
	if c.opts.SyncReplicas > 0 {
		var names []string
		for i := 1; i <= c.opts.Replicas; i++ {
			names = append(names, "node"+strconv.Itoa(i))
		}
		conf = append(conf, fmt.Sprintf("synchronous_standby_names = 'FIRST %d (%s)'", c.opts.SyncReplicas, strings.Join(names, ", ")))
	}
	conf = append(conf, c.opts.Conf...)
	if err := appendFile(filepath.Join(n.dataDir, "postgresql.conf"), strings.Join(conf, "\n")+"\n"); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	return nil
}

// movePort gives node n a new free port, and points its fault point and
// every replication link that led to the old one at it.
func (c *Cluster) movePort(n *Node) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	old := n.pgAddr()
	n.port = ports[0]
	if err := n.fault.setUpstream(n.pgAddr()); err != nil {
		return err
	}
	for _, m := range c.nodes {
		if m.link.upstream() == old {
			if err := m.link.setUpstream(n.pgAddr()); err != nil {
				return err
			}
		}
	}
	c.opts.Logf("testcluster: %s: port taken, moved from %s to %s", n.name, old, n.pgAddr())
	return nil
}

// syncNames are the standbys the primary node0 has as synchronous ones when
// every replica streams from it: the first Options.SyncReplicas of
// synchronous_standby_names.
func (c *Cluster) syncNames() []string {
	var names []string
	for i := 1; i <= c.opts.SyncReplicas; i++ {
		names = append(names, "node"+strconv.Itoa(i))
	}
	return names
}

// waitSync waits until primary reports the standbys of syncNames as
// synchronous (sync_state 'sync' in pg_stat_replication): from then on a
// commit waits for them. It does nothing for an asynchronous cluster.
func (c *Cluster) waitSync(ctx context.Context, primary *Node) error {
	want := c.syncNames()
	if len(want) == 0 {
		return nil
	}
	var states string
	var lastErr error
	for {
		var ok bool
		err := primary.positionRow(ctx, `SELECT
			(SELECT count(*) FROM pg_stat_replication
			 WHERE state = 'streaming' AND sync_state = 'sync' AND application_name = ANY($1)) = cardinality($1),
			coalesce((SELECT string_agg(application_name || ' ' || state || ' ' || sync_state, ', ' ORDER BY application_name)
			          FROM pg_stat_replication), 'none')`,
			[]any{want}, &ok, &states)
		if err == nil && ok {
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("testcluster: %s does not have %s as synchronous standby(s) (pg_stat_replication: %s; last error: %v): %w",
				primary.name, strings.Join(want, ", "), states, lastErr, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Nodes returns every node, in creation order (node0 is the first primary).
func (c *Cluster) Nodes() []*Node { return append([]*Node(nil), c.nodes...) }

// Node returns node i.
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// Primary returns the node the cluster made primary last (node0 at Start,
// then the target of the latest Promote or Restore).
func (c *Cluster) Primary() *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[c.primary]
}

// Replicas returns every node but [Cluster.Primary].
func (c *Cluster) Replicas() []*Node {
	p := c.Primary()
	var rs []*Node
	for _, n := range c.nodes {
		if n != p {
			rs = append(rs, n)
		}
	}
	return rs
}

// WaitReplicated waits until every replica has replayed the primary's
// current WAL position: whatever was committed on the primary before the
// call can be read on every replica when it returns.
func (c *Cluster) WaitReplicated(ctx context.Context) error {
	lsn, err := c.Primary().CurrentLSN(ctx)
	if err != nil {
		return err
	}
	for _, r := range c.Replicas() {
		if err := r.WaitReplayed(ctx, lsn); err != nil {
			return err
		}
	}
	return nil
}

// Dir is the cluster's temporary directory, removed by Close. Each node's
// data directory and log file are in it.
func (c *Cluster) Dir() string { return c.base }

// Version is the PostgreSQL version string of the binaries in use.
func (c *Cluster) Version() string { return c.verStr }

// Major is the PostgreSQL major version of the binaries in use (13, 14, ...).
func (c *Cluster) Major() int { return c.version / 10000 }

// DSN returns one multi-host connection string (URL form) for every node,
// through the fault points, primary first, with sslmode=disable.
func (c *Cluster) DSN() string {
	p := c.Primary()
	nodes := []*Node{p}
	for _, n := range c.nodes {
		if n != p {
			nodes = append(nodes, n)
		}
	}
	return c.DSNOf(nodes...)
}

// DSNOf is [Cluster.DSN] naming only the given nodes, in the given order:
// for example the primary and one replica, for a client that is to use
// that replica only.
func (c *Cluster) DSNOf(nodes ...*Node) string {
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr()
	}
	return c.dsn(addrs)
}

func (c *Cluster) dsn(addrs []string) string {
	u := url.URL{Scheme: "postgres", Host: strings.Join(addrs, ","), Path: "/" + c.opts.Database, RawQuery: "sslmode=disable"}
	if c.opts.Password != "" {
		u.User = url.UserPassword(c.opts.User, c.opts.Password)
	} else {
		u.User = url.User(c.opts.User)
	}
	return u.String()
}

// Close stops every PostgreSQL process, PgBouncer and fault point the
// cluster started and removes its directory. It is safe to call more than once.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	poolers := append([]*Poolers(nil), c.poolers...)
	c.mu.Unlock()

	var errs []error
	for _, ps := range poolers {
		errs = append(errs, ps.Close())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range c.nodes {
		if err := n.Thaw(); err != nil {
			errs = append(errs, err)
		}
		n.closePositionConn()
		if err := n.stop(ctx, "immediate"); err != nil {
			if pid := postmasterPID(n.dataDir); pid > 0 && processAlive(pid) {
				errs = append(errs, err, killTree(ctx, pid, n.dataDir))
			}
		}
		n.fault.stop()
		n.link.stop()
	}
	if c.watchdogPipe != nil {
		c.watchdogPipe.Close() // the watchdog finds nothing running and removes base
		if err := c.watchdog.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("testcluster: watchdog: %w", err))
		}
	}
	if err := os.RemoveAll(c.base); err != nil {
		errs = append(errs, fmt.Errorf("testcluster: %w", err))
	}
	return errors.Join(errs...)
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testcluster: find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func quoteLiteral(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }

func pgpassEscape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	return strings.ReplaceAll(s, `:`, `\:`)
}

// Restore brings the cluster back to its state after Start, for tests that
// share one cluster and break it: it thaws frozen nodes, heals every fault,
// starts stopped nodes, resumes paused replay, and, when a failover happened
// or a node no longer streams from node0, makes node0 the primary again (a switchover
// that keeps the newest data) and makes the other nodes its standbys: the
// primary it switched over from, and the standbys that streamed from that
// one, follow node0 as they are (their WAL is all on node0); any other node,
// or one that does not follow, is rebuilt with a fresh base backup.
// It returns when every replica streams from node0 and has replayed the
// primary's current position and, with Options.SyncReplicas, when node0
// reports its synchronous standbys as such again; a PgBouncer of
// [Cluster.StartPoolers] whose process ended is started again on its port
// (its log's last lines logged).
func (c *Cluster) Restore(ctx context.Context) error {
	began := time.Now()
	// A link healed from a blackhole has its connection reset: only a
	// replication connection made after the heal counts as streaming.
	since := make([]time.Time, len(c.nodes))
	for i, n := range c.nodes {
		cut := n.link.proxy.Blackholed()
		if err := errors.Join(n.Thaw(), n.fault.Heal(), n.link.Heal()); err != nil {
			return err
		}
		if cut {
			since[i] = time.Now()
		}
	}
	for _, n := range c.nodes {
		if !n.Running() {
			if err := n.Start(ctx); err != nil {
				return err
			}
		}
	}
	type state struct {
		rec bool
		tli int
	}
	states := make([]state, len(c.nodes))
	for i, n := range c.nodes {
		rec, err := n.IsInRecovery(ctx)
		if err != nil {
			return err
		}
		states[i].rec = rec
		if !rec {
			if states[i].tli, err = n.Timeline(ctx); err != nil {
				return err
			}
		}
	}
	node0 := c.nodes[0]
	rebuilt := false
	// follow[i]: after a switchover to node0, node i can follow node0
	// without a new base backup.
	follow := make([]bool, len(c.nodes))
	primaries := 0
	for _, s := range states {
		if !s.rec {
			primaries++
		}
	}
	if states[0].rec || primaries > 1 {
		// Find the primary with the newest data: the highest timeline.
		src := -1
		for i, s := range states {
			if !s.rec && (src < 0 || s.tli > states[src].tli) {
				src = i
			}
		}
		if src > 0 {
			// A standby that streams from src holds only WAL that src
			// sent: once node0 has all of src's WAL, it can follow node0.
			for i, n := range c.nodes {
				if i != 0 && states[i].rec && n.link.upstream() == c.nodes[src].pgAddr() {
					follow[i] = true
				}
			}
		}
		switch {
		case src < 0:
			// Nobody is primary: promote node0.
			if err := node0.Promote(ctx); err != nil {
				return err
			}
		case src != 0:
			from := c.nodes[src]
			if err := node0.Rejoin(ctx, from); err != nil {
				return err
			}
			// Fast shutdown sends the remaining WAL to node0 first.
			if err := from.Stop(ctx); err != nil {
				return err
			}
			if err := node0.waitReceivedReplayed(ctx); err != nil {
				return err
			}
			if err := node0.Promote(ctx); err != nil {
				return err
			}
			// Stopped in fast mode once node0 had received all its WAL,
			// src can follow node0's new timeline as it is (a
			// switchover).
			follow[src] = true
		}
		rebuilt = true
	}
	c.mu.Lock()
	c.primary = 0
	c.mu.Unlock()

	target, err := node0.CurrentLSN(ctx)
	if err != nil {
		return err
	}
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for _, n := range c.nodes[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[n.index] = n.restoreStandby(ctx, node0, rebuilt, follow[n.index], target, since[n.index])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := c.waitSync(ctx, node0); err != nil {
		return err
	}
	if err := c.restorePoolers(ctx); err != nil {
		return err
	}
	c.opts.Logf("testcluster: restored in %s", time.Since(began).Round(time.Millisecond))
	return nil
}

// restoreStandby makes n a healthy standby of primary that has replayed
// target: as it is when it already streams from primary (on a connection
// made after since, when since is set), or, after a switchover (rebuild),
// when follow says it may follow primary and it does; else rebuilt.
func (n *Node) restoreStandby(ctx context.Context, primary *Node, rebuild, follow bool, target lagmeter.LSN, since time.Time) error {
	if rebuild && follow {
		err := n.followSwitchover(ctx, primary, target)
		if err == nil {
			return nil
		}
		n.c.opts.Logf("testcluster: %s does not follow %s (%v); rebuilding it", n.name, primary.name, err)
	}
	if !rebuild && n.link.upstream() == primary.pgAddr() {
		rec, err := n.IsInRecovery(ctx)
		if err != nil {
			return err
		}
		if rec {
			if err := n.ResumeReplay(ctx); err != nil {
				return err
			}
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := n.waitStreaming(wctx, primary, since)
			if err == nil {
				err = n.WaitReplayed(wctx, target)
			}
			cancel()
			if err == nil {
				return nil
			}
			n.c.opts.Logf("testcluster: %s does not follow %s (%v); rebuilding it", n.name, primary.name, err)
		}
	}
	if err := n.Rejoin(ctx, primary); err != nil {
		return err
	}
	return n.WaitReplayed(ctx, target)
}

// followSwitchover makes n, a standby or a primary stopped in fast mode,
// whose WAL primary holds entirely, a standby of primary without a new base
// backup, and waits until it streams from primary and has replayed target.
// PostgreSQL itself refuses to follow a timeline that forked off before
// what n has replayed; n then never streams, and this fails after a bound.
func (n *Node) followSwitchover(ctx context.Context, primary *Node, target lagmeter.LSN) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if n.Running() {
		if rec, err := n.IsInRecovery(ctx); err != nil {
			return err
		} else if !rec {
			return fmt.Errorf("testcluster: %s is a running primary", n.name)
		}
		if err := n.ResumeReplay(ctx); err != nil {
			return err
		}
		if err := n.Follow(ctx, primary); err != nil {
			return err
		}
	} else {
		// Its primary_conninfo, from its base backup, names its
		// replication link, which now leads to primary.
		if err := n.link.setUpstream(primary.pgAddr()); err != nil {
			return err
		}
		if err := n.c.run.writeFile(filepath.Join(n.dataDir, "standby.signal"), nil, 0o600); err != nil {
			return fmt.Errorf("testcluster: %w", err)
		}
		since := time.Now()
		if err := n.Start(ctx); err != nil {
			return err
		}
		if err := n.waitStreaming(ctx, primary, since); err != nil {
			return err
		}
	}
	if err := n.WaitReplayed(ctx, target); err != nil {
		return err
	}
	// A rebuilt standby's control file names the new timeline from the
	// start (its backup's checkpoint); one that followed names it only
	// from its next restartpoint, and a role without pg_read_all_stats
	// sees no other timeline of a standby. A checkpoint on primary,
	// replayed, then a restartpoint on n.
	if err := primary.Exec(ctx, "CHECKPOINT"); err != nil {
		return err
	}
	lsn, err := primary.CurrentLSN(ctx)
	if err != nil {
		return err
	}
	if err := n.WaitReplayed(ctx, lsn); err != nil {
		return err
	}
	if err := n.Exec(ctx, "CHECKPOINT"); err != nil {
		return err
	}
	var tli, want int
	if err := n.positionRow(ctx, "SELECT timeline_id FROM pg_control_checkpoint()", nil, &tli); err != nil {
		return err
	}
	if want, err = primary.Timeline(ctx); err != nil {
		return err
	}
	if tli != want {
		return fmt.Errorf("testcluster: %s: restartpoint on timeline %d, want %d", n.name, tli, want)
	}
	n.c.opts.Logf("testcluster: %s follows %s", n.name, primary.name)
	return nil
}

// waitReceivedReplayed waits until a standby whose primary has stopped has
// replayed all the WAL it received.
func (n *Node) waitReceivedReplayed(ctx context.Context) error {
	for {
		var done bool
		if err := n.positionRow(ctx, "SELECT coalesce(pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn(), false)", nil, &done); err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testcluster: %s has not replayed the WAL it received: %w", n.name, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
