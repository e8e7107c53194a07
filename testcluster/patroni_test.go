//go:build unix

package testcluster_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgrouted/pgrouted/testcluster"
)

// logSink keeps every line the cluster logs, to check them for passwords.
type logSink struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (l *logSink) logf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
	l.t.Log(s)
}

func (l *logSink) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// TestPatroniMissing: without the programs, StartPatroni fails with an error
// that gives the command installing them.
func TestPatroniMissing(t *testing.T) {
	_, err := testcluster.StartPatroni(context.Background(), testcluster.PatroniOptions{
		Patroni: filepath.Join(t.TempDir(), "patroni"),
	})
	if !errors.Is(err, testcluster.ErrNoPatroni) || !strings.Contains(err.Error(), testcluster.PatroniInstallCommand) {
		t.Fatalf("StartPatroni with no patroni program: got %v, want an error wrapping ErrNoPatroni that says `%s`", err, testcluster.PatroniInstallCommand)
	}
}

// get fetches u with a short timeout and returns the status code.
func get(u string, timeout time.Duration) (int, error) {
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(u)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// The Patroni cluster, one for the whole test since each boot costs
// seconds: it boots, switches over, loses its REST APIs, takes tags, loses
// its leader, and its Close leaves nothing behind.
func TestPatroni(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sink := &logSink{t: t}
	c, err := testcluster.StartPatroni(ctx, testcluster.PatroniOptions{Logf: sink.logf})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			c.Close()
		}
	})
	dir := c.Dir()
	u, err := url.Parse(c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	password, _ := u.User.Password()
	if len(password) < 16 {
		t.Fatalf("the DSN's password is %d characters long, want a random one of at least 16", len(password))
	}
	for _, m := range c.Members() {
		if !strings.Contains(c.DSN(), m.Addr()) {
			t.Fatalf("the DSN does not name %s", m)
		}
	}

	// write inserts a row on the leader (through the DSN, which finds it
	// with target_session_attrs) and returns where it ran.
	seq := 0
	write := func(t *testing.T) int {
		t.Helper()
		seq++
		leader, err := c.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var port int
		if err := leader.QueryRow(ctx, "INSERT INTO t VALUES ($1, inet_server_port()) RETURNING port", []any{seq}, &port); err != nil {
			t.Fatal(err)
		}
		return port
	}
	// everywhere waits until row seq is on every member.
	everywhere := func(t *testing.T) {
		t.Helper()
		for _, m := range c.Members() {
			deadline := time.Now().Add(30 * time.Second)
			for {
				var n int
				err := m.QueryRow(ctx, "SELECT count(*) FROM t WHERE id = $1", []any{seq}, &n)
				if err == nil && n == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("row %d is not on %s after 30s (last error %v)", seq, m, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}

	t.Run("boots", func(t *testing.T) {
		s, err := c.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Members) != 3 {
			t.Fatalf("GET /cluster: %s; want 3 members", s)
		}
		leader, err := c.Leader(ctx)
		if err != nil || leader.Name() != "pg0" {
			t.Fatalf("leader %v, %v; want pg0, which bootstraps", leader, err)
		}
		var streaming int
		if err := leader.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'", nil, &streaming); err != nil {
			t.Fatal(err)
		}
		if streaming != 2 {
			t.Fatalf("pg0 has %d streaming replicas, want 2", streaming)
		}
		for _, m := range c.Members()[1:] {
			if rec, err := m.IsInRecovery(ctx); err != nil || !rec {
				t.Fatalf("%s: in recovery %v, %v; want a replica", m, rec, err)
			}
		}
		if err := leader.Exec(ctx, "CREATE TABLE t (id int PRIMARY KEY, port int)"); err != nil {
			t.Fatal(err)
		}
		// Every member serves TLS under a certificate that verify-full
		// accepts with RootCert, and SCRAM with channel binding.
		for _, m := range c.Members() {
			for _, mode := range []string{"sslmode=verify-full&sslrootcert=" + url.QueryEscape(c.RootCert()), "sslmode=require&channel_binding=require"} {
				conn, err := pgconn.Connect(ctx, strings.Replace(c.DSNOf(m), "sslmode=disable", mode, 1))
				if err != nil {
					t.Fatalf("%s with %s: %v", m, strings.SplitN(mode, "&", 2)[0], err)
				}
				res, err := conn.Exec(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").ReadAll()
				conn.Close(ctx)
				if err != nil || len(res) != 1 || len(res[0].Rows) != 1 || string(res[0].Rows[0][0]) != "t" {
					t.Fatalf("%s with %s: pg_stat_ssl %v, %v; want a TLS connection", m, mode[:12], res, err)
				}
			}
		}
		if got := write(t); got != leader.Port() {
			t.Fatalf("the write ran on port %d, want pg0's %d", got, leader.Port())
		}
		everywhere(t)
		// Every endpoint answers GET /cluster through its fault point.
		for _, e := range c.Endpoints() {
			if code, err := get(e+"/cluster", 5*time.Second); err != nil || code != http.StatusOK {
				t.Fatalf("GET %s/cluster: %d, %v", e, code, err)
			}
		}
	})

	t.Run("switchover", func(t *testing.T) {
		leader, err := c.Switchover(ctx, "pg1")
		if err != nil {
			t.Fatal(err)
		}
		if leader.Name() != "pg1" {
			t.Fatalf("switchover to pg1 made %s the leader", leader)
		}
		if rec, err := leader.IsInRecovery(ctx); err != nil || rec {
			t.Fatalf("pg1 in recovery %v, %v after the switchover", rec, err)
		}
		if err := c.WaitHealthy(ctx); err != nil {
			t.Fatal(err)
		}
		if rec, err := c.Member("pg0").IsInRecovery(ctx); err != nil || !rec {
			t.Fatalf("pg0 in recovery %v, %v after the switchover; want a replica", rec, err)
		}
		if got := write(t); got != leader.Port() {
			t.Fatalf("the write ran on port %d, want pg1's %d", got, leader.Port())
		}
		everywhere(t)

		if _, err := c.Switchover(ctx, "nobody"); err == nil || !strings.Contains(err.Error(), "nobody") {
			t.Fatalf("switchover to an unknown member: %v; want an error naming it", err)
		}
	})

	t.Run("rest", func(t *testing.T) {
		m := c.Member("pg2")
		if err := m.StopREST(); err != nil {
			t.Fatal(err)
		}
		// Refused at once: the client fails long before its timeout.
		if code, err := get(m.RESTURL()+"/cluster", time.Minute); err == nil {
			t.Fatalf("GET %s/cluster through a stopped REST API answered %d", m.RESTURL(), code)
		}
		if code, err := get(m.DirectRESTURL()+"/cluster", 5*time.Second); err != nil || code != http.StatusOK {
			t.Fatalf("Patroni itself must keep answering: GET %s/cluster: %d, %v", m.DirectRESTURL(), code, err)
		}
		if err := m.BlackholeREST(); err != nil {
			t.Fatal(err)
		}
		_, err := get(m.RESTURL()+"/cluster", 300*time.Millisecond)
		var nerr net.Error
		if !errors.As(err, &nerr) || !nerr.Timeout() {
			t.Fatalf("GET through a blackholed REST API: %v; want a timeout", err)
		}
		if err := m.StartREST(); err != nil {
			t.Fatal(err)
		}
		if code, err := get(m.RESTURL()+"/cluster", 5*time.Second); err != nil || code != http.StatusOK {
			t.Fatalf("GET %s/cluster after StartREST: %d, %v", m.RESTURL(), code, err)
		}
		if !m.Running() {
			t.Fatal("pg2's Patroni stopped")
		}
	})

	t.Run("tag", func(t *testing.T) {
		m := c.Member("pg2")
		if err := m.SetTag(ctx, "noloadbalance", true); err != nil {
			t.Fatal(err)
		}
		s, err := c.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ms, _ := s.Member("pg2")
		if ms.Tags["noloadbalance"] != true {
			t.Fatalf("GET /cluster after SetTag: %s; want pg2 tagged noloadbalance", s)
		}
		for _, o := range s.Members {
			if o.Name != "pg2" && len(o.Tags) > 0 {
				t.Fatalf("GET /cluster: %s; only pg2 is tagged", s)
			}
		}
		if err := c.Restore(ctx); err != nil {
			t.Fatal(err)
		}
		if s, err = c.State(ctx); err != nil {
			t.Fatal(err)
		}
		if ms, _ := s.Member("pg2"); len(ms.Tags) > 0 {
			t.Fatalf("GET /cluster after Restore: %s; want no tag", s)
		}
	})

	t.Run("kill leader", func(t *testing.T) {
		old, err := c.KillLeader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if old.Running() {
			t.Fatalf("%s's Patroni still runs after KillLeader", old)
		}
		if _, err := old.IsInRecovery(ctx); err == nil {
			t.Fatalf("%s's PostgreSQL still answers after KillLeader", old)
		}
		leader, err := c.WaitLeader(ctx, old)
		if err != nil {
			t.Fatal(err)
		}
		if got := write(t); got != leader.Port() {
			t.Fatalf("the write ran on port %d, want the new leader %s's %d", got, leader, leader.Port())
		}
		if err := old.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if rec, err := old.IsInRecovery(ctx); err != nil || !rec {
			t.Fatalf("%s in recovery %v, %v after it came back; want a replica", old, rec, err)
		}
		if err := c.WaitHealthy(ctx); err != nil {
			t.Fatal(err)
		}
		everywhere(t)
	})

	t.Run("no password", func(t *testing.T) {
		if strings.Contains(sink.all(), password) {
			t.Fatal("a log line holds the password")
		}
		_, err := c.Switchover(ctx, "nobody")
		for _, e := range []error{err} {
			if e != nil && strings.Contains(e.Error(), password) {
				t.Fatal("an error holds the password")
			}
		}
		for _, m := range c.Members() {
			if strings.Contains(m.String(), password) {
				t.Fatalf("%s: String holds the password", m.Name())
			}
		}
	})

	t.Run("close", func(t *testing.T) {
		var addrs []string
		for _, m := range c.Members() {
			addrs = append(addrs, m.Addr(), strings.TrimPrefix(m.DirectRESTURL(), "http://"))
		}
		addrs = append(addrs, strings.TrimPrefix(c.EtcdURL(), "http://"))
		closed = true
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("%s is still there after Close: %v", dir, err)
		}
		if procs := processesUnder(dir); len(procs) > 0 {
			t.Fatalf("processes left after Close:\n%s", strings.Join(procs, "\n"))
		}
		for _, a := range addrs {
			if conn, err := net.DialTimeout("tcp", a, time.Second); err == nil {
				conn.Close()
				t.Errorf("%s still accepts connections after Close", a)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatalf("a second Close: %v", err)
		}
	})
}

// processesUnder lists the live processes whose command line mentions dir.
func processesUnder(dir string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cmd, dir) {
			out = append(out, e.Name()+": "+cmd)
		}
	}
	return out
}
