//go:build unix

package pgrouted_test

import (
	"strings"
	"testing"

	"github.com/pgrouted/pgrouted"
)

// The connections pgrouted opens once the hosts answered their probes
// (the cluster has no pooler) hold pgx's statement cache at its capacity
// and the description cache, which pgx's default exec mode does not use,
// small; capacities the DSN sets are kept.
func TestConnectionCacheCapacities(t *testing.T) {
	ctx := testCtx(t)
	for _, tc := range []struct {
		name       string
		extra      []string
		stmt, desc int
	}{
		{"defaults", nil, 512, 16},
		{"set in the DSN", []string{"statement_cache_capacity=100", "description_cache_capacity=512"}, 100, 512},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, conn, rec := open(t, tc.extra...)
			// A read on a replica opens a connection of its pool.
			var one int
			if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
				t.Fatal(err)
			}
			evs := rec.snapshot()
			e := evs[len(evs)-1]
			if e.Primary {
				t.Fatalf("the read ran on the primary: %+v", e)
			}
			// The DSN's hosts: the primary, then the replicas (names()).
			replica := -1
			for i, name := range strings.Split(names(), ",") {
				if name == e.Endpoint {
					replica = i
				}
			}
			if replica < 0 {
				t.Fatalf("endpoint %q is none of %s", e.Endpoint, names())
			}
			stmt, desc, err := pgrouted.ReplicaCacheCapacities(ctx, conn, replica)
			if err != nil {
				t.Fatal(err)
			}
			if stmt != tc.stmt || desc != tc.desc {
				t.Errorf("replica connection: statement cache %d, description cache %d; want %d, %d", stmt, desc, tc.stmt, tc.desc)
			}
			// A statement on the primary opens the connection's session.
			c, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.QueryRowContext(pgrouted.WithRoute(ctx, pgrouted.Primary), "SELECT 1").Scan(&one); err != nil {
				t.Fatal(err)
			}
			if err := c.Raw(func(dc any) error {
				stmt, desc, ok := pgrouted.PrimaryCacheCapacities(dc)
				if !ok {
					t.Fatal("no primary session")
				}
				if stmt != tc.stmt || desc != tc.desc {
					t.Errorf("primary session: statement cache %d, description cache %d; want %d, %d", stmt, desc, tc.stmt, tc.desc)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
