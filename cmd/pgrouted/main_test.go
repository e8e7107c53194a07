//go:build unix

package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/internal/testhelp"
	"github.com/pgrouted/pgrouted/testcluster"
)

// cluster is a primary with two streaming replicas for the topology,
// explain and logger tests, started once. The demo test starts its own,
// as the command does.
var cluster *testcluster.Cluster

// envRunMain, set to 1, makes the test binary run the command itself
// (main, with its arguments) instead of the tests: the tests that need a
// real process (signals, exit status) start it that way.
const envRunMain = "PGROUTED_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		main()
	}
	testcluster.Main(m, testcluster.Options{
		Replicas: 2,
		Logf:     testhelp.Logf,
	}, func(c *testcluster.Cluster) { cluster = c })
}

// testCtx is a context for one test: it ends after 3 minutes or with the test.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	return testhelp.Context(t, 3*time.Minute)
}

// restore puts the cluster back when the test ends, for a test that breaks it.
func restore(t *testing.T) {
	t.Helper()
	testhelp.Restore(t, cluster)
}

// marker is a password that must never be printed. Trust authentication
// ignores it.
const marker = "hunter2marker"

// withDSN sets PGROUTED_DSN to dsn for the rest of the test.
func withDSN(t *testing.T, dsn string) {
	t.Helper()
	t.Setenv(envDSN, dsn)
}

// testDSN is the cluster's DSN with the marker password and the hosts named
// node0, node1, node2 (primary first).
func testDSN(extra ...string) string {
	names := []string{cluster.Primary().Name()}
	for _, r := range cluster.Replicas() {
		names = append(names, r.Name())
	}
	dsn := strings.Replace(cluster.DSN(), "postgres@", "postgres:"+marker+"@", 1) +
		"&pgrouted_probe_interval=200ms&pgrouted_names=" + strings.Join(names, ",")
	for _, e := range extra {
		dsn += "&" + e
	}
	return dsn
}

// runCmd runs the command line in process, with nothing on stdin, and
// returns its exit code, stdout and stderr. It fails the test if the
// marker password shows up.
func runCmd(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	return runCmdIn(t, ctx, "", args...)
}

// runCmdIn is runCmd with stdin holding in.
func runCmdIn(t *testing.T, ctx context.Context, in string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(ctx, args, strings.NewReader(in), &out, &errb)
	for _, s := range []string{out.String(), errb.String()} {
		if strings.Contains(s, marker) {
			t.Fatalf("pgrouted %s printed the password:\n%s", args[0], s)
		}
	}
	return code, out.String(), errb.String()
}

// runCmdTo is runCmd with its output written to out as it is printed; it
// returns the exit code and what it printed on stderr.
func runCmdTo(t *testing.T, ctx context.Context, out *untilWriter, args ...string) (int, string) {
	t.Helper()
	var errb bytes.Buffer
	code := run(ctx, args, strings.NewReader(""), out, &errb)
	for _, s := range []string{out.String(), errb.String()} {
		if strings.Contains(s, marker) {
			t.Fatalf("pgrouted %s printed the password:\n%s", args[0], s)
		}
	}
	return code, errb.String()
}
