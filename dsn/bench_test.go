package dsn

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// BenchmarkParse parses a 3-host DSN with 5 routing keys.
func BenchmarkParse(b *testing.B) {
	isolateEnv(b, nil)
	const dsn = "postgres://app:secret@db1:5432,db2:5432,db3:5432/app?sslmode=disable&application_name=web" +
		"&pgrouted_max_lag=2s&pgrouted_probe_interval=500ms&pgrouted_select=weighted" +
		"&pgrouted_weights=1,2,2&pgrouted_names=east,west,north"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(dsn); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPgxParseConfig is pgx's own parse of the same hosts without the
// routing keys, for comparison.
func BenchmarkPgxParseConfig(b *testing.B) {
	isolateEnv(b, nil)
	const dsn = "postgres://app:secret@db1:5432,db2:5432,db3:5432/app?sslmode=disable&application_name=web"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := pgx.ParseConfig(dsn); err != nil {
			b.Fatal(err)
		}
	}
}
