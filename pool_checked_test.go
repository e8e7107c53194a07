//go:build unix

package pgrouted_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgrouted/pgrouted"
)

// checkedPool opens a Pool whose reads right after a write are checked on
// a replica: probes far apart (only the check can tell), no latency
// window, one connection per replica pool; extra DSN parameters added.
func checkedPool(t *testing.T, extra string) (*pgrouted.Pool, *routes) {
	t.Helper()
	return openPoolDSN(t, cluster.DSN()+"&pgrouted_names="+names()+"&pgrouted_probe_interval=5s&pgrouted_latency_window=off&pgrouted_replica_max_conns=1"+extra, nil)
}

type checkedItem struct {
	ID int32     `db:"id"`
	V  string    `db:"v"`
	At time.Time `db:"at"`
}

// TestPoolCheckedRead: a Pool's read right after a write, checked on a
// replica in the same round trip (TestCheckedReadCostsOneRoundTrip), gives
// pgx's own rows: pgx.CollectRows with RowToStructByName, the field
// descriptions, the connection, QueryRow's Scan; every row of the caller's
// writes is there; and once the rows are closed the replica connection is
// back in its pool.
func TestPoolCheckedRead(t *testing.T) {
	// The writes are a Session's, so that each read checks at once
	// (ReasonDeferred otherwise, after a few).
	ctx := pgrouted.WithSession(testCtx(t), pgrouted.NewSession())
	p, rec := checkedPool(t, "")
	ddlOn(t, ctx, poolClient{p}, p.Connector(), "DROP TABLE IF EXISTS pool_checked; CREATE TABLE pool_checked (id int PRIMARY KEY, v text, at timestamptz DEFAULT now())")
	checked := 0
	for i := int32(0); i < 12; i++ {
		if _, err := p.Exec(ctx, "INSERT INTO pool_checked (id, v) VALUES ($1, $2)", i, fmt.Sprint("v", i)); err != nil {
			t.Fatal(err)
		}
		replicated(t, ctx)
		rows, err := p.Query(ctx, "SELECT id, v, at FROM pool_checked WHERE id <= $1 ORDER BY id", i)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		ev := lastRead(t, rec)
		var names []string
		for _, fd := range rows.FieldDescriptions() {
			names = append(names, fd.Name)
		}
		if got := strings.Join(names, ","); got != "id,v,at" {
			t.Errorf("read %d: field descriptions %s, want id,v,at", i, got)
		}
		if rows.Conn() == nil {
			t.Errorf("read %d: the rows give no connection", i)
		}
		items, err := pgx.CollectRows(rows, pgx.RowToStructByName[checkedItem])
		if err != nil {
			t.Fatalf("read %d: CollectRows: %v", i, err)
		}
		if len(items) != int(i)+1 || items[i].ID != i || items[i].V != fmt.Sprint("v", i) || items[i].At.IsZero() {
			t.Fatalf("read %d (%s on %s): %+v, want rows 0 to %d", i, ev.Reason, ev.Endpoint, items, i)
		}
		if !ev.Primary && ev.Reason == pgrouted.ReasonCheck {
			checked++
		}
		if n := pgrouted.PoolInUse(p); n != 0 {
			t.Errorf("read %d: %d connections in use once its rows are closed", i, n)
		}
		for _, h := range p.Topology().Hosts {
			if h.InflightReads != 0 {
				t.Errorf("read %d: %s has %d reads in flight once its rows are closed", i, h.Name, h.InflightReads)
			}
		}

		if _, err := p.Exec(ctx, "UPDATE pool_checked SET v = $1 WHERE id = $2", "u", i); err != nil {
			t.Fatal(err)
		}
		replicated(t, ctx)
		var v string
		if err := p.QueryRow(ctx, "SELECT v FROM pool_checked WHERE id = $1", i).Scan(&v); err != nil || v != "u" {
			t.Fatalf("QueryRow %d: %q, %v; want u", i, v, err)
		}
		if ev := lastRead(t, rec); !ev.Primary && ev.Reason == pgrouted.ReasonCheck {
			checked++
		}
		if err := p.QueryRow(ctx, "SELECT v FROM pool_checked WHERE id = $1", -1).Scan(&v); err != pgx.ErrNoRows {
			t.Fatalf("QueryRow of no row: %v, want pgx.ErrNoRows", err)
		}
	}
	if checked < 4 {
		t.Fatalf("only %d reads were checked on a replica: the test did not exercise the check", checked)
	}
}

// TestPoolCheckedReadOfAStaleDescription is
// TestCheckedReadOfAStaleDescription through a Pool: a column added
// elsewhere makes the replica's cached description stale; the checked read
// runs again, freshly described, and its pgx rows have every column, the
// replica connection held by the open rows only once.
func TestPoolCheckedReadOfAStaleDescription(t *testing.T) {
	// The writes are a Session's, so that each read checks at once
	// (ReasonDeferred otherwise, after a few).
	ctx := pgrouted.WithSession(testCtx(t), pgrouted.NewSession())
	p, rec := checkedPool(t, "")
	if _, err := p.Exec(ctx, "DROP TABLE IF EXISTS pool_stale_checked; CREATE TABLE pool_stale_checked (id int PRIMARY KEY, a int)"); err != nil {
		t.Fatal(err)
	}
	const q = "SELECT * FROM pool_stale_checked WHERE id >= $1"
	cols := "id,a"
	exercised := 0
	for i := 0; i < 8 && exercised < 2; i++ {
		if _, err := p.Exec(ctx, "INSERT INTO pool_stale_checked (id, a) VALUES ($1, $1)", i); err != nil {
			t.Fatal(err)
		}
		replicated(t, ctx)
		rows, err := p.Query(ctx, q, 0)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		ev := lastRead(t, rec)
		if !ev.Primary && ev.Reason == pgrouted.ReasonCheck && ev.Retried {
			exercised++
			for _, h := range p.Topology().Hosts {
				if h.Name == ev.Endpoint && (h.InflightReads != 1 || h.Pool.AcquiredConns != 1) {
					t.Errorf("read %d on %s, rows open: %d reads in flight, %d connections acquired; want 1 and 1", i, h.Name, h.InflightReads, h.Pool.AcquiredConns)
				}
			}
		}
		var names []string
		for _, fd := range rows.FieldDescriptions() {
			names = append(names, fd.Name)
		}
		n := 0
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil || len(vals) != len(names) {
				t.Fatalf("read %d: values %v, %v; want %d", i, vals, err, len(names))
			}
			n++
		}
		if err := rows.Err(); err != nil || strings.Join(names, ",") != cols || n != i+1 {
			t.Fatalf("read %d (%s on %s): columns %v, %d rows, %v; want %s and %d rows", i, ev.Reason, ev.Endpoint, names, n, err, cols, i+1)
		}
		// Made elsewhere: the connector's descriptions do not know.
		mustExec(t, ctx, cluster.Primary(), fmt.Sprintf("ALTER TABLE pool_stale_checked ADD COLUMN c%d int", i))
		cols += fmt.Sprintf(",c%d", i)
	}
	if exercised == 0 {
		t.Fatal("no checked replica read ran again after a stale description: the test did not exercise it")
	}
}

// TestPoolCheckedReadRefused: a writing function listed as a read, called
// right after a write (so checked on the replica, in the pipeline after
// the check), is refused by the replica (SQLSTATE 25006) and runs on the
// primary, once; its write is read back at once. The writes are a
// Session's, so that the call checks at once (one read per write would not
// read a deferred position for long: ReasonDeferred).
func TestPoolCheckedReadRefused(t *testing.T) {
	ctx := pgrouted.WithSession(testCtx(t), pgrouted.NewSession())
	setupFunctions(t, ctx)
	p, rec := checkedPool(t, "&pgrouted_read_functions=app.add_item")
	for i := range 3 {
		v := fmt.Sprintf("pool-checked-refused-%d-%d", i, time.Now().UnixNano())
		if _, err := p.Exec(ctx, "INSERT INTO app.items (v) VALUES ($1)", v+"-before"); err != nil {
			t.Fatal(err)
		}
		replicated(t, ctx)
		// A new text each time: a refused one goes to the primary first
		// from then on.
		addItemRefused(t, ctx, p, rec, fmt.Sprintf("SELECT app.add_item($1) /* %d */", i), v)
	}
}

// TestPoolCheckedReadBehind: with replay paused on every replica, a read
// right after a write finds them behind (the check, or what is known of
// them) and runs on the primary, which has the row.
func TestPoolCheckedReadBehind(t *testing.T) {
	ctx := testCtx(t)
	restore(t)
	mustExec(t, ctx, cluster.Primary(), "DROP TABLE IF EXISTS pool_behind; CREATE TABLE pool_behind (id int)")
	replicated(t, ctx)
	p, rec := checkedPool(t, "")
	for _, r := range cluster.Replicas() {
		if err := r.PauseReplay(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		ev := writeReadBack(t, ctx, poolClient{p}, rec, "pool_behind", i)
		if !ev.Primary || (ev.Reason != pgrouted.ReasonBehind && ev.Reason != pgrouted.ReasonCatchingUp && ev.Reason != pgrouted.ReasonDeferred) {
			t.Fatalf("read-back %d with replay paused: %+v, want the primary (behind)", i, ev.Decision)
		}
	}
	if n := pgrouted.PoolInUse(p); n != 0 {
		t.Errorf("%d connections in use after the reads", n)
	}
}
