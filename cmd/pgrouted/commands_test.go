//go:build unix

package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
)

func TestUsage(t *testing.T) {
	ctx := context.Background()
	withDSN(t, "")
	for _, tc := range []struct {
		args     []string
		code     int
		stdout   string // substring
		stderr   string // substring
		noStdout bool
	}{
		{args: []string{"demo", "--help"}, code: exitOK, stdout: "Usage: pgrouted demo", stderr: ""},
		{args: nil, code: exitUsage, stderr: "Usage:", noStdout: true},
		{args: []string{"help"}, code: exitOK, stdout: "pgrouted demo"},
		{args: []string{"--help"}, code: exitOK, stdout: "Exit codes"},
		{args: []string{"bogus"}, code: exitUsage, stderr: `unknown command "bogus"`, noStdout: true},
		{args: []string{"help", "topology"}, code: exitOK, stdout: "-watch"},
		{args: []string{"demo", "--help"}, code: exitOK, stdout: "--duration"},
		{args: []string{"explain", "-h"}, code: exitOK, stdout: "Usage: pgrouted explain"},
		{args: []string{"topology"}, code: exitUsage, stderr: "want one DSN", noStdout: true},
		{args: []string{"topology", "a", "b"}, code: exitUsage, stderr: "want one DSN", noStdout: true},
		{args: []string{"explain", "postgres://h/db"}, code: exitUsage, stderr: "want a DSN and a query: PGROUTED_DSN is not set", noStdout: true},
		{args: []string{"explain"}, code: exitUsage, stderr: "want a DSN and a query, got 0 arguments", noStdout: true},
		{args: []string{"explain", "a", "b", "c"}, code: exitUsage, stderr: "want a DSN and a query, got 3 arguments", noStdout: true},
		{args: []string{"topology"}, code: exitUsage, stderr: "want one DSN: PGROUTED_DSN is not set (set PGROUTED_DSN, or give - and write the DSN on stdin)", noStdout: true},
		{args: []string{"topology", "-"}, code: exitUsage, stderr: "want one DSN: stdin holds no DSN", noStdout: true},
		{args: []string{"explain", "-", "SELECT 1"}, code: exitUsage, stderr: "want a DSN and a query: stdin holds no DSN", noStdout: true},
		{args: []string{"help", "topology"}, code: exitOK, stdout: "The DSN comes from the environment variable PGROUTED_DSN"},
		{args: []string{"explain", "--help"}, code: exitOK, stdout: "pgrouted topology - < dsn.txt"},
		{args: []string{"help"}, code: exitOK, stdout: "read it from the environment variable PGROUTED_DSN"},
		{args: []string{"topology", "--bogus", "postgres://h/db"}, code: exitUsage, stderr: "flag provided but not defined", noStdout: true},
		{args: []string{"demo", "--duration", "5s"}, code: exitUsage, stderr: "too short", noStdout: true},
		{args: []string{"demo", "--replicas", "0"}, code: exitUsage, stderr: "want 1 to", noStdout: true},
		{args: []string{"demo", "extra"}, code: exitUsage, stderr: "unexpected argument", noStdout: true},
		{args: []string{"help"}, code: exitOK, stdout: "pgrouted cluster [--replicas 2]"},
		{args: []string{"help", "cluster"}, code: exitOK, stdout: "random one made up at start"},
		{args: []string{"cluster", "--replicas", "0"}, code: exitUsage, stderr: "want 1 to", noStdout: true},
		{args: []string{"cluster", "--replicas", "6"}, code: exitUsage, stderr: "want 1 to", noStdout: true},
		{args: []string{"cluster", "extra"}, code: exitUsage, stderr: "unexpected argument", noStdout: true},
		{args: []string{"cluster", "--port", "5432"}, code: exitUsage, stderr: "flag provided but not defined", noStdout: true},
	} {
		code, out, errs := runCmd(t, ctx, tc.args...)
		if code == exitOK && errs != "" {
			t.Errorf("pgrouted %q: stderr %q", tc.args, errs)
		}
		if strings.Count(out+errs, "Usage: pgrouted") > 1 {
			t.Errorf("pgrouted %q: usage printed twice", tc.args)
		}
		if code != tc.code || !strings.Contains(out, tc.stdout) || !strings.Contains(errs, tc.stderr) || (tc.noStdout && out != "") {
			t.Errorf("pgrouted %q: exit %d (want %d)\nstdout:\n%s\nstderr:\n%s", tc.args, code, tc.code, out, errs)
		}
	}
}

func TestParseFlagsInterleaved(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		watch bool
		pos   []string
	}{
		{[]string{"dsn"}, false, []string{"dsn"}},
		{[]string{"--watch", "dsn"}, true, []string{"dsn"}},
		{[]string{"dsn", "--watch"}, true, []string{"dsn"}},
		{[]string{"dsn", "--", "--watch"}, false, []string{"dsn", "--watch"}},
		{[]string{"--", "-x", "--watch"}, false, []string{"-x", "--watch"}},
		{[]string{"--watch", "--", "-- comment\nSELECT 1"}, true, []string{"-- comment\nSELECT 1"}},
		{[]string{"a", "--watch=false", "b"}, false, []string{"a", "b"}},
	} {
		fs := newFlags("t", "t", "", &strings.Builder{})
		watch := fs.Bool("watch", false, "")
		pos, _, ok := parseFlags(fs, tc.args, &strings.Builder{}, &strings.Builder{})
		if !ok || *watch != tc.watch || strings.Join(pos, "|") != strings.Join(tc.pos, "|") {
			t.Errorf("%q: watch %v, pos %q, ok %v; want %v, %q", tc.args, *watch, pos, ok, tc.watch, tc.pos)
		}
	}
}

// probeWait is the --timeout of the commands the tests run: how long they
// wait for every host's first probe. The commands go on as soon as every
// host answered; on a CI machine whose CPUs every lane shares, the first
// probes alone can take seconds.
const probeWait = "45s"

func TestTopologyCommand(t *testing.T) {
	ctx := testCtx(t)
	withDSN(t, testDSN("pgrouted_max_lag=2s"))
	code, out, errs := runCmd(t, ctx, "topology", "--timeout", probeWait)
	if code != exitOK || errs != "" {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	t.Logf("\n%s", out)
	for _, want := range []string{"primary: node0 (epoch 1", "pgrouted_max_lag 2s", "HOST", "LAG BOUND", "node1", "node2", "replica", cluster.Primary().Addr()} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("ANSI codes in output that is not a terminal")
	}

	// From stdin, "-": the DSN there wins over PGROUTED_DSN.
	code, out, errs = runCmdIn(t, ctx, testDSN()+"\n", "topology", "--timeout", probeWait, "--json", "-")
	var top pgrouted.Snapshot
	if code != exitOK || errs != "" || json.Unmarshal([]byte(out), &top) != nil {
		t.Fatalf("exit %d, %q %s", code, out, errs)
	}
	if top.Primary != "node0" || len(top.Hosts) != 3 || top.Hosts[1].Role != "standby" || top.Hosts[1].ReplayLSN == "" {
		t.Fatalf("snapshot %+v", top)
	}
}

// TestTopologyWatch: --watch prints a snapshot again and again until it is
// stopped: here once it has printed two, however long that takes (on a CI
// machine whose CPUs every lane shares, the first probes alone can take
// seconds); after a minute without, the test fails with what it printed.
func TestTopologyWatch(t *testing.T) {
	const want, deadline = 2, time.Minute
	ctx, cancel := context.WithTimeout(testCtx(t), deadline)
	defer cancel()
	withDSN(t, testDSN())
	out := &untilWriter{enough: func(s string) bool { return strings.Count(s, "primary: node0") >= want }, stop: cancel}
	began := time.Now()
	code, errs := runCmdTo(t, ctx, out, "topology", "--watch")
	printed := out.String()
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, printed, errs)
	}
	if n := strings.Count(printed, "primary: node0"); n < want {
		t.Fatalf("%d snapshots in %s of --watch, want %d:\n%s", n, time.Since(began).Round(time.Second), want, printed)
	}
}

// untilWriter keeps what is written to it, and calls stop once enough says
// it holds enough.
type untilWriter struct {
	enough func(string) bool
	stop   func()
	mu     sync.Mutex
	b      strings.Builder
}

func (w *untilWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if w.enough(w.b.String()) {
		w.stop()
	}
	return len(p), nil
}

func (w *untilWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestTopologyBadDSNs: an invalid DSN is a usage error that names the
// problem; an unreachable cluster prints its table and fails; neither shows
// the password.
func TestTopologyBadDSNs(t *testing.T) {
	ctx := testCtx(t)
	code, out, errs := runCmd(t, ctx, "topology", "postgres://app:"+marker+"@db1,db2/app?pgrouted_max_lagg=2s")
	if code != exitUsage || out != "" || !strings.Contains(errs, "pgrouted_max_lagg") {
		t.Errorf("unknown key: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	code, _, errs = runCmd(t, ctx, "explain", "host=db1 password='"+marker+"' pgrouted_select=fastest", "SELECT 1")
	if code != exitUsage || !strings.Contains(errs, "pgrouted_select") {
		t.Errorf("bad value: exit %d, %s", code, errs)
	}
	code, _, errs = runCmd(t, ctx, "topology", "postgres://app:"+marker+"@[::1/app")
	if code != exitUsage || errs == "" {
		t.Errorf("malformed URL: exit %d, %s", code, errs)
	}
	// Nothing listens on port 1.
	code, out, errs = runCmd(t, ctx, "topology", "--timeout", "5s", "postgres://app:"+marker+"@127.0.0.1:1/app?connect_timeout=1&sslmode=disable")
	if code != exitFailure || !strings.Contains(out, "down") || !strings.Contains(out, "primary: none") ||
		!strings.Contains(out, "127.0.0.1:1: failed to connect") {
		t.Errorf("unreachable: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	t.Logf("unreachable:\n%s%s", out, errs)
}

func TestExplainCommand(t *testing.T) {
	ctx := testCtx(t)
	withDSN(t, testDSN())
	for _, tc := range []struct {
		query  string
		code   int
		want   []string
		primry bool
	}{
		{"SELECT * FROM t", exitOK, []string{"op:       read", "(a replica)", "reason:   replica"}, false},
		{"SELECT * FROM pg_class", exitOK, []string{"op:       read", "node0 (the primary)", "forced"}, true},
		{"INSERT INTO t VALUES (1)", exitOK, []string{"op:       write", "node0 (the primary)", "reason:   write: the statement is not a read"}, true},
		{"SELECT * FROM t FOR UPDATE", exitOK, []string{"op:       lock", "node0 (the primary)"}, true},
		{"SET search_path = x", exitOK, []string{"session-state"}, true},
		{"/* pgrouted:primary */ SELECT 1", exitOK, []string{"node0 (the primary)", "forced"}, true},
		{"/* pgrouted:replica */ DELETE FROM t", exitFailure, []string{"write-on-replica", "error:", "runs on:  nowhere"}, false},
	} {
		code, out, errs := runCmd(t, ctx, "explain", "--timeout", probeWait, tc.query)
		if code != tc.code {
			t.Errorf("%q: exit %d, want %d\n%s%s", tc.query, code, tc.code, out, errs)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%q: output lacks %q:\n%s", tc.query, w, out)
			}
		}
	}
	code, out, errs := runCmdIn(t, ctx, testDSN(), "explain", "--timeout", probeWait, "--json", "-", "--", "-- a comment\nSELECT 1")
	var d struct {
		pgrouted.Decision
		Query string `json:"query"`
	}
	if code != exitOK || errs != "" || json.Unmarshal([]byte(out), &d) != nil || d.Op != "read" || d.Primary || d.Endpoint == "" {
		t.Fatalf("--json: exit %d, %s %s", code, out, errs)
	}
}

// TestDSNInArgs: a DSN given as an argument still works, with a warning
// on stderr that other users can read it; from PGROUTED_DSN or stdin there
// is none. The password shows nowhere (runCmd).
func TestDSNInArgs(t *testing.T) {
	ctx := testCtx(t)
	withDSN(t, "")
	for _, tc := range []struct {
		name, stdin string
		args        []string
		env         string
		warn        bool
	}{
		{name: "topology, argument", args: []string{"topology", "--timeout", probeWait, testDSN()}, warn: true},
		{name: "explain, argument", args: []string{"explain", "--timeout", probeWait, testDSN(), "SELECT 1"}, warn: true},
		{name: "topology, argument over the environment", args: []string{"topology", "--timeout", probeWait, testDSN()}, env: "host=nowhere.invalid", warn: true},
		{name: "explain, environment", args: []string{"explain", "--timeout", probeWait, "SELECT 1"}, env: testDSN()},
		{name: "explain, stdin", args: []string{"explain", "--timeout", probeWait, "-", "SELECT 1"}, stdin: "  " + testDSN() + "\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withDSN(t, tc.env)
			code, out, errs := runCmdIn(t, ctx, tc.stdin, tc.args...)
			if code != exitOK || !strings.Contains(out, "node") {
				t.Fatalf("exit %d\n%s\n%s", code, out, errs)
			}
			warned := strings.Contains(errs, "warning: the DSN is an argument, which other users of this machine can read (ps, /proc)")
			if warned != tc.warn || (!tc.warn && errs != "") {
				t.Errorf("stderr %q, want a warning: %v", errs, tc.warn)
			}
		})
	}
	// An invalid DSN in the arguments: the warning, then the error, and
	// no password.
	code, _, errs := runCmd(t, ctx, "topology", "host=db1 password="+marker+" pgrouted_probe_interval=0.001ms")
	if code != exitUsage || !strings.Contains(errs, "warning: the DSN is an argument") ||
		!strings.Contains(errs, "pgrouted_probe_interval (0.001ms) must be at least 10ms") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}
