package bench

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/testcluster"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	testcluster.Main(m, testcluster.Options{
		Replicas: 2,
		Conf:     []string{"max_connections = 400"},
		Logf:     func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) },
	}, func(c *testcluster.Cluster) { cluster = c })
}

// openRouted opens pgrouted on the whole cluster and returns once reads go
// to a replica.
func openRouted(tb testing.TB, extra string) (*sql.DB, *pgrouted.Connector) {
	tb.Helper()
	cfg, err := pgrouted.ParseConfig(cluster.DSN() + "&pgrouted_probe_interval=250ms" + extra)
	if err != nil {
		tb.Fatal(err)
	}
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	db := sql.OpenDB(conn)
	tb.Cleanup(func() { db.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := conn.Explain(context.Background(), "SELECT 1")
		if err == nil && !d.Primary {
			return db, conn
		}
		if time.Now().After(deadline) {
			tb.Fatalf("reads do not go to a replica after 30s: %+v, %v", d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
