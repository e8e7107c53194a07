//go:build unix

package testcluster_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/pgrouted/pgrouted/testcluster"
)

// A Patroni cluster: etcd and three members. A DSN for pgrouted's Patroni
// provider, a switchover, a crashed leader replaced and brought back.
func ExampleStartPatroni() {
	ctx := context.Background()
	pc, err := testcluster.StartPatroni(ctx, testcluster.PatroniOptions{})
	if err != nil {
		log.Fatal(err) // names `apt-get install -y patroni etcd-server` when they are missing
	}
	defer pc.Close()

	// The DSN holds the superuser's random password: never print it.
	dsn := pc.DSN() + "&pgrouted_topology=patroni&pgrouted_patroni_endpoints=" + strings.Join(pc.Endpoints(), ",")
	_ = dsn

	leader, err := pc.Switchover(ctx, "pg1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", leader.Name())

	old, err := pc.KillLeader(ctx) // SIGKILL to Patroni and its postmaster
	if err != nil {
		log.Fatal(err)
	}
	if _, err := pc.WaitLeader(ctx, old); err != nil { // a replica takes over after the ttl
		log.Fatal(err)
	}
	if err := old.Start(ctx); err != nil { // back, rewound, as a replica
		log.Fatal(err)
	}
}
