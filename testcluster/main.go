//go:build unix

package testcluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"
)

// MainStartTimeout bounds the start of the cluster of [Main] and [Run].
const MainStartTimeout = 2 * time.Minute

// Main runs a test package against one cluster that its tests share: it
// starts a cluster with opts, gives it to set (which typically stores it in
// a package variable), runs the tests, closes the cluster and exits. Call it
// from TestMain:
//
//	var cluster *testcluster.Cluster
//
//	func TestMain(m *testing.M) {
//		testcluster.Main(m, testcluster.Options{Replicas: 2}, func(c *testcluster.Cluster) { cluster = c })
//	}
//
// When the cluster does not start within [MainStartTimeout], Main prints
// FAIL and the reason on stderr and exits with status 1 without running a
// test: integration tests never skip. When PostgreSQL is not installed the
// reason says how to install it (see [ErrNoPostgres]). A cluster that does
// not close cleanly fails the run too. For a TestMain that does more around
// the tests, see [Run].
//
// m is TestMain's *testing.M (an interface here keeps the testing package
// out of the programs that use testcluster outside tests).
func Main(m interface{ Run() int }, opts Options, set func(*Cluster)) {
	os.Exit(Run(opts, func(c *Cluster) int {
		if set != nil {
			set(c)
		}
		return m.Run()
	}))
}

// Run starts a cluster with opts, calls run with it, closes it and returns
// the exit status for the test binary: run's, or 1 when the cluster does not
// start within [MainStartTimeout] (run is not called) or does not close
// cleanly. It prints FAIL and the reason on stderr for either failure. run
// typically calls testing.M.Run and returns its result.
func Run(opts Options, run func(*Cluster) int) int {
	return runMain(opts, os.Stderr, run)
}

func runMain(opts Options, stderr io.Writer, run func(*Cluster) int) int {
	ctx, cancel := context.WithTimeout(context.Background(), MainStartTimeout)
	c, err := Start(ctx, opts)
	cancel()
	if err != nil {
		// The error of a missing PostgreSQL wraps ErrNoPostgres, whose
		// text gives the command that installs it.
		fmt.Fprintf(stderr, "FAIL: cannot start the test cluster: %v\n", err)
		return 1
	}
	code := run(c)
	if err := c.Close(); err != nil {
		fmt.Fprintf(stderr, "FAIL: close the test cluster: %v\n", err)
		return 1
	}
	return code
}
