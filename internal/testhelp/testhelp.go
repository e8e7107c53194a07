// Package testhelp holds the helpers that the test packages of this module
// share: a context bound to a test, putting a testcluster.Cluster back after
// a test that broke it, polling until a condition holds, and a log function
// for testcluster.Options in TestMain.
//
// Each test package binds them once to its own cluster and timeout (its
// testCtx and restore), so its tests read as before. The modules of their
// own (examples/, otelroute/, bench/) cannot import an internal package of
// this one and keep their own copies.
package testhelp

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// Context returns a context that is cancelled after d, or when the test
// ends, whichever comes first.
func Context(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Restorer is what [Restore] puts back: a *testcluster.Cluster.
type Restorer interface {
	Restore(ctx context.Context) error
}

// restoreTimeout bounds one Restore after a test.
const restoreTimeout = 2 * time.Minute

// Restore registers a cleanup that puts c back (its Restore, within two
// minutes) when the test ends, for a test that breaks the cluster. The test
// fails with "restore cluster: ..." when c cannot be put back.
func Restore(t testing.TB, c Restorer) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), restoreTimeout)
		defer cancel()
		if err := c.Restore(ctx); err != nil {
			t.Fatalf("restore cluster: %v", err)
		}
	})
}

// WaitFor calls cond every poll until it returns true. When it still does
// not after d, the test fails with "timed out waiting for " and what.
func WaitFor(t testing.TB, d, poll time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(poll)
	}
}

// Logf writes one line to standard error. It is the Logf of the
// testcluster.Options a TestMain starts its cluster with, where there is no
// test to log to yet.
func Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}
