//go:build unix

package testcluster

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgrouted/pgrouted/testcluster/internal/faultproxy"
)

// PatroniInstallCommand is the command that installs Patroni and etcd on
// Debian and Ubuntu. It is part of the error returned when they are missing.
const PatroniInstallCommand = "apt-get install -y patroni etcd-server"

// ErrNoPatroni is returned (wrapped) by [StartPatroni] when the patroni or
// etcd program is not found. Its text says how to install them.
var ErrNoPatroni = errors.New("testcluster: Patroni and etcd (the programs patroni and etcd) not found; " +
	"install them with `" + PatroniInstallCommand + "` (as root, or with sudo)")

// The timings of the Patroni cluster (bootstrap.dcs): the leader key lives
// patroniTTL seconds without renewal, each member runs its loop every
// patroniLoopWait seconds and gives up a DCS or PostgreSQL operation after
// patroniRetryTimeout seconds (Patroni wants loop_wait + 2*retry_timeout <=
// ttl). A killed leader is replaced within about patroniTTL seconds.
const (
	patroniTTL          = 6
	patroniLoopWait     = 1
	patroniRetryTimeout = 2
)

// patroniScope is the Patroni cluster name (its key prefix in etcd).
const patroniScope = "pgrouted"

// PatroniOptions configure a Patroni cluster. The zero value is three
// members.
type PatroniOptions struct {
	// Members is the number of Patroni members (one leader, the others
	// replicas). Default 3.
	Members int

	// Parameters are extra PostgreSQL settings for every member (for
	// example "log_statement": "all"), in Patroni's dynamic configuration.
	Parameters map[string]string

	// BinDir is the directory of the PostgreSQL server binaries. Empty means
	// [FindBinDir].
	BinDir string

	// Patroni and Etcd are the paths of the patroni and etcd programs.
	// Empty means looking them up in PATH, then in /usr/bin, /usr/sbin and
	// /usr/local/bin.
	Patroni, Etcd string

	// OSUser is the unprivileged system user etcd, Patroni and PostgreSQL
	// run as when the process is root. Default "postgres". Ignored when not
	// root.
	OSUser string

	// Dir is the directory in which the cluster's temporary directory is
	// created. Empty means os.TempDir().
	Dir string

	// Logf, when set, receives one line per step, for example
	// testing.T.Logf. Lines never hold a password.
	Logf func(format string, args ...any)

	// HostAuth is the pg_hba.conf method of the members' TCP connections
	// other than replication: "scram-sha-256" (the default), "md5" or
	// "password".
	HostAuth string
}

// PatroniCluster is a running Patroni cluster: one etcd and
// [PatroniOptions].Members Patroni members, each running a PostgreSQL server,
// all on loopback ports in a temporary directory. Each member's REST API is
// reached through a network fault point ([PatroniMember.StopREST]). Its
// methods are safe for concurrent use, but tests that change the cluster
// should not run in parallel.
//
// Passwords: the PostgreSQL superuser ("postgres") and the replication user
// ("replicator") get random passwords, and TCP connections use
// scram-sha-256 ([PatroniOptions].HostAuth). [PatroniCluster.DSN] holds the
// superuser's password (do not log it); no error or log line of this
// package does.
//
// TLS: every member accepts TLS connections (ssl = on) with a certificate
// for 127.0.0.1 and localhost signed by a certificate authority of the
// cluster's own, [PatroniCluster.RootCert]: a DSN may ask for
// sslmode=verify-full with sslrootcert set to it, or for channel binding.
// [PatroniCluster.DSN] says sslmode=disable.
type PatroniCluster struct {
	opts      PatroniOptions
	bin       string // PostgreSQL binaries
	patroni   string // the patroni program
	etcdBin   string // the etcd program
	base      string
	run       *runner
	superPass string
	replPass  string
	rootCert  string // the CA's certificate (PEM), for sslrootcert
	tlsCert   string // the members' certificate and key
	tlsKey    string
	etcdPort  int
	etcd      *proc
	members   []*PatroniMember
	client    *http.Client

	watchdog     *exec.Cmd
	watchdogPipe *os.File

	mu     sync.Mutex
	closed bool
}

// PatroniMember is one Patroni member: a Patroni daemon and the PostgreSQL
// server it runs.
type PatroniMember struct {
	c        *PatroniCluster
	name     string
	pgPort   int
	restPort int
	dir      string // the member's directory: data/, the socket, pgpass
	dataDir  string
	confFile string
	logFile  string
	rest     *faultproxy.Proxy

	mu   sync.Mutex
	p    *proc // the Patroni daemon, nil when not running
	tags map[string]bool
}

// proc is a daemon started by the cluster, reaped by a goroutine.
type proc struct {
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process is reaped
	pidFile string
}

// patroniWatchdogScript is the watchdog of a Patroni cluster (see
// watchdogScript): when the test process ends it kills the daemons whose
// pids are in $base/run (Patroni, etcd), then the postmasters they leave
// behind, and removes the directory.
const patroniWatchdogScript = `base="$1"
cat >/dev/null
alive() { for p in "$@"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
for f in "$base"/run/*.pid; do
	[ -f "$f" ] || continue
	p=$(cat "$f")
	case "$p" in ''|*[!0-9]*) continue;; esac
	kill -KILL "$p" 2>/dev/null
done
pids=""
for f in "$base"/*/data/postmaster.pid; do
	[ -f "$f" ] || continue
	p=$(head -n 1 "$f")
	case "$p" in ''|*[!0-9]*) continue;; esac
	kill -QUIT "$p" 2>/dev/null && pids="$pids $p"
done
i=0
while [ -n "$pids" ] && alive $pids && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
[ -n "$pids" ] && kill -KILL $pids 2>/dev/null
rm -rf "$base"
`

// findProgram returns path when it is set and executable, or else looks
// the program name up in PATH, then in /usr/bin, /usr/sbin and
// /usr/local/bin.
func findProgram(name, path string) (string, error) {
	if path != "" {
		if fi, err := os.Stat(path); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%w (%s is not an executable program)", ErrNoPatroni, path)
		}
		return path, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/bin", "/usr/sbin", "/usr/local/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w (%s is not in PATH, /usr/bin, /usr/sbin or /usr/local/bin)", ErrNoPatroni, name)
}

// StartPatroni starts an etcd server and [PatroniOptions].Members Patroni
// members in a new temporary directory, on free loopback ports, and returns
// when a leader runs and every replica streams from it (GET /cluster reports
// each member running, and the leader's pg_stat_replication each replica
// streaming), or when ctx ends. The first member (pg0) bootstraps the
// cluster and is its first leader.
//
// The cluster uses Patroni's etcd3 support (etcd's v3 gRPC gateway), small
// timings (ttl 6s, loop_wait 1s, retry_timeout 2s) so that a failover takes
// seconds, and fsync off. The caller must Close it; when it does not (a
// panic, os.Exit, a killed test binary) a watchdog process stops every
// process and removes the directory when the calling process ends.
//
// When patroni or etcd is missing the error wraps [ErrNoPatroni]; when the
// PostgreSQL binaries are missing it wraps [ErrNoPostgres]. Both say how to
// install them.
//
// Another process may take one of the free ports picked for the members
// before Patroni or PostgreSQL binds it; StartPatroni then starts again on
// other ports, up to three times.
func StartPatroni(ctx context.Context, opts PatroniOptions) (*PatroniCluster, error) {
	for attempt := 1; ; attempt++ {
		c, err := startPatroni(ctx, opts)
		if err == nil || !errors.Is(err, errPortTaken) || attempt == 3 {
			return c, err
		}
		if opts.Logf != nil {
			opts.Logf("testcluster: %v; starting again on other ports", err)
		}
	}
}

// errPortTaken is the cause of a boot that failed because a member could
// not bind a port.
var errPortTaken = errors.New("testcluster: a Patroni member's port was taken by another process")

func startPatroni(ctx context.Context, opts PatroniOptions) (_ *PatroniCluster, err error) {
	began := time.Now()
	if opts.Members == 0 {
		opts.Members = 3
	}
	if opts.Members < 1 {
		return nil, fmt.Errorf("testcluster: PatroniOptions.Members (%d) must be at least 1", opts.Members)
	}
	switch opts.HostAuth {
	case "", "scram-sha-256", "md5", "password":
	default:
		return nil, fmt.Errorf("testcluster: PatroniOptions.HostAuth %q: want scram-sha-256, md5 or password", opts.HostAuth)
	}
	if opts.OSUser == "" {
		opts.OSUser = "postgres"
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	c := &PatroniCluster{opts: opts, bin: opts.BinDir, client: &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
	}}
	var errs []error
	if c.patroni, err = findProgram("patroni", opts.Patroni); err != nil {
		errs = append(errs, err)
	}
	if c.etcdBin, err = findProgram("etcd", opts.Etcd); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if c.bin == "" {
		if c.bin, err = FindBinDir(); err != nil {
			return nil, err
		}
	} else if missing := missingBins(c.bin); len(missing) > 0 {
		return nil, fmt.Errorf("%w: PatroniOptions.BinDir %s lacks %s", ErrNoPostgres, c.bin, strings.Join(missing, ", "))
	}
	if c.superPass, err = randomPassword(); err != nil {
		return nil, err
	}
	if c.replPass, err = randomPassword(); err != nil {
		return nil, err
	}

	// The name starts like a Cluster's, so that scripts/test.sh finds it
	// when it is left behind.
	if c.base, err = os.MkdirTemp(opts.Dir, "pgrouted-testcluster-patroni-"); err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	if c.run, err = newRunner(c.bin, c.base, opts.OSUser); err != nil {
		os.RemoveAll(c.base)
		return nil, err
	}
	if err := c.mkdir(c.base, filepath.Join(c.base, "run")); err != nil {
		os.RemoveAll(c.base)
		return nil, err
	}
	if err := c.writeTLS(); err != nil {
		os.RemoveAll(c.base)
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		os.RemoveAll(c.base)
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	c.watchdog = exec.Command("/bin/sh", "-c", patroniWatchdogScript, "testcluster-patroni-watchdog", c.base)
	c.watchdog.Dir = "/"
	c.watchdog.Env = c.run.env
	c.watchdog.Stdin = pr
	c.watchdog.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.run.cred}
	if err := c.watchdog.Start(); err != nil {
		pr.Close()
		pw.Close()
		os.RemoveAll(c.base)
		return nil, fmt.Errorf("testcluster: start watchdog: %w", err)
	}
	pr.Close()
	c.watchdogPipe = pw
	defer func() {
		if err != nil {
			c.Close()
		}
	}()

	if err := c.startEtcd(ctx); err != nil {
		return nil, err
	}
	ports, err := freePorts(2 * opts.Members)
	if err != nil {
		return nil, err
	}
	if err := c.wrapBinaries(); err != nil {
		return nil, err
	}
	for i := 0; i < opts.Members; i++ {
		m := &PatroniMember{c: c, name: "pg" + strconv.Itoa(i), pgPort: ports[2*i], restPort: ports[2*i+1], tags: map[string]bool{}}
		m.dir = filepath.Join(c.base, m.name)
		m.dataDir = filepath.Join(m.dir, "data")
		m.confFile = filepath.Join(c.base, m.name+".yml")
		m.logFile = filepath.Join(c.base, m.name+".log")
		if m.rest, err = faultproxy.New(m.directREST()); err != nil {
			return nil, fmt.Errorf("testcluster: start the fault point of %s's REST API: %w", m.name, err)
		}
		c.members = append(c.members, m)
		if err := c.mkdir(m.dir); err != nil {
			return nil, err
		}
		if err := m.writeConfig(); err != nil {
			return nil, err
		}
	}
	// A member whose Patroni exits, or that cannot bind its port, ends the
	// boot at once rather than when ctx does.
	ctx, stopWatch := c.watchBoot(ctx)
	defer stopWatch()
	defer func() {
		if cause := context.Cause(ctx); err != nil && cause != nil && cause != ctx.Err() {
			err = fmt.Errorf("%w (%v)", cause, err)
		}
	}()
	// pg0 bootstraps the cluster; the others, started a moment later, wait
	// for it to lead and clone it.
	if err := c.members[0].startDaemon(); err != nil {
		return nil, err
	}
	if err := poll(ctx, 20*time.Millisecond, func() (bool, error) {
		return c.bootstrapping(ctx), nil
	}); err != nil {
		return nil, fmt.Errorf("testcluster: pg0 does not begin the bootstrap of the Patroni cluster: %w%s", err, c.tails())
	}
	for _, m := range c.members[1:] {
		if err := m.startDaemon(); err != nil {
			return nil, err
		}
	}
	if _, err := c.WaitLeader(ctx, nil); err != nil {
		return nil, err
	}
	if err := c.WaitHealthy(ctx); err != nil {
		return nil, err
	}
	c.opts.Logf("testcluster: Patroni cluster of %d members up in %s (%s)", len(c.members), time.Since(began).Round(time.Millisecond), c.base)
	return c, nil
}

// watchBoot returns a context that ends, with the reason as its cause,
// when a started member's Patroni exits or its log says a port is taken
// (wrapping errPortTaken), and a function that stops watching.
func (c *PatroniCluster) watchBoot(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			for _, m := range c.members {
				p := m.daemon()
				if p == nil {
					continue
				}
				if line := portTaken(m.logFile); line != "" {
					cancel(fmt.Errorf("%w: %s: %s", errPortTaken, m.name, c.redact(line)))
					return
				}
				if !p.running() {
					cancel(fmt.Errorf("testcluster: %s's Patroni exited: %s", m.name, c.redact(logTail(m.logFile, 10))))
					return
				}
			}
		}
	}()
	return ctx, func() {
		close(done)
		wg.Wait()
		cancel(nil)
	}
}

// portTaken returns the line of a member's log that says a port it
// wanted is taken, or "".
func portTaken(logFile string) string {
	b, _ := os.ReadFile(logFile)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "Address already in use") || strings.Contains(line, "could not bind") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// bootstrapping reports whether etcd holds the cluster's initialize key
// (/service/<scope>/initialize), which the member that bootstraps the
// cluster takes before it runs initdb. It asks etcd's v3 JSON gateway.
func (c *PatroniCluster) bootstrapping(ctx context.Context) bool {
	key := base64.StdEncoding.EncodeToString([]byte("/service/" + patroniScope + "/initialize"))
	body := strings.NewReader(`{"key":"` + key + `","count_only":true}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.EtcdURL()+"/v3/kv/range", body)
	if err != nil {
		return false
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var r struct {
		Count string `json:"count"`
	}
	if json.NewDecoder(resp.Body).Decode(&r) != nil {
		return false
	}
	return r.Count == "1"
}

func randomPassword() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("testcluster: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// noSyncWrapper runs a PostgreSQL program with --no-sync (but not for
// --help and --version, which Patroni asks pg_rewind for).
const noSyncWrapper = `#!/bin/sh
case "$1" in --help|--version|-V|'-?') exec %[1]q "$@";; esac
exec %[1]q --no-sync "$@"
`

// wrapBinaries fills $base/bin, Patroni's bin_dir: a symbolic link to each
// PostgreSQL program, except initdb and pg_rewind, which are wrapped to run
// with --no-sync: Patroni does not let its configuration pass that option
// to them, and syncing a throw-away data directory costs seconds at boot
// and at every rewind. pg_basebackup gets --no-sync from the configuration.
func (c *PatroniCluster) wrapBinaries() error {
	dir := filepath.Join(c.base, "bin")
	if err := c.mkdir(dir); err != nil {
		return err
	}
	entries, err := os.ReadDir(c.bin)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	for _, e := range entries {
		real, link := filepath.Join(c.bin, e.Name()), filepath.Join(dir, e.Name())
		switch e.Name() {
		case "initdb", "pg_rewind":
			if err := c.run.writeFile(link, []byte(fmt.Sprintf(noSyncWrapper, real)), 0o755); err != nil {
				return fmt.Errorf("testcluster: %w", err)
			}
		default:
			if err := os.Symlink(real, link); err != nil {
				return fmt.Errorf("testcluster: %w", err)
			}
		}
	}
	return nil
}

// mkdir creates directories owned by the user the daemons run as.
func (c *PatroniCluster) mkdir(dirs ...string) error {
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("testcluster: %w", err)
		}
		if err := c.run.own(d); err != nil {
			return fmt.Errorf("testcluster: %w", err)
		}
	}
	return nil
}

// redact replaces the cluster's passwords in s.
func (c *PatroniCluster) redact(s string) string {
	for _, p := range []string{c.superPass, c.replPass} {
		if p != "" {
			s = strings.ReplaceAll(s, p, "xxxxx")
		}
	}
	return s
}

// startProc starts a daemon as the cluster's user, its output appended to
// logFile, and records its pid for the watchdog.
func (c *PatroniCluster) startProc(name, logFile, program string, args ...string) (*proc, error) {
	out, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	defer out.Close()
	if err := c.run.own(logFile); err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	cmd := exec.Command(program, args...)
	cmd.Dir = c.base
	cmd.Env = c.run.env
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: a Ctrl-C meant for the test does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.run.cred}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testcluster: start %s: %w", name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), pidFile: filepath.Join(c.base, "run", name+".pid")}
	if err := os.WriteFile(p.pidFile, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		cmd.Process.Kill()
	}
	go func() {
		cmd.Wait()
		os.Remove(p.pidFile)
		close(p.done)
	}()
	return p, nil
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop sends sig and waits until the process is reaped, for at most grace,
// then kills it. It returns an error when even SIGKILL does not end it
// before ctx does.
func (p *proc) stop(ctx context.Context, sig syscall.Signal, grace time.Duration) error {
	if !p.running() {
		return nil
	}
	p.cmd.Process.Signal(sig)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	p.cmd.Process.Kill()
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("testcluster: process %d still running after SIGKILL: %w", p.cmd.Process.Pid, ctx.Err())
	}
}

// startEtcd starts the cluster's etcd on two free loopback ports (a new
// pair when another process takes one first) and waits until it is healthy.
func (c *PatroniCluster) startEtcd(ctx context.Context) error {
	logFile := filepath.Join(c.base, "etcd.log")
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		ports, err := freePorts(2)
		if err != nil {
			return err
		}
		client := "http://127.0.0.1:" + strconv.Itoa(ports[0])
		peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
		dataDir := filepath.Join(c.base, "etcd")
		os.RemoveAll(dataDir)
		p, err := c.startProc("etcd", logFile, c.etcdBin,
			"--name", "etcd0", "--data-dir", dataDir,
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "etcd0="+peer, "--initial-cluster-state", "new",
			"--logger", "zap", "--log-level", "warn")
		if err != nil {
			return err
		}
		c.etcd, c.etcdPort = p, ports[0]
		lastErr = poll(ctx, 20*time.Millisecond, func() (bool, error) {
			if !p.running() {
				return false, errors.New("etcd exited")
			}
			resp, err := c.client.Get(client + "/health")
			if err != nil {
				return false, nil
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK && bytes.Contains(b, []byte(`"true"`)), nil
		})
		if lastErr == nil {
			c.opts.Logf("testcluster: etcd on %s", client)
			return nil
		}
		p.stop(ctx, syscall.SIGKILL, 0)
		if ctx.Err() != nil || !strings.Contains(logTail(logFile, 30), "address already in use") {
			break
		}
	}
	return fmt.Errorf("testcluster: etcd does not start: %w\n%s", lastErr, logTail(logFile, 15))
}

// poll calls f every interval until it returns true or an error, or ctx
// ends.
func poll(ctx context.Context, interval time.Duration, f func() (bool, error)) error {
	for {
		ok, err := f()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// logTail returns the last n lines of a log file, for error messages.
func logTail(file string, n int) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "--- " + filepath.Base(file) + " (last lines) ---\n" + strings.Join(lines, "\n")
}

// writeConfig writes the member's Patroni configuration (JSON, which is
// YAML), with its current tags.
func (m *PatroniMember) writeConfig() error {
	c := m.c
	hostAuth := c.opts.HostAuth
	if hostAuth == "" {
		hostAuth = "scram-sha-256"
	}
	params := map[string]any{
		"wal_level":                    "replica",
		"hot_standby":                  "on",
		"wal_log_hints":                "on",
		"max_wal_senders":              16,
		"max_replication_slots":        16,
		"wal_keep_size":                "256MB",
		"max_connections":              200,
		"fsync":                        "off",
		"shared_buffers":               "16MB",
		"wal_receiver_status_interval": "1s",
		"wal_retrieve_retry_interval":  "200ms",
		"log_min_messages":             "warning",
		"log_line_prefix":              "%m [%p] %q%a ",
	}
	for k, v := range c.opts.Parameters {
		params[k] = v
	}
	tags := map[string]any{}
	m.mu.Lock()
	for k, v := range m.tags {
		if v {
			tags[k] = true
		}
	}
	m.mu.Unlock()
	conf := map[string]any{
		"scope": patroniScope,
		"name":  m.name,
		"restapi": map[string]any{
			"listen":          m.directREST(),
			"connect_address": m.directREST(),
		},
		"etcd3": map[string]any{"hosts": "127.0.0.1:" + strconv.Itoa(c.etcdPort)},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				"ttl":                     patroniTTL,
				"loop_wait":               patroniLoopWait,
				"retry_timeout":           patroniRetryTimeout,
				"maximum_lag_on_failover": 64 << 20,
				"postgresql": map[string]any{
					"use_pg_rewind": true,
					"use_slots":     true,
					"parameters":    params,
				},
			},
			"initdb": []any{
				map[string]any{"encoding": "UTF8"},
				map[string]any{"locale": "C"},
				map[string]any{"auth-local": "trust"},
				map[string]any{"auth-host": "scram-sha-256"},
			},
		},
		"postgresql": map[string]any{
			"listen":          m.Addr(),
			"connect_address": m.Addr(),
			"data_dir":        m.dataDir,
			"bin_dir":         filepath.Join(c.base, "bin"),
			"basebackup":      []any{map[string]any{"checkpoint": "fast"}, "no-sync"},
			"pgpass":          filepath.Join(m.dir, "pgpass"),
			"authentication": map[string]any{
				"superuser":   map[string]any{"username": "postgres", "password": c.superPass},
				"replication": map[string]any{"username": "replicator", "password": c.replPass},
			},
			"parameters": map[string]any{"unix_socket_directories": m.dir,
				"ssl": "on", "ssl_cert_file": c.tlsCert, "ssl_key_file": c.tlsKey},
			"pg_hba": []string{
				"local all all trust",
				"host replication replicator 127.0.0.1/32 scram-sha-256",
				"host all all 127.0.0.1/32 " + hostAuth,
			},
			"remove_data_directory_on_rewind_failure":     true,
			"remove_data_directory_on_diverged_timelines": true,
		},
		"watchdog": map[string]any{"mode": "off"},
		"tags":     tags,
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	// Written next to the file and renamed, so that a reload never reads
	// half a file.
	tmp := m.confFile + ".new"
	if err := c.run.writeFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("testcluster: write %s configuration: %w", m.name, err)
	}
	if err := os.Rename(tmp, m.confFile); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	return nil
}

// startDaemon starts the member's Patroni daemon.
func (m *PatroniMember) startDaemon() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.p != nil && m.p.running() {
		return nil
	}
	p, err := m.c.startProc(m.name, m.logFile, m.c.patroni, m.confFile)
	if err != nil {
		return err
	}
	m.p = p
	return nil
}

func (m *PatroniMember) daemon() *proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.p
}

// PatroniState is Patroni's GET /cluster answer.
type PatroniState struct {
	Members []PatroniMemberState `json:"members"`
}

// PatroniMemberState is one member in [PatroniState].
type PatroniMemberState struct {
	Name     string          `json:"name"`
	Role     string          `json:"role"`  // "leader", "replica", "standby_leader", ...
	State    string          `json:"state"` // "running", "streaming", "stopped", "starting", ...
	APIURL   string          `json:"api_url"`
	Host     string          `json:"host"`
	Port     int             `json:"port"`
	Timeline int             `json:"timeline"`
	Lag      json.RawMessage `json:"lag,omitempty"` // bytes, or "unknown"
	Tags     map[string]any  `json:"tags,omitempty"`
}

// Member returns the member state named name, or false.
func (s PatroniState) Member(name string) (PatroniMemberState, bool) {
	for _, m := range s.Members {
		if m.Name == name {
			return m, true
		}
	}
	return PatroniMemberState{}, false
}

// RunningLeader returns the member reported as a running leader ("leader",
// or "master" before Patroni 3), or false.
func (s PatroniState) RunningLeader() (PatroniMemberState, bool) {
	for _, m := range s.Members {
		if (m.Role == "leader" || m.Role == "master") && m.State == "running" {
			return m, true
		}
	}
	return PatroniMemberState{}, false
}

// State asks the members' REST APIs (directly, not through their fault
// points), in order, for GET /cluster and returns the first answer.
func (c *PatroniCluster) State(ctx context.Context) (PatroniState, error) {
	var errs []error
	for _, m := range c.members {
		if p := m.daemon(); p == nil || !p.running() {
			continue
		}
		var s PatroniState
		if err := c.getJSON(ctx, m.DirectRESTURL()+"/cluster", &s); err != nil {
			errs = append(errs, err)
			continue
		}
		return s, nil
	}
	if len(errs) == 0 {
		return PatroniState{}, errors.New("testcluster: no Patroni member is running")
	}
	return PatroniState{}, errors.Join(errs...)
}

func (c *PatroniCluster) getJSON(ctx context.Context, u string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("testcluster: GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("testcluster: GET %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("testcluster: GET %s: %s: %s", u, resp.Status, c.redact(string(b)))
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("testcluster: GET %s: %w", u, err)
	}
	return nil
}

// Members returns every member, pg0 first.
func (c *PatroniCluster) Members() []*PatroniMember {
	return append([]*PatroniMember(nil), c.members...)
}

// Member returns the member named name (pg0, pg1, ...), or nil.
func (c *PatroniCluster) Member(name string) *PatroniMember {
	for _, m := range c.members {
		if m.name == name {
			return m
		}
	}
	return nil
}

// MemberNames returns the members' names, pg0 first.
func (c *PatroniCluster) MemberNames() []string {
	var ns []string
	for _, m := range c.members {
		ns = append(ns, m.name)
	}
	return ns
}

// Endpoints returns the members' REST API URLs (http://127.0.0.1:port), pg0
// first, each through the member's fault point: what a Patroni provider is
// given as pgrouted_patroni_endpoints.
func (c *PatroniCluster) Endpoints() []string {
	var es []string
	for _, m := range c.members {
		es = append(es, m.RESTURL())
	}
	return es
}

// DSN returns one multi-host connection string (URL form) naming every
// member's PostgreSQL address, pg0 first, as the superuser postgres with its
// password, database postgres, sslmode=disable. The addresses are the ones
// Patroni reports as the members' host and port. It holds the password: do
// not log it.
func (c *PatroniCluster) DSN() string { return c.dsn(c.members...) }

// DSNOf is [PatroniCluster.DSN] naming only the given members, in the given
// order.
func (c *PatroniCluster) DSNOf(members ...*PatroniMember) string { return c.dsn(members...) }

func (c *PatroniCluster) dsn(members ...*PatroniMember) string {
	var addrs []string
	for _, m := range members {
		addrs = append(addrs, m.Addr())
	}
	u := url.URL{Scheme: "postgres", User: url.UserPassword("postgres", c.superPass),
		Host: strings.Join(addrs, ","), Path: "/postgres", RawQuery: "sslmode=disable"}
	return u.String()
}

// RootCert is the path of the certificate (PEM) of the authority that
// signed the members' TLS certificate, which names 127.0.0.1 and
// localhost: a DSN's sslrootcert for sslmode=verify-full.
func (c *PatroniCluster) RootCert() string { return c.rootCert }

// writeTLS makes the cluster's certificate authority and the members'
// certificate (ECDSA P-256, valid for 127.0.0.1 and localhost, for a
// day), and writes them in the cluster's directory, the key readable by
// the PostgreSQL user alone.
func (c *PatroniCluster) writeTLS() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pgrouted testcluster CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	c.rootCert = filepath.Join(c.base, "root.crt")
	c.tlsCert = filepath.Join(c.base, "server.crt")
	c.tlsKey = filepath.Join(c.base, "server.key")
	for _, f := range []struct {
		path  string
		block *pem.Block
		perm  os.FileMode
	}{
		{c.rootCert, &pem.Block{Type: "CERTIFICATE", Bytes: caDER}, 0o644},
		{c.tlsCert, &pem.Block{Type: "CERTIFICATE", Bytes: leafDER}, 0o644},
		{c.tlsKey, &pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}, 0o600},
	} {
		if err := c.run.writeFile(f.path, pem.EncodeToMemory(f.block), f.perm); err != nil {
			return fmt.Errorf("testcluster: %w", err)
		}
	}
	return nil
}

// Dir is the cluster's temporary directory, removed by Close: etcd's data
// and log, and each member's directory, configuration and log.
func (c *PatroniCluster) Dir() string { return c.base }

// EtcdURL is the etcd client URL.
func (c *PatroniCluster) EtcdURL() string { return "http://127.0.0.1:" + strconv.Itoa(c.etcdPort) }

// Leader returns the member GET /cluster reports as the running leader.
func (c *PatroniCluster) Leader(ctx context.Context) (*PatroniMember, error) {
	s, err := c.State(ctx)
	if err != nil {
		return nil, err
	}
	l, ok := s.RunningLeader()
	if !ok {
		return nil, fmt.Errorf("testcluster: Patroni reports no running leader: %s", s)
	}
	if m := c.Member(l.Name); m != nil {
		return m, nil
	}
	return nil, fmt.Errorf("testcluster: Patroni reports an unknown leader %q", l.Name)
}

// String sums the state up: name role state per member.
func (s PatroniState) String() string {
	var parts []string
	for _, m := range s.Members {
		p := m.Name + " " + m.Role + " " + m.State
		if m.Timeline > 0 {
			p += " tl" + strconv.Itoa(m.Timeline)
		}
		var keys []string
		for k := range m.Tags {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if len(keys) > 0 {
			p += " tags=" + strings.Join(keys, "+")
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return "no member"
	}
	return strings.Join(parts, ", ")
}

// WaitLeader waits until GET /cluster reports a running leader other than
// not (nil: any) and that member's PostgreSQL is out of recovery, and
// returns it.
func (c *PatroniCluster) WaitLeader(ctx context.Context, not *PatroniMember) (*PatroniMember, error) {
	var leader *PatroniMember
	var last string
	var lastErr error
	err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
		s, err := c.State(ctx)
		if err != nil {
			lastErr = err
			return false, nil
		}
		last = s.String()
		l, ok := s.RunningLeader()
		if !ok || (not != nil && l.Name == not.name) {
			return false, nil
		}
		m := c.Member(l.Name)
		if m == nil {
			return false, nil
		}
		rec, err := m.IsInRecovery(ctx)
		if err != nil || rec {
			lastErr = err
			return false, nil
		}
		leader = m
		return true, nil
	})
	if err != nil {
		what := "running leader"
		if not != nil {
			what += " other than " + not.name
		}
		return nil, fmt.Errorf("testcluster: Patroni reports no %s (last state: %s; last error: %v): %w", what, last, lastErr, err)
	}
	return leader, nil
}

// WaitHealthy waits until every member runs: one running leader, out of
// recovery, and every other member a running replica that the leader's
// pg_stat_replication shows streaming.
func (c *PatroniCluster) WaitHealthy(ctx context.Context) error {
	var last string
	var lastErr error
	err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
		s, err := c.State(ctx)
		if err != nil {
			lastErr = err
			return false, nil
		}
		last = s.String()
		ok, err := c.healthy(ctx, s, c.members)
		lastErr = err
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("testcluster: the Patroni cluster is not healthy (last state: %s; last error: %v): %w%s",
			last, lastErr, err, c.tails())
	}
	return nil
}

// healthy reports whether s shows a running leader and every member of
// want running, the replicas streaming from the leader.
func (c *PatroniCluster) healthy(ctx context.Context, s PatroniState, want []*PatroniMember) (bool, error) {
	l, ok := s.RunningLeader()
	if !ok {
		return false, nil
	}
	leader := c.Member(l.Name)
	if leader == nil {
		return false, nil
	}
	var replicas []string
	for _, m := range want {
		ms, ok := s.Member(m.name)
		if !ok || (ms.State != "running" && ms.State != "streaming") {
			return false, nil
		}
		if m != leader {
			replicas = append(replicas, m.name)
		}
	}
	var rec bool
	var streaming int
	err := leader.QueryRow(ctx, `SELECT pg_is_in_recovery(), (SELECT count(*) FROM pg_stat_replication
		WHERE state = 'streaming' AND application_name = ANY($1))`, []any{replicas}, &rec, &streaming)
	if err != nil {
		return false, err
	}
	return !rec && streaming == len(replicas), nil
}

// tails returns the end of every member's log, for errors.
func (c *PatroniCluster) tails() string {
	var b strings.Builder
	for _, m := range c.members {
		b.WriteString("\n")
		b.WriteString(c.redact(logTail(m.logFile, 8)))
	}
	return b.String()
}

// Switchover makes candidate (a replica's name; "" for whichever replica
// Patroni picks) the leader with Patroni's REST API (POST /switchover on
// the current leader), and returns the new leader once GET /cluster reports
// it running and its PostgreSQL is out of recovery. The old leader comes
// back as a replica by itself, a few seconds later ([PatroniCluster.WaitHealthy]
// waits for it). Patroni refuses a switchover while no replica is fit to
// take over; Switchover retries until ctx ends.
func (c *PatroniCluster) Switchover(ctx context.Context, candidate string) (*PatroniMember, error) {
	began := time.Now()
	if candidate != "" && c.Member(candidate) == nil {
		return nil, fmt.Errorf("testcluster: switchover: no member %q", candidate)
	}
	old, err := c.WaitLeader(ctx, nil)
	if err != nil {
		return nil, err
	}
	if old.name == candidate {
		return nil, fmt.Errorf("testcluster: switchover: %s is already the leader", candidate)
	}
	body := map[string]string{"leader": old.name}
	if candidate != "" {
		body["candidate"] = candidate
	}
	b, _ := json.Marshal(body)
	var last string
	err = poll(ctx, 500*time.Millisecond, func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, old.DirectRESTURL()+"/switchover", bytes.NewReader(b))
		if err != nil {
			return false, err
		}
		req.Header.Set("Content-Type", "application/json")
		client := *c.client
		client.Timeout = 30 * time.Second
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = resp.Status + ": " + strings.TrimSpace(c.redact(string(out)))
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return nil, fmt.Errorf("testcluster: switchover from %s: Patroni answered %s: %w", old.name, last, err)
	}
	leader, err := c.WaitLeader(ctx, old)
	if err != nil {
		return nil, err
	}
	if candidate != "" && leader.name != candidate {
		return nil, fmt.Errorf("testcluster: switchover to %s made %s the leader", candidate, leader.name)
	}
	c.opts.Logf("testcluster: switchover from %s to %s in %s", old.name, leader.name, time.Since(began).Round(time.Millisecond))
	return leader, nil
}

// KillLeader kills the leader as a crash would (see [PatroniMember.Kill])
// and returns it at once, without waiting for a replica to take over:
// [PatroniCluster.WaitLeader] with the killed member waits for that (about
// the leader key's ttl, 6s). [PatroniMember.Start] brings the killed member
// back as a replica.
func (c *PatroniCluster) KillLeader(ctx context.Context) (*PatroniMember, error) {
	leader, err := c.WaitLeader(ctx, nil)
	if err != nil {
		return nil, err
	}
	return leader, leader.Kill(ctx)
}

// Restore brings the cluster back to health after a test that broke it: it
// heals every REST fault point, clears every tag, starts every stopped
// member, and waits until every member runs, the replicas streaming from
// the leader (whichever member leads).
func (c *PatroniCluster) Restore(ctx context.Context) error {
	for _, m := range c.members {
		if err := m.StartREST(); err != nil {
			return err
		}
		m.mu.Lock()
		tagged := len(m.tags) > 0
		m.mu.Unlock()
		if tagged {
			if err := m.ClearTags(ctx); err != nil {
				return err
			}
		}
		if p := m.daemon(); p == nil || !p.running() {
			if err := m.startDaemon(); err != nil {
				return err
			}
		}
	}
	return c.WaitHealthy(ctx)
}

// Close stops every process the cluster started, quickly rather than
// gracefully: it kills the Patroni daemons, shuts their PostgreSQL servers
// down in immediate mode (killing what does not stop in time), kills etcd,
// closes the fault points and removes the directory. It is safe to call
// more than once.
func (c *PatroniCluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()

	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make([]error, len(c.members)+1)
	var wg sync.WaitGroup
	for i, m := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.halt(ctx)
		}()
	}
	wg.Wait()
	if c.etcd != nil {
		// Its data is thrown away: no need for its graceful stop, which
		// takes seconds.
		errs[len(c.members)] = c.etcd.stop(ctx, syscall.SIGKILL, 0)
	}
	for _, m := range c.members {
		if m.rest != nil {
			m.rest.Close()
		}
	}
	// The directory goes first: the watchdog then finds no pid file to
	// act on (a killed postmaster's postmaster.pid names a process that
	// may still be a zombie, or whose pid may be reused) and ends at once.
	if err := os.RemoveAll(c.base); err != nil {
		errs = append(errs, fmt.Errorf("testcluster: %w", err))
	}
	if c.watchdogPipe != nil {
		c.watchdogPipe.Close()
		if err := c.watchdog.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("testcluster: watchdog: %w", err))
		}
	}
	c.opts.Logf("testcluster: Patroni cluster closed in %s", time.Since(began).Round(time.Millisecond))
	return errors.Join(errs...)
}

// shutdown stops the member's Patroni gracefully (SIGTERM: it stops
// PostgreSQL first) and then makes sure its postmaster is gone.
func (m *PatroniMember) shutdown(ctx context.Context) error {
	var err error
	if p := m.daemon(); p != nil {
		err = p.stop(ctx, syscall.SIGTERM, 20*time.Second)
	}
	return errors.Join(err, m.stopPostmaster(ctx))
}

// halt ends the member at once, for Close: SIGKILL to Patroni, so that it
// neither restarts nor promotes anything, then an immediate shutdown of its
// PostgreSQL (SIGQUIT, which lets the postmaster release its shared memory).
func (m *PatroniMember) halt(ctx context.Context) error {
	var err error
	if p := m.daemon(); p != nil {
		err = p.stop(ctx, syscall.SIGKILL, 0)
	}
	return errors.Join(err, m.stopPostmaster(ctx))
}

// stopPostmaster shuts down a postmaster left running in immediate mode,
// and kills it when it does not stop in 10s.
func (m *PatroniMember) stopPostmaster(ctx context.Context) error {
	pid := postmasterPID(m.dataDir)
	if pid <= 0 || !processAlive(pid) {
		return nil
	}
	syscall.Kill(pid, syscall.SIGQUIT)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := poll(wctx, 10*time.Millisecond, func() (bool, error) { return !processAlive(pid), nil })
	cancel()
	if err == nil {
		return nil
	}
	return killGone(ctx, pid)
}

// killGone sends SIGKILL to pid and its children and waits until each is
// reaped or a zombie (a postmaster started by Patroni is not our child; its
// new parent reaps it).
func killGone(ctx context.Context, pid int) error {
	pids := append([]int{pid}, childrenOf(pid)...)
	for _, p := range pids {
		syscall.Kill(p, syscall.SIGKILL)
	}
	return poll(ctx, 10*time.Millisecond, func() (bool, error) {
		for _, p := range pids {
			if processAlive(p) {
				return false, nil
			}
		}
		return true, nil
	})
}

// Name is the member's Patroni name: pg0, pg1, ...; also the
// application_name of its replication connection.
func (m *PatroniMember) Name() string { return m.name }

// String returns the member's name and PostgreSQL address; never a password.
func (m *PatroniMember) String() string { return m.name + "@" + m.Addr() }

// Addr is the member's PostgreSQL host:port, as Patroni reports it.
func (m *PatroniMember) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.pgPort)) }

// Port is the port of Addr (what inet_server_port() returns on it).
func (m *PatroniMember) Port() int { return m.pgPort }

// DSN is a connection string for this member alone (with the password).
func (m *PatroniMember) DSN() string { return m.c.dsn(m) }

// RESTURL is the URL of the member's REST API through its fault point
// (what [PatroniCluster.Endpoints] lists).
func (m *PatroniMember) RESTURL() string { return "http://" + m.rest.Addr() }

// DirectRESTURL is the URL of Patroni's own REST API, which no fault
// affects.
func (m *PatroniMember) DirectRESTURL() string { return "http://" + m.directREST() }

func (m *PatroniMember) directREST() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.restPort))
}

// DataDir is the member's PostgreSQL data directory.
func (m *PatroniMember) DataDir() string { return m.dataDir }

// LogFile is the member's log: Patroni's, and its PostgreSQL server's.
func (m *PatroniMember) LogFile() string { return m.logFile }

// Running reports whether the member's Patroni daemon runs.
func (m *PatroniMember) Running() bool {
	p := m.daemon()
	return p != nil && p.running()
}

// Connect opens a pgx connection to the member's PostgreSQL, for test setup
// and checks. The caller closes it. Its errors hold no password.
func (m *PatroniMember) Connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(m.DSN() + "&connect_timeout=5&application_name=testcluster")
	if err != nil {
		return nil, fmt.Errorf("testcluster: %s: %s", m.name, m.c.redact(err.Error()))
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("testcluster: connect to %s: %s", m.name, m.c.redact(err.Error()))
	}
	return conn, nil
}

// Exec runs sql on the member.
func (m *PatroniMember) Exec(ctx context.Context, sql string, args ...any) error {
	conn, err := m.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("testcluster: %s: %w", m.name, err)
	}
	return nil
}

// QueryRow runs sql on the member and scans its single row into dest.
func (m *PatroniMember) QueryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	conn, err := m.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, sql, args...).Scan(dest...); err != nil {
		return fmt.Errorf("testcluster: %s: %w", m.name, err)
	}
	return nil
}

// IsInRecovery reports pg_is_in_recovery(): true on a replica.
func (m *PatroniMember) IsInRecovery(ctx context.Context) (bool, error) {
	var rec bool
	err := m.QueryRow(ctx, "SELECT pg_is_in_recovery()", nil, &rec)
	return rec, err
}

// Kill sends SIGKILL to the member's Patroni daemon and then to its
// postmaster and the postmaster's children, as a crash of the machine would,
// and waits until they are gone. The member's leader key (if it led) stays
// in etcd until its ttl runs out; then a replica takes over. Start brings
// the member back.
func (m *PatroniMember) Kill(ctx context.Context) error {
	p := m.daemon()
	if p == nil || !p.running() {
		return fmt.Errorf("testcluster: kill %s: Patroni is not running", m.name)
	}
	pid := postmasterPID(m.dataDir)
	if err := p.stop(ctx, syscall.SIGKILL, 0); err != nil {
		return err
	}
	if pid > 0 && processAlive(pid) {
		if err := killGone(ctx, pid); err != nil {
			return fmt.Errorf("testcluster: kill %s's postmaster %d: %w", m.name, pid, err)
		}
	}
	m.c.opts.Logf("testcluster: %s killed (Patroni and postmaster %d)", m.name, pid)
	return nil
}

// Stop stops the member's Patroni daemon gracefully (SIGTERM: Patroni stops
// PostgreSQL, and a leader hands its key back) and waits until it is gone.
func (m *PatroniMember) Stop(ctx context.Context) error {
	if err := m.shutdown(ctx); err != nil {
		return err
	}
	m.c.opts.Logf("testcluster: %s stopped", m.name)
	return nil
}

// Start starts the member's Patroni daemon when it is not running and waits
// until the member runs again: as the leader, or as a replica that the
// leader's pg_stat_replication shows streaming (after a crash, Patroni
// rewinds it with pg_rewind, or clones it again, first).
func (m *PatroniMember) Start(ctx context.Context) error {
	began := time.Now()
	if err := m.startDaemon(); err != nil {
		return err
	}
	var last string
	var lastErr error
	err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
		s, err := m.c.State(ctx)
		if err != nil {
			lastErr = err
			return false, nil
		}
		last = s.String()
		ok, err := m.c.healthy(ctx, s, []*PatroniMember{m})
		lastErr = err
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("testcluster: %s does not run again (last state: %s; last error: %v): %w\n%s",
			m.name, last, lastErr, err, m.c.redact(logTail(m.logFile, 15)))
	}
	m.c.opts.Logf("testcluster: %s runs again after %s", m.name, time.Since(began).Round(time.Millisecond))
	return nil
}

// StopREST makes the member's REST API unreachable through its fault point
// ([PatroniMember.RESTURL]) while Patroni keeps running: every connection
// through it, open or new, is closed at once (a new connection is accepted
// and closed without an answer, as by a peer that refuses it), so a client
// fails fast instead of waiting for its timeout. [PatroniMember.BlackholeREST]
// makes it hang instead. StartREST undoes either.
func (m *PatroniMember) StopREST() error {
	// Nothing ever listens on port 0: every dial of the proxy fails at once.
	if err := m.rest.Heal(); err != nil {
		return fmt.Errorf("testcluster: %s REST: %w", m.name, err)
	}
	if err := m.rest.SetUpstream("127.0.0.1:0"); err != nil {
		return fmt.Errorf("testcluster: %s REST: %w", m.name, err)
	}
	return nil
}

// BlackholeREST makes the member's REST API silent through its fault point
// while Patroni keeps running: connections are accepted and never answered,
// as in a network partition, so a client waits for its timeout.
// StartREST undoes it.
func (m *PatroniMember) BlackholeREST() error {
	if err := m.rest.Blackhole(); err != nil {
		return fmt.Errorf("testcluster: %s REST: %w", m.name, err)
	}
	return nil
}

// StartREST makes the member's REST API reachable again through its fault
// point, after StopREST or BlackholeREST.
func (m *PatroniMember) StartREST() error {
	if err := errors.Join(m.rest.Heal(), m.rest.SetUpstream(m.directREST())); err != nil {
		return fmt.Errorf("testcluster: %s REST: %w", m.name, err)
	}
	return nil
}

// SetTag sets (on) or removes (!on) a boolean Patroni tag of the member,
// such as "noloadbalance" or "nofailover": it rewrites the member's
// configuration, makes Patroni reload it (SIGHUP) and waits until GET
// /cluster shows the member's tags changed.
func (m *PatroniMember) SetTag(ctx context.Context, tag string, on bool) error {
	m.mu.Lock()
	if on {
		m.tags[tag] = true
	} else {
		delete(m.tags, tag)
	}
	m.mu.Unlock()
	return m.applyTags(ctx)
}

// ClearTags removes every tag of the member, as SetTag does.
func (m *PatroniMember) ClearTags(ctx context.Context) error {
	m.mu.Lock()
	m.tags = map[string]bool{}
	m.mu.Unlock()
	return m.applyTags(ctx)
}

// Tags returns the tags set with SetTag.
func (m *PatroniMember) Tags() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ts []string
	for t := range m.tags {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	return ts
}

func (m *PatroniMember) applyTags(ctx context.Context) error {
	if err := m.writeConfig(); err != nil {
		return err
	}
	want := m.Tags()
	p := m.daemon()
	if p == nil || !p.running() {
		return nil // read at its next start
	}
	var last string
	var lastErr error
	lastHUP := time.Time{}
	err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
		// Patroni reloads on SIGHUP; one sent while it starts up may be
		// lost, so send it again now and then until the change shows.
		if time.Since(lastHUP) > 2*time.Second {
			if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
				return false, fmt.Errorf("testcluster: reload %s: %w", m.name, err)
			}
			lastHUP = time.Now()
		}
		s, err := m.c.State(ctx)
		if err != nil {
			lastErr = err
			return false, nil
		}
		ms, ok := s.Member(m.name)
		if !ok {
			return false, nil
		}
		var got []string
		for k, v := range ms.Tags {
			if v == true {
				got = append(got, k)
			}
		}
		sort.Strings(got)
		last = strings.Join(got, ",")
		return last == strings.Join(want, ","), nil
	})
	if err != nil {
		return fmt.Errorf("testcluster: %s: GET /cluster shows tags [%s], not [%s] (last error: %v): %w",
			m.name, last, strings.Join(want, ","), lastErr, err)
	}
	m.c.opts.Logf("testcluster: %s tags [%s]", m.name, strings.Join(want, ","))
	return nil
}
