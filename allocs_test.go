package pgrouted_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted"
)

// maxExtraAllocs is what an autocommit write through pgrouted may allocate
// beyond the same write through pgx (issue 26): the routing decision, the
// watermark, and the read of the WAL position pipelined with the commit.
const maxExtraAllocs = 10

// allocsPerRun is testing.AllocsPerRun of f after a warm-up (connections
// open, statements described and prepared): the least of five
// measurements, as what runs in the background (probes, the catalog's
// reads) counts too.
func allocsPerRun(t *testing.T, f func() error) float64 {
	t.Helper()
	for range 20 {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	least := -1.0
	for range 5 {
		n := testing.AllocsPerRun(200, func() {
			if e := f(); e != nil && err == nil {
				err = e
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if least < 0 || n < least {
			least = n
		}
	}
	return least
}

// TestWriteAllocations: an autocommit INSERT (and INSERT … RETURNING)
// through the driver and through the Pool allocates at most
// maxExtraAllocs more than the same through pgx's database/sql driver and
// pgxpool, straight to the primary, in the same process.
func TestWriteAllocations(t *testing.T) {
	ctx := context.Background()
	p := cluster.Primary()
	if err := p.Exec(testCtx(t), "CREATE TABLE IF NOT EXISTS allocs_w (id bigserial PRIMARY KEY, v text)"); err != nil {
		t.Fatal(err)
	}
	// Straight to the servers: the fault points run in this process, and
	// allocate per read. Probes far apart: their allocations are not the
	// statements'.
	dsn := cluster.DSN()
	for _, n := range cluster.Nodes() {
		dsn = strings.Replace(dsn, n.Addr(), n.DirectAddr(), 1)
	}
	dsn += "&pgrouted_probe_interval=3s"
	const insert = "INSERT INTO allocs_w (v) VALUES ($1)"
	const returning = "INSERT INTO allocs_w (v) VALUES ($1) RETURNING id"

	pgxDB, err := sql.Open("pgx", p.DirectDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer pgxDB.Close()
	routedDB, err := sql.Open("pgrouted", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer routedDB.Close()
	pgxPool, err := pgxpool.New(ctx, p.DirectDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer pgxPool.Close()
	routedPool, err := pgrouted.NewPool(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer routedPool.Close()

	sqlExec := func(db *sql.DB) func() error {
		return func() error {
			_, err := db.ExecContext(ctx, insert, "x")
			return err
		}
	}
	sqlReturning := func(db *sql.DB) func() error {
		return func() error {
			var id int64
			return db.QueryRowContext(ctx, returning, "x").Scan(&id)
		}
	}
	for _, c := range []struct {
		name        string
		pgx, routed func() error
	}{
		{"driver/insert", sqlExec(pgxDB), sqlExec(routedDB)},
		{"driver/insert-returning", sqlReturning(pgxDB), sqlReturning(routedDB)},
		{"pool/insert", func() error {
			_, err := pgxPool.Exec(ctx, insert, "x")
			return err
		}, func() error {
			_, err := routedPool.Exec(ctx, insert, "x")
			return err
		}},
		{"pool/insert-returning", func() error {
			var id int64
			return pgxPool.QueryRow(ctx, returning, "x").Scan(&id)
		}, func() error {
			var id int64
			return routedPool.QueryRow(ctx, returning, "x").Scan(&id)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := allocsPerRun(t, c.pgx)
			got := allocsPerRun(t, c.routed)
			t.Logf("allocations per statement: pgx %.1f, pgrouted %.1f", base, got)
			if got > base+maxExtraAllocs {
				t.Errorf("pgrouted allocates %.1f times per statement, pgx %.1f: more than %d above", got, base, maxExtraAllocs)
			}
		})
	}
}
