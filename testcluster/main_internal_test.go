//go:build unix

package testcluster

import (
	"os"
	"strings"
	"syscall"
	"testing"
)

func TestRunWithoutPostgres(t *testing.T) {
	var out strings.Builder
	called := false
	code := runMain(Options{BinDir: t.TempDir()}, &out, func(*Cluster) int { called = true; return 0 })
	if code != 1 || called {
		t.Fatalf("Run without PostgreSQL: status %d, tests run: %v; want 1 and no test run", code, called)
	}
	if msg := out.String(); !strings.HasPrefix(msg, "FAIL: ") || !strings.Contains(msg, InstallCommand) {
		t.Fatalf("Run without PostgreSQL printed %q, want FAIL and the command that installs it", msg)
	}
}

func TestRunStartsAndCloses(t *testing.T) {
	var out strings.Builder
	var dir string
	code := runMain(Options{}, &out, func(c *Cluster) int {
		dir = c.Dir()
		if !c.Primary().Running() {
			t.Error("the cluster given to run is not running")
		}
		return 7
	})
	if code != 7 || out.Len() != 0 {
		t.Fatalf("Run: status %d (want run's 7), output %q (want none)", code, out.String())
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("after Run, the cluster directory %s is still there (%v)", dir, err)
	}
}

func TestRunFailsWhenCloseFails(t *testing.T) {
	var out strings.Builder
	code := runMain(Options{}, &out, func(c *Cluster) int {
		// A watchdog that dies before Close makes Close fail.
		if err := c.watchdog.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		return 0
	})
	if code != 1 || !strings.HasPrefix(out.String(), "FAIL: close the test cluster: ") {
		t.Fatalf("Run with a failing Close: status %d, output %q; want 1 and FAIL", code, out.String())
	}
}
