//go:build unix

package main

import (
	"bufio"
	"context"
	"database/sql"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/testcluster"
)

// TestClusterCommand runs `pgrouted cluster --replicas 2` as a process of
// its own (the test binary running main), reads the DSN line, writes on the
// primary and reads the row back on a replica through pgrouted, then sends
// it SIGINT (Ctrl-C) and checks that it exits 0 and leaves no PostgreSQL
// process or directory behind. The password is printed on the DSN line only.
func TestClusterCommand(t *testing.T) {
	// The cluster goes in a directory of this test's own, which PostgreSQL
	// (run as the postgres user when the test runs as root) can enter.
	dir, err := os.MkdirTemp("", "pgrouted-cluster-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) }) // after startMain's kill
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "cluster", "--replicas", "2")
	cmd.Env = append(os.Environ(), envRunMain+"=1", "TMPDIR="+dir)
	var errb syncBuffer
	cmd.Stderr = &errb
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	exited := startMain(t, cmd)

	lines := make(chan string, 8)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var dsn string
	select {
	case line, ok := <-lines:
		if !ok || !strings.HasPrefix(line, "DSN: ") {
			t.Fatalf("first stdout line is not a DSN line (%d chars, open %v); stderr:\n%s", len(line), ok, errb.String())
		}
		dsn = strings.TrimPrefix(line, "DSN: ")
	case <-time.After(2 * time.Minute):
		t.Fatalf("no DSN line within 2 minutes; stderr:\n%s", errb.String())
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("the DSN does not parse: %v", err)
	}
	pw, _ := u.User.Password()
	if len(pw) < 16 || len(strings.Split(u.Host, ",")) != 3 || u.Query().Get("pgrouted_names") != "node0,node1,node2" {
		t.Fatalf("DSN with a %d-char password, hosts %q, query %q", len(pw), u.Host, u.RawQuery)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := sql.Open("pgrouted", dsn)
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE TABLE tried (id int)"); err != nil {
		t.Fatalf("create table: %v", err)
	}
	var onReplica bool
	if err := db.QueryRowContext(ctx, "INSERT INTO tried VALUES (1) RETURNING pg_is_in_recovery()").Scan(&onReplica); err != nil || onReplica {
		t.Fatalf("write: in recovery %v, %v", onReplica, err)
	}
	// A plain read goes to a replica once pgrouted's probes have seen it,
	// and sees the row once the replica has replayed it.
	var n int
	for deadline := time.Now().Add(30 * time.Second); ; {
		err := db.QueryRowContext(ctx, "SELECT pg_is_in_recovery(), count(*) FROM tried").Scan(&onReplica, &n)
		if err == nil && onReplica && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no read of the row on a replica within 30s: in recovery %v, %d rows, %v", onReplica, n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	db.Close()

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("still running 60s after SIGINT; stderr:\n%s", errb.String())
	}
	code := cmd.ProcessState.ExitCode()
	errs := errb.String()
	if code != exitOK || !strings.Contains(errs, "Stopped;") {
		t.Errorf("exit %d (%v) after SIGINT, want %d; stderr:\n%s", code, err, exitOK, errs)
	}
	if !strings.Contains(errs, "Put it in PGROUTED_DSN") || !strings.Contains(errs, "go run ./cmd/pgrouted topology\n") {
		t.Errorf("no hint on stderr")
	}
	if strings.Contains(errs, pw) {
		t.Errorf("the password is on stderr")
	}
	for line := range lines {
		t.Errorf("more on stdout than the DSN line: %d chars", len(line))
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "pgrouted-testcluster-*")); len(left) != 0 {
		t.Errorf("cluster directory left behind: %v", left)
	}
	if procs, err := exec.Command("pgrep", "-af", dir+"/").Output(); err == nil && len(procs) > 0 {
		t.Errorf("PostgreSQL processes left behind:\n%s", procs)
	}
	t.Logf("stderr:\n%s", errs)
}

// TestClusterWithoutPostgres: with no PostgreSQL binaries cluster fails at
// once, prints no DSN, installs nothing and says how to install them.
func TestClusterWithoutPostgres(t *testing.T) {
	t.Setenv(testcluster.EnvBinDir, t.TempDir())
	code, out, errs := runCmd(t, context.Background(), "cluster")
	if code != exitFailure || out != "" || !strings.Contains(errs, testcluster.InstallCommand) || !strings.Contains(errs, "make cluster") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
}

// TestClusterTempDirUnreachable: as root, a TMPDIR the postgres user
// cannot enter fails before anything starts, with the way out.
func TestClusterTempDirUnreachable(t *testing.T) {
	if os.Geteuid() != 0 {
		// Not as root, PostgreSQL runs as this user: there is nothing to
		// check, and checkTempDir returns nil.
		if err := checkTempDir(); err != nil {
			t.Fatal(err)
		}
		return
	}
	closed := t.TempDir()
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	inner := filepath.Join(closed, "tmp")
	if err := os.Mkdir(inner, 0o1777); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", inner)
	code, out, errs := runCmd(t, context.Background(), "cluster")
	if code != exitFailure || out != "" || !strings.Contains(errs, "cannot enter "+closed) || !strings.Contains(errs, "chmod 1777") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if left, _ := filepath.Glob(filepath.Join(inner, "*")); len(left) != 0 {
		t.Errorf("created %v", left)
	}
}

// startMain starts cmd, the test binary running main, and returns the
// channel its Wait's outcome arrives on. When the test ends before the
// process did (it failed), the process is killed (SIGKILL, after which
// the cluster's watchdog stops PostgreSQL and removes its directory).
func startMain(t *testing.T, cmd *exec.Cmd) chan error {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
	})
	return exited
}
