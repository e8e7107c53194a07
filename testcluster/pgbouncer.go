//go:build unix

package testcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvPgBouncer names the environment variable that, when set, is the path
// of the pgbouncer program. It takes precedence over PATH and
// /usr/sbin/pgbouncer.
const EnvPgBouncer = "PGROUTED_PGBOUNCER"

// PgBouncerInstallCommand is the command that installs PgBouncer on Debian
// and Ubuntu. It is part of the error returned when it is not found.
const PgBouncerInstallCommand = "apt-get install -y pgbouncer"

// ErrNoPgBouncer is returned (wrapped) by [Cluster.StartPoolers] and
// [FindPgBouncer] when the pgbouncer program is not found. Its text says how
// to install it.
var ErrNoPgBouncer = errors.New("testcluster: pgbouncer not found; install it with `" + PgBouncerInstallCommand +
	"` (as root, or with sudo), or set " + EnvPgBouncer + " to its path")

// FindPgBouncer returns the path of the pgbouncer program: $PGROUTED_PGBOUNCER,
// else pgbouncer in PATH, else /usr/sbin/pgbouncer (where the distribution's
// package puts it, often outside an ordinary user's PATH). The error wraps
// [ErrNoPgBouncer].
func FindPgBouncer() (string, error) {
	if p := os.Getenv(EnvPgBouncer); p != "" {
		if !executable(p) {
			return "", fmt.Errorf("%w: %s=%s is not an executable file", ErrNoPgBouncer, EnvPgBouncer, p)
		}
		return p, nil
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/local/bin/pgbouncer"} {
		if executable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w (looked in PATH, /usr/sbin, /usr/local/sbin, /usr/local/bin)", ErrNoPgBouncer)
}

func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// PoolMode is PgBouncer's pool_mode: when a server connection goes back to
// the pool.
type PoolMode string

const (
	// PoolSession gives a client one server connection for as long as it
	// is connected: session state (SET, temporary tables, advisory locks,
	// LISTEN, prepared statements) behaves as without a pooler.
	PoolSession PoolMode = "session"
	// PoolTransaction gives a client a server connection for one
	// transaction (or one autocommit statement): the next may run on
	// another server connection, so session state does not carry over.
	PoolTransaction PoolMode = "transaction"
)

// Pooler is one PgBouncer process in front of one node. PgBouncer connects
// to the node through its fault point ([Node.Addr]), so the node's faults
// act between the pooler and PostgreSQL.
type Pooler struct {
	node *Node
	mode PoolMode
	dir  string
	port int

	cmd  *exec.Cmd
	done chan struct{} // closed when the process has been waited for
	log  *os.File
}

// Node is the node the pooler is in front of.
func (p *Pooler) Node() *Node { return p.node }

// Mode is the pooler's pool_mode.
func (p *Pooler) Mode() PoolMode { return p.mode }

// Addr is the host:port clients connect to.
func (p *Pooler) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

// DSN is a connection string for the node alone, through the pooler.
func (p *Pooler) DSN() string { return p.node.c.dsn([]string{p.Addr()}) }

// LogFile is PgBouncer's log.
func (p *Pooler) LogFile() string { return filepath.Join(p.dir, "pgbouncer.log") }

// String returns the pooler's node, mode and address; never a password.
func (p *Pooler) String() string {
	return "pgbouncer(" + string(p.mode) + ")@" + p.Addr() + " for " + p.node.name
}

// Poolers is one PgBouncer in front of each node of a cluster, all in the
// same pool mode. Start them with [Cluster.StartPoolers].
type Poolers struct {
	c    *Cluster
	mode PoolMode
	list []*Pooler // in node order
}

// Mode is the poolers' pool_mode.
func (ps *Poolers) Mode() PoolMode { return ps.mode }

// Of returns the pooler in front of node n.
func (ps *Poolers) Of(n *Node) *Pooler { return ps.list[n.index] }

// All returns the poolers, in node order.
func (ps *Poolers) All() []*Pooler { return append([]*Pooler(nil), ps.list...) }

// DSN returns one multi-host connection string (URL form) through the
// poolers, the current primary's first, as [Cluster.DSN] does for the
// nodes.
func (ps *Poolers) DSN() string {
	p := ps.c.Primary()
	addrs := []string{ps.Of(p).Addr()}
	for _, n := range ps.c.nodes {
		if n != p {
			addrs = append(addrs, ps.Of(n).Addr())
		}
	}
	return ps.c.dsn(addrs)
}

// Close stops every PgBouncer process of ps and removes their directories.
// It is safe to call more than once; [Cluster.Close] calls it too.
func (ps *Poolers) Close() error {
	var errs []error
	for _, p := range ps.list {
		if err := p.stop(); err != nil {
			errs = append(errs, err)
			continue // its files stay, for the watchdog to find
		}
		if err := os.RemoveAll(p.dir); err != nil {
			errs = append(errs, fmt.Errorf("testcluster: %w", err))
		}
	}
	ps.c.mu.Lock()
	for i, q := range ps.c.poolers {
		if q == ps {
			ps.c.poolers = append(ps.c.poolers[:i], ps.c.poolers[i+1:]...)
			break
		}
	}
	ps.c.mu.Unlock()
	return errors.Join(errs...)
}

// StartPoolers starts one PgBouncer (the distribution's program, see
// [FindPgBouncer]) in front of each node, in pool mode mode, each on a free
// loopback port, and returns when each one has served a query. When the
// process is root, PgBouncer runs as Options.OSUser, as PostgreSQL does.
//
// Clients authenticate to PgBouncer as they do to the nodes: with
// Options.Password, by SCRAM-SHA-256 against an auth_file written (mode
// 0600, in the cluster's directory) from the cluster's credentials, which
// PgBouncer also uses to log in to PostgreSQL; without it, by trust. The
// password appears in no log line nor error. The [pgbouncer] admin console
// (database "pgbouncer", SHOW POOLS, SHOW STATS) admits Options.User.
//
// Close the poolers with [Poolers.Close], or let [Cluster.Close] stop
// them; the cluster's watchdog stops them too when the process ends
// without either. When pgbouncer is not installed the error wraps
// [ErrNoPgBouncer], whose text gives the command that installs it.
func (c *Cluster) StartPoolers(ctx context.Context, mode PoolMode) (_ *Poolers, err error) {
	if mode != PoolSession && mode != PoolTransaction {
		return nil, fmt.Errorf("testcluster: StartPoolers: pool mode %q is neither %q nor %q", mode, PoolSession, PoolTransaction)
	}
	bin, err := FindPgBouncer()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errors.New("testcluster: StartPoolers: the cluster is closed")
	}
	c.poolerSeq++
	seq := c.poolerSeq
	ps := &Poolers{c: c, mode: mode}
	c.poolers = append(c.poolers, ps)
	c.mu.Unlock()
	defer func() {
		if err != nil {
			ps.Close()
		}
	}()
	began := time.Now()
	for _, n := range c.nodes {
		p := &Pooler{node: n, mode: mode, dir: filepath.Join(c.base, fmt.Sprintf("pgbouncer%d-%s", seq, n.name))}
		ps.list = append(ps.list, p)
		if err := p.start(ctx, bin); err != nil {
			return nil, err
		}
	}
	c.opts.Logf("testcluster: %d PgBouncer(s), pool_mode=%s, started in %s", len(ps.list), mode, time.Since(began).Round(time.Millisecond))
	return ps, nil
}

// authFile is PgBouncer's auth_file for the cluster's user.
func (c *Cluster) authFile() []byte {
	q := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	return []byte(q(c.opts.User) + " " + q(c.opts.Password) + "\n")
}

// config is the pooler's pgbouncer.ini.
func (p *Pooler) config() string {
	c := p.node.c
	auth := "trust"
	if c.opts.Password != "" {
		auth = "scram-sha-256"
	}
	host, port, _ := net.SplitHostPort(p.node.Addr())
	return strings.Join([]string{
		"; testcluster: PgBouncer in front of " + p.node.name,
		"[databases]",
		"* = host=" + host + " port=" + port,
		"",
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + strconv.Itoa(p.port),
		"unix_socket_dir =",
		"auth_type = " + auth,
		"auth_file = " + filepath.Join(p.dir, "userlist.txt"),
		"admin_users = " + c.opts.User,
		"stats_users = " + c.opts.User,
		"pool_mode = " + string(p.mode),
		"max_client_conn = 1000",
		"default_pool_size = 40",
		"server_login_retry = 1",
		"ignore_startup_parameters = extra_float_digits",
		"log_connections = 0",
		"log_disconnections = 0",
		"",
	}, "\n")
}

// start writes the pooler's files and runs PgBouncer on a free port until
// it serves a query (on another port when the one picked was taken).
func (p *Pooler) start(ctx context.Context, bin string) error {
	c := p.node.c
	if err := os.Mkdir(p.dir, 0o700); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	if err := c.run.own(p.dir); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	if err := c.run.writeFile(filepath.Join(p.dir, "userlist.txt"), c.authFile(), 0o600); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	for attempt := 0; ; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			return err
		}
		p.port = ports[0]
		ini := filepath.Join(p.dir, "pgbouncer.ini")
		if err := c.run.writeFile(ini, []byte(p.config()), 0o600); err != nil {
			return fmt.Errorf("testcluster: %w", err)
		}
		if err := p.spawn(bin, ini); err != nil {
			return err
		}
		err = p.waitReady(ctx)
		if err == nil {
			return nil
		}
		p.stop()
		if attempt < 3 && strings.Contains(p.logTail(), "Address already in use") {
			continue
		}
		return fmt.Errorf("%w\n%s", err, p.logTail())
	}
}

// spawn starts the pgbouncer process in the foreground of its own process
// group, as the PostgreSQL user when root, its output in its log file.
func (p *Pooler) spawn(bin, ini string) error {
	r := p.node.c.run
	log, err := os.OpenFile(p.LogFile(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	cmd := exec.Command(bin, ini)
	cmd.Dir = p.dir
	cmd.Env = r.env
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: r.cred}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("testcluster: start %s: %w", bin, err)
	}
	p.cmd, p.log, p.done = cmd, log, make(chan struct{})
	go func(done chan struct{}) {
		cmd.Wait()
		close(done)
	}(p.done)
	// The watchdog stops the processes named by the pid files of the
	// cluster's directory when the test process dies without Close.
	if err := r.writeFile(filepath.Join(p.dir, "pgbouncer.pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	return nil
}

// waitReady waits until a query through the pooler succeeds, the process
// ends, or ctx does.
func (p *Pooler) waitReady(ctx context.Context) error {
	var lastErr error
	for {
		select {
		case <-p.done:
			return fmt.Errorf("testcluster: %s exited at start (%v)", p, p.cmd.ProcessState)
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		lastErr = p.ping(cctx)
		cancel()
		if lastErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testcluster: %s does not serve a query (last error: %v): %w", p, lastErr, ctx.Err())
		case <-p.done:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ping runs SELECT 1 through the pooler.
func (p *Pooler) ping(ctx context.Context) error {
	cfg, err := pgx.ParseConfig(p.DSN() + "&application_name=testcluster")
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol)
	return err
}

// stop ends the PgBouncer process (SIGTERM, its immediate shutdown; SIGKILL
// after 10 s) and waits for it. Later calls do nothing.
func (p *Pooler) stop() error {
	if p.cmd == nil {
		return nil
	}
	defer func() {
		p.cmd = nil
		p.log.Close()
		os.Remove(filepath.Join(p.dir, "pgbouncer.pid"))
	}()
	select {
	case <-p.done:
		return nil
	default:
	}
	// The process group: PgBouncer does not fork in the foreground, but
	// nothing of it may outlive the pooler.
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
	}
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
		return fmt.Errorf("testcluster: %s did not stop on SIGTERM within 10s; killed", p)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("testcluster: %s (pid %d) still running after SIGKILL", p, p.cmd.Process.Pid)
	}
}

// restorePoolers starts again, on its port, each pooler whose process
// ended (a test's fault, or PgBouncer's own), logging why from its log,
// and waits until it serves a query.
func (c *Cluster) restorePoolers(ctx context.Context) error {
	c.mu.Lock()
	var ended []*Pooler
	for _, ps := range c.poolers {
		for _, p := range ps.list {
			if p.exited() {
				ended = append(ended, p)
			}
		}
	}
	c.mu.Unlock()
	if len(ended) == 0 {
		return nil
	}
	bin, err := FindPgBouncer()
	if err != nil {
		return err
	}
	for _, p := range ended {
		c.opts.Logf("testcluster: %s had exited (%v); starting it again. Its log ended:\n%s", p, p.cmd.ProcessState, p.logTail())
		p.stop() // reaped already: closes its log
		if err := p.spawn(bin, filepath.Join(p.dir, "pgbouncer.ini")); err != nil {
			return err
		}
		if err := p.waitReady(ctx); err != nil {
			return fmt.Errorf("%w\n%s", err, p.logTail())
		}
	}
	return nil
}

// exited reports whether the pooler's process ended (not by stop).
func (p *Pooler) exited() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// logTail returns the last lines of the pooler's log, for error messages.
func (p *Pooler) logTail() string {
	b, err := os.ReadFile(p.LogFile())
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return "--- " + p.node.name + " pgbouncer.log (last lines) ---\n" + strings.Join(lines, "\n")
}
