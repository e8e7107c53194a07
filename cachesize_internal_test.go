package pgrouted

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// The pgx caches pgrouted sizes: the one a connection's exec mode does
// not use, once its host answered a probe, unless the connection string
// sets it or another exec mode.
func TestCacheSizing(t *testing.T) {
	const dsn = "postgres://app@db1:5432/shop?sslmode=disable"
	for _, tc := range []struct {
		name                  string
		params                string
		probed, describeOnly  bool
		wantStmt, wantDescrip int
	}{
		{"not probed yet", "", false, false, 512, 512},
		{"direct", "", true, false, 512, smallCacheCapacity},
		{"behind a pooler", "", true, true, smallCacheCapacity, 512},
		{"description capacity set to pgx's default", "&description_cache_capacity=512", true, false, 512, 512},
		{"description capacity set", "&description_cache_capacity=100", true, false, 512, 100},
		{"statement capacity set, behind a pooler", "&statement_cache_capacity=512", true, true, 512, 512},
		{"statement capacity set, direct", "&statement_cache_capacity=64", true, false, 64, smallCacheCapacity},
		{"cache_describe mode", "&default_query_exec_mode=cache_describe", true, false, 512, 512},
		{"exec mode", "&default_query_exec_mode=exec", true, true, 512, 512},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc, err := pgx.ParseConfig(dsn + tc.params)
			if err != nil {
				t.Fatal(err)
			}
			s := newCacheSizing(cc)
			conn := cc.Copy()
			s.apply(conn, tc.probed, tc.describeOnly)
			if conn.StatementCacheCapacity != tc.wantStmt || conn.DescriptionCacheCapacity != tc.wantDescrip {
				t.Fatalf("statement cache %d, description cache %d; want %d, %d",
					conn.StatementCacheCapacity, conn.DescriptionCacheCapacity, tc.wantStmt, tc.wantDescrip)
			}
			if cc.StatementCacheCapacity != conn.StatementCacheCapacity && cc.DescriptionCacheCapacity != conn.DescriptionCacheCapacity {
				t.Fatal("both caches changed")
			}
		})
	}
	if s := newCacheSizing(nil); s != (cacheSizing{}) {
		t.Fatalf("no configuration: %+v", s)
	}
}
