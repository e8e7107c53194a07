//go:build unix

package pgpipe_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted/testcluster"
)

// cluster is a primary alone: the rows' differential tests compare pgpipe
// with pgx's stdlib on one server.
var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	testcluster.Main(m, testcluster.Options{
		Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) },
	}, func(c *testcluster.Cluster) { cluster = c })
}

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
