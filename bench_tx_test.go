//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"testing"
)

// BenchmarkTxStatement measures the statements of a read-write
// transaction through pgrouted, on one pooled session whose statements are
// all cached: BEGIN, a SELECT * by key and an UPDATE of the row, COMMIT
// (read+update); and BEGIN, the same SELECT four times, COMMIT (select×4).
// Compare builds with benchstat: the difference is what the recovery from
// stale statements (txstale.go) costs a transaction.
func BenchmarkTxStatement(b *testing.B) {
	ctx := context.Background()
	p := cluster.Primary()
	if err := p.Exec(ctx, `DROP TABLE IF EXISTS bench_tx; CREATE TABLE bench_tx (id int PRIMARY KEY, v int, name text, at timestamptz DEFAULT now());
		INSERT INTO bench_tx (id, v, name) SELECT g, 0, 'row ' || g FROM generate_series(1, 100) g`); err != nil {
		b.Fatal(err)
	}
	conn := primaryAndReplica(b, nil)
	db := sql.OpenDB(conn)
	defer db.Close()
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	var (
		id, v int
		name  string
		at    any
	)
	tx := func(b *testing.B, i int, selects int, update bool) {
		t, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		for range selects {
			if err := t.QueryRowContext(ctx, "SELECT * FROM bench_tx WHERE id = $1", 1+i%100).Scan(&id, &v, &name, &at); err != nil {
				b.Fatal(err)
			}
		}
		if update {
			if _, err := t.ExecContext(ctx, "UPDATE bench_tx SET v = v + 1 WHERE id = $1", 1+i%100); err != nil {
				b.Fatal(err)
			}
		}
		if err := t.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name    string
		selects int
		update  bool
	}{{"stmts=read+update", 1, true}, {"stmts=select×4", 4, false}} {
		b.Run(c.name, func(b *testing.B) {
			tx(b, 0, c.selects, c.update) // cached
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				tx(b, i, c.selects, c.update)
				i++
			}
		})
	}
}
