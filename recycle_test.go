//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgrouted/pgrouted"
)

// The replica reads' rows (the driver's) and QueryRow's call (the Pool's)
// are recycled once closed or scanned (rows.go, pgxcall.go). These tests
// fail when a recycled piece is still in use: a read that gets another
// read's rows, or a Row scanned twice that reads a reused one.

// TestRecycledReadsKeepTheirRows runs concurrent replica reads of known
// rows through database/sql and through the Pool, one row and several,
// and checks every value read.
func TestRecycledReadsKeepTheirRows(t *testing.T) {
	ctx := testCtx(t)
	mustExec(t, ctx, cluster.Primary(), `DROP TABLE IF EXISTS recycle_kv;
		CREATE TABLE recycle_kv (id int PRIMARY KEY, v text NOT NULL);
		INSERT INTO recycle_kv SELECT g, 'v' || g FROM generate_series(1, 200) g`)
	replicated(t, ctx)
	db, dbConn, dbRec := open(t)
	p, poolRec := openPool(t, nil)
	// The writes and their read-backs through connectors of their own: a
	// write moves its connector's watermark, which would send some plain
	// reads to the primary.
	wdb, wdbConn, _ := open(t)
	wp, _ := openPool(t, nil)

	const workers, reads = 8, 150
	var wg sync.WaitGroup
	errs := make(chan error, 4*workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range reads {
				id := (w*reads+i)%197 + 1
				want := fmt.Sprintf("v%d", id)
				var v string
				if err := db.QueryRowContext(ctx, "SELECT v FROM recycle_kv /* recycle-row */ WHERE id = $1", id).Scan(&v); err != nil || v != want {
					errs <- fmt.Errorf("database/sql QueryRow of %d: %q, %v", id, v, err)
					return
				}
				if err := p.QueryRow(ctx, "SELECT v FROM recycle_kv /* recycle-row */ WHERE id = $1", id).Scan(&v); err != nil || v != want {
					errs <- fmt.Errorf("Pool QueryRow of %d: %q, %v", id, v, err)
					return
				}
				// A write and its read-back, which a replica serves after a
				// check of its position (checkedRows, readChecked), or the
				// primary.
				if err := recycleReadBack(ctx, wdb, wp, w, i); err != nil {
					errs <- err
					return
				}
				// Several rows: from id to id+3.
				rows, err := db.QueryContext(ctx, "SELECT v FROM recycle_kv /* recycle-rows */ WHERE id BETWEEN $1 AND $1 + 3 ORDER BY id", id)
				if err != nil {
					errs <- fmt.Errorf("database/sql Query from %d: %v", id, err)
					return
				}
				var got []string
				for rows.Next() {
					if err := rows.Scan(&v); err != nil {
						errs <- err
						return
					}
					got = append(got, v)
				}
				if err := errors.Join(rows.Err(), rows.Close()); err != nil {
					errs <- fmt.Errorf("database/sql Query from %d: %v", id, err)
					return
				}
				if err := checkRun(got, id); err != nil {
					errs <- fmt.Errorf("database/sql Query: %v", err)
					return
				}
				prows, err := p.Query(ctx, "SELECT v FROM recycle_kv /* recycle-rows */ WHERE id BETWEEN $1 AND $1 + 3 ORDER BY id", id)
				if err != nil {
					errs <- fmt.Errorf("Pool Query from %d: %v", id, err)
					return
				}
				got, err = pgx.CollectRows(prows, pgx.RowTo[string])
				if err != nil {
					errs <- fmt.Errorf("Pool Query from %d: %v", id, err)
					return
				}
				if err := checkRun(got, id); err != nil {
					errs <- fmt.Errorf("Pool Query: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Every borrowed replica connection was given back, and counted out:
	// a recycled one still counted in flight would make its host look
	// busy for ever.
	for name, c := range map[string]interface{ Topology() pgrouted.Snapshot }{"database/sql": dbConn, "Pool": p, "database/sql (writes)": wdbConn, "Pool (writes)": wp} {
		for _, h := range c.Topology().Hosts {
			if h.InflightReads != 0 {
				t.Errorf("%s: %s counts %d reads in flight after every read ended", name, h.Name, h.InflightReads)
			}
		}
	}
	// The reads were replica reads, the ones whose pieces are recycled.
	for name, rec := range map[string]*routes{"database/sql": dbRec, "Pool": poolRec} {
		onReplica, all := 0, 0
		for _, e := range rec.snapshot() {
			if strings.Contains(e.Query, "/* recycle-row") {
				all++
				if !e.Primary {
					onReplica++
				}
			}
		}
		if all != 2*workers*reads || onReplica < all*9/10 {
			t.Errorf("%s: %d of %d reads on a replica (want %d reads, 90%% of them on replicas)", name, onReplica, all, 2*workers*reads)
		}
	}
}

// checkRun checks that got is v<id> … v<id+3>, less the ids past the
// table's 200 rows.
func checkRun(got []string, id int) error {
	var want []string
	for i := id; i <= min(id+3, 200); i++ {
		want = append(want, fmt.Sprintf("v%d", i))
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		return fmt.Errorf("from %d: got %v, want %v", id, got, want)
	}
	return nil
}

// TestPoolRowScannedTwice: a Pool's pgx.Row scanned a second time
// returns what pgx's does (its rows are closed): pgx.ErrNoRows after a
// row was read, the first Scan's error after one failed. The call under
// it went back to be reused after the first Scan; the second one must not
// read it.
func TestPoolRowScannedTwice(t *testing.T) {
	ctx := testCtx(t)
	p, _ := openPool(t, nil)
	var n int
	row := p.QueryRow(ctx, "SELECT 41 + 1")
	if err := row.Scan(&n); err != nil || n != 42 {
		t.Fatalf("first Scan: %d, %v", n, err)
	}
	// Other reads take the recycled call meanwhile.
	for range 20 {
		var m int
		if err := p.QueryRow(ctx, "SELECT 7").Scan(&m); err != nil || m != 7 {
			t.Fatalf("another read: %d, %v", m, err)
		}
	}
	n = 0
	if err := row.Scan(&n); !errors.Is(err, pgx.ErrNoRows) || n != 0 {
		t.Errorf("second Scan: %d, %v; want pgx.ErrNoRows and nothing scanned", n, err)
	}

	var s string
	bad := p.QueryRow(ctx, "SELECT 'not a number'")
	err := bad.Scan(&n)
	if err == nil {
		t.Fatal("scanning text into an int succeeded")
	}
	if err2 := bad.Scan(&s); err2 == nil || err2.Error() != err.Error() {
		t.Errorf("second Scan after a failed one: %v; want the first one's error %v", err2, err)
	}

	none := p.QueryRow(ctx, "SELECT 1 WHERE false")
	for i := range 2 {
		if err := none.Scan(&n); !errors.Is(err, pgx.ErrNoRows) {
			t.Errorf("Scan %d of no row: %v; want pgx.ErrNoRows", i+1, err)
		}
	}
}

// recycleReadBack writes a row through database/sql and through the Pool,
// each with a Session, and reads each back at once.
func recycleReadBack(ctx context.Context, db *sql.DB, p *pgrouted.Pool, w, i int) error {
	for k, via := range []string{"database/sql", "Pool"} {
		sctx := pgrouted.WithSession(ctx, pgrouted.NewSession())
		id := 1000 + (w*1000+i)*2 + k
		want := fmt.Sprintf("w%d", id)
		var v string
		var err error
		if via == "Pool" {
			if _, err = p.Exec(sctx, "INSERT INTO recycle_kv VALUES ($1, $2)", id, want); err == nil {
				err = p.QueryRow(sctx, "SELECT v FROM recycle_kv /* recycle-back */ WHERE id = $1", id).Scan(&v)
			}
		} else {
			if _, err = db.ExecContext(sctx, "INSERT INTO recycle_kv VALUES ($1, $2)", id, want); err == nil {
				err = db.QueryRowContext(sctx, "SELECT v FROM recycle_kv /* recycle-back */ WHERE id = $1", id).Scan(&v)
			}
		}
		if err != nil || v != want {
			return fmt.Errorf("%s read-back of %d: %q, %v", via, id, v, err)
		}
	}
	return nil
}

// TestPoolRowsReadAfterClose: a Pool Query's rows answer after they are
// closed, and after later queries reused the call they came from (pgx's
// own rows do: pgx.CollectRows reads Err after the last row, and code
// reads CommandTag once done).
func TestPoolRowsReadAfterClose(t *testing.T) {
	ctx := testCtx(t)
	p, _ := openPool(t, nil)
	rows, err := p.Query(ctx, "SELECT g AS n FROM generate_series(1, 4) g")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil || len(got) != 4 {
		t.Fatalf("rows: %v, %v", got, err)
	}
	for range 20 {
		other, err := p.Query(ctx, "SELECT 'x' AS s, 1 AS m")
		if err != nil {
			t.Fatal(err)
		}
		other.Close()
	}
	if err := rows.Err(); err != nil {
		t.Errorf("Err after Close: %v", err)
	}
	if tag := rows.CommandTag().String(); tag != "SELECT 4" {
		t.Errorf("CommandTag after Close: %q, want SELECT 4", tag)
	}
}
