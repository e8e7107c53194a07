//go:build unix

package testcluster_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/pgrouted/pgrouted/testcluster"
)

// A primary and two replicas; a write on the primary read back on a
// replica; replication delayed through a fault point.
func Example() {
	ctx := context.Background()
	c, err := testcluster.Start(ctx, testcluster.Options{Replicas: 2})
	if err != nil {
		log.Fatal(err) // names the command that installs PostgreSQL when it is missing
	}
	defer c.Close()

	primary, replica := c.Primary(), c.Replicas()[0]
	if err := primary.Exec(ctx, "CREATE TABLE t (id int); INSERT INTO t VALUES (1)"); err != nil {
		log.Fatal(err)
	}
	lsn, err := primary.CurrentLSN(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if err := replica.WaitReplayed(ctx, lsn); err != nil {
		log.Fatal(err)
	}

	// From now on the replica receives WAL 200ms late.
	if err := replica.ReplicationFault().Latency(200 * time.Millisecond); err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.DSN()) // postgres://postgres@127.0.0.1:...,127.0.0.1:...,127.0.0.1:.../postgres?sslmode=disable
}

// A PgBouncer in transaction pooling mode in front of each node, and a
// connection string through them.
func ExampleCluster_StartPoolers() {
	ctx := context.Background()
	c, err := testcluster.Start(ctx, testcluster.Options{Replicas: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close() // stops the poolers too

	ps, err := c.StartPoolers(ctx, testcluster.PoolTransaction)
	if err != nil {
		log.Fatal(err) // names the command that installs PgBouncer when it is missing
	}
	fmt.Println(ps.DSN())                     // the poolers, the primary's first
	fmt.Println(ps.Of(c.Replicas()[0]).DSN()) // one replica, through its pooler
}
