//go:build unix

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/testcluster"
)

// TestDemo runs `pgrouted demo --duration 20s --replicas 2 --json` in
// process, on its own cluster, and checks the summary: no stale read, no
// error (writes and transactions cut off inside the fault windows are
// counted apart, as interrupted; see workload), replicas served reads, and
// writes resumed on the promoted replica. It checks the driver's log lines
// too: the topology events of the story, and far fewer lines than
// statements.
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	began := time.Now()
	code, out, errs := runCmd(t, ctx, "demo", "--duration", "20s", "--replicas", "2", "--json")
	t.Logf("demo took %v; stderr:\n%s", time.Since(began).Round(time.Millisecond), errs)
	var s Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("stdout is not one JSON summary: %v\n%s", err, out)
	}
	if code != exitOK || !s.OK {
		t.Fatalf("exit %d, summary:\n%s", code, out)
	}
	if !s.Completed || s.StaleReads != 0 || s.Errors != 0 || s.Checks < 100 {
		t.Errorf("completed %v, %d stale reads in %d checks, %d errors %q", s.Completed, s.StaleReads, s.Checks, s.Errors, s.ErrorSamples)
		for _, e := range s.Events {
			if strings.HasPrefix(e.Message, "STALE READ") {
				t.Errorf("%s", e.Message)
			}
		}
	}
	if s.ReplicaReads == 0 || s.Endpoints["node2"]["read"] == 0 {
		t.Errorf("replicas served %d reads (node2: %d)", s.ReplicaReads, s.Endpoints["node2"]["read"])
	}
	if f := s.Failover; f == nil || f.From != "node0" || f.To != "node1" || f.WritesOnNewPrimary == 0 || f.UnavailableMs < 0 {
		t.Errorf("failover %+v", s.Failover)
	}
	if s.Endpoints["node1"]["write"] == 0 || s.Failovers != 1 {
		t.Errorf("writes on node1: %d; failovers seen %d", s.Endpoints["node1"]["write"], s.Failovers)
	}
	for w := range s.InterruptedWindows {
		if w != "failover" && w != "node2 killed" {
			t.Errorf("interrupted in an unknown window %q", w)
		}
	}
	if len(s.Phases) != 7 {
		t.Errorf("%d phases", len(s.Phases))
	}
	// Every event of the story is in the driver's log, once per change.
	has := func(msg, event, host string) bool {
		for _, e := range s.Events {
			if e.Source == "pgrouted" && e.Message == msg && (event == "" || e.Attrs["event"] == event) && e.Attrs["host"] == host {
				return true
			}
		}
		return false
	}
	for _, want := range [][3]string{
		{"pgrouted: topology", "primary-changed", "node0"},
		{"pgrouted: topology", "host-down", "node2"},
		{"pgrouted: circuit open", "", "node2"},
		{"pgrouted: topology", "host-up", "node2"},
		{"pgrouted: circuit closed", "", "node2"},
		{"pgrouted: topology", "host-down", "node0"},
		{"pgrouted: topology", "primary-changed", "node1"},
	} {
		if !has(want[0], want[1], want[2]) {
			t.Errorf("no log line %q %s host=%s", want[0], want[1], want[2])
		}
	}
	if s.LoggedLines == 0 || s.LoggedLines > 40 || uint64(s.LoggedLines)*100 > s.Statements {
		t.Errorf("%d log lines for %d statements", s.LoggedLines, s.Statements)
	}
	if !strings.Contains(errs, "phase 6/7: failover") {
		t.Errorf("events not on stderr with --json")
	}
	t.Logf("%d statements, %.0f%% of reads on replicas, %d checks, %d interrupted %v, writes unavailable %.0fms",
		s.Statements, 100*s.ReplicaShare, s.Checks, s.Interrupted, s.InterruptedWindows, s.Failover.UnavailableMs)
}

// TestDemoWithoutPostgres: with no PostgreSQL binaries the demo fails at
// once, installs nothing and says how to install them.
func TestDemoWithoutPostgres(t *testing.T) {
	t.Setenv(testcluster.EnvBinDir, t.TempDir())
	code, out, errs := runCmd(t, context.Background(), "demo", "--no-color")
	if code != exitFailure || !strings.Contains(errs, testcluster.InstallCommand) || !strings.Contains(errs, "make demo") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
}

// TestDemoInterrupted runs `pgrouted demo --duration 60s --json` as a
// process of its own (the test binary running main), as TestClusterCommand
// does, and sends it SIGINT (Ctrl-C) during the story: it stops, removes
// the cluster and prints the summary so far (not completed, not OK,
// failure "interrupted", the statements the workload ran, no stale read
// and no error), and exits 0: Ctrl-C once the cluster is up is a normal
// end, as for the cluster command.
func TestDemoInterrupted(t *testing.T) {
	dir := demoTempDir(t)
	cmd := exec.Command(os.Args[0], "demo", "--duration", "60s", "--json")
	cmd.Env = append(os.Environ(), envRunMain+"=1", "TMPDIR="+dir)
	var outb, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &outb, &errb
	exited := startMain(t, cmd)
	// The story's second phase began: the cluster is up and the workload
	// has run through the first. (With --json the events go to stderr.)
	const running = "phase 2/7: "
	boot := time.NewTimer(2 * time.Minute)
	defer boot.Stop()
	for !strings.Contains(errb.String(), running) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the demo ended before %q: %v\nstdout: %s\nstderr:\n%s", running, err, outb.String(), errb.String())
		case <-boot.C:
			t.Fatalf("no %q on stderr within 2 minutes:\n%s", running, errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("still running 60s after SIGINT; stderr:\n%s", errb.String())
	}
	out := outb.String()
	var s Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("stdout is not one JSON summary: %v\n%s\nstderr:\n%s", err, out, errb.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != exitOK {
		t.Errorf("exit %d (%v) after SIGINT, want %d; stderr:\n%s", code, err, exitOK, errb.String())
	}
	if s.Completed || s.OK || s.Failure != "interrupted" || s.StaleReads != 0 || s.Errors != 0 {
		t.Errorf("summary after SIGINT: %s", out)
	}
	if s.Statements == 0 || s.Reads == 0 || len(s.Phases) < 2 {
		t.Errorf("the summary so far lacks the workload: %d statements, %d reads, %d phases", s.Statements, s.Reads, len(s.Phases))
	}
	noClusterLeft(t, dir)
}

// TestDemoInterruptedBeforeUp: Ctrl-C while the cluster starts stops the
// demo with status 130, no summary, and nothing left behind.
func TestDemoInterruptedBeforeUp(t *testing.T) {
	dir := demoTempDir(t)
	t.Setenv("TMPDIR", dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var outb, errb syncBuffer
	var code int
	done := make(chan struct{})
	go func() {
		defer close(done)
		code = run(ctx, []string{"demo", "--no-color"}, nil, &outb, &errb)
	}()
	const starting = "Starting a local PostgreSQL primary"
	for !strings.Contains(outb.String(), starting) {
		select {
		case <-done:
			t.Fatalf("the demo ended before %q: exit %d\nstdout: %s\nstderr:\n%s", starting, code, outb.String(), errb.String())
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the demo did not stop within 60s of Ctrl-C")
	}
	out, errs := outb.String(), errb.String()
	if code != exitInterrupted || !strings.Contains(errs, "interrupted before the cluster was up") || strings.Contains(out, "pgrouted demo:") {
		t.Fatalf("exit %d (want %d)\nstdout: %s\nstderr:\n%s", code, exitInterrupted, out, errs)
	}
	noClusterLeft(t, dir)
}

// TestDemoExit: once the demo ran, its exit status follows its summary;
// Ctrl-C is a normal end unless what ran found stale reads or errors.
func TestDemoExit(t *testing.T) {
	for _, c := range []struct {
		name string
		sum  Summary
		want int
	}{
		{"completed", Summary{Completed: true, OK: true}, exitOK},
		{"completed with stale reads", Summary{Completed: true, StaleReads: 1}, exitFailure},
		{"a step failed", Summary{Failure: "the failover"}, exitFailure},
		{"interrupted", Summary{Failure: failureInterrupted}, exitOK},
		{"interrupted after a stale read", Summary{Failure: failureInterrupted, StaleReads: 1}, exitFailure},
		{"interrupted after an error", Summary{Failure: failureInterrupted, Errors: 2}, exitFailure},
	} {
		if got := demoExit(&c.sum); got != c.want {
			t.Errorf("%s: exit %d, want %d", c.name, got, c.want)
		}
	}
}

// demoTempDir is a directory of the test's own for a demo's cluster, which
// PostgreSQL (run as the postgres user when the test runs as root) can
// enter.
func demoTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgrouted-demo-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// noClusterLeft fails t when a cluster directory or a PostgreSQL process
// is left in dir.
func noClusterLeft(t *testing.T, dir string) {
	t.Helper()
	if left, _ := filepath.Glob(filepath.Join(dir, "pgrouted-testcluster-*")); len(left) != 0 {
		t.Errorf("cluster directory left behind: %v", left)
	}
	if procs, err := exec.Command("pgrep", "-af", dir+"/").Output(); err == nil && len(procs) > 0 {
		t.Errorf("PostgreSQL processes left behind:\n%s", procs)
	}
}

// syncBuffer is a goroutine-safe io.Writer.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
