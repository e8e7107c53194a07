//go:build unix

package pgrouted_test

import (
	"context"
	"database/sql"
	"math"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted"
)

// columnTypeOf is what database/sql says of a column.
type columnTypeOf struct {
	Name, DatabaseTypeName string
	Length                 int64
	LengthOK               bool
	Precision, Scale       int64
	DecimalOK              bool
	ScanType               reflect.Type
}

// columnTypesOf runs q (a query, or a statement returning rows) through
// query and returns what ColumnTypes says of its columns.
func columnTypesOf(t *testing.T, query func(string) (*sql.Rows, error), q string) []columnTypeOf {
	t.Helper()
	rows, err := query(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	cts, err := rows.ColumnTypes()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]columnTypeOf, len(cts))
	for i, ct := range cts {
		c := &out[i]
		c.Name, c.DatabaseTypeName, c.ScanType = ct.Name(), ct.DatabaseTypeName(), ct.ScanType()
		c.Length, c.LengthOK = ct.Length()
		c.Precision, c.Scale, c.DecimalOK = ct.DecimalSize()
	}
	for rows.Next() {
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// columnTypesQuery has a column of each type whose type modifier
// ColumnTypes decodes, with and without one.
const columnTypesQuery = `SELECT NULL::timestamp AS ts, NULL::timestamp(3) AS ts3, NULL::timestamptz AS tstz,
	NULL::timestamptz(0) AS tstz0, NULL::time AS tm, NULL::time(2) AS tm2, NULL::timetz AS tmtz, NULL::timetz(4) AS tmtz4,
	NULL::interval AS iv, NULL::interval(1) AS iv1, NULL::interval day to second(3) AS ivds3, NULL::interval year to month AS ivym,
	NULL::numeric AS nu, NULL::numeric(9,2) AS n, NULL::varchar AS vcu, NULL::varchar(7) AS vc, NULL::bpchar AS bpc,
	NULL::char(3) AS ch, NULL::varbit AS vbu, NULL::varbit(5) AS vb, NULL::text AS tx, NULL::bytea AS by, 1::int4 AS i`

// TestColumnTypesAsStdlib: rows.ColumnTypes() through pgrouted (a read on
// a replica, a read in a transaction on the primary, an INSERT …
// RETURNING on the primary) says what pgx's stdlib says of the same
// statement, for the types whose length, precision and scale come from
// the type modifier (pgx v5.13.0 changed the temporal types', an
// unconstrained numeric's and unconstrained varchar's, bpchar's and
// varbit's).
func TestColumnTypesAsStdlib(t *testing.T) {
	ctx := testCtx(t)
	db, _, rec := open(t)
	cfg, err := pgx.ParseConfig(cluster.Primary().DSN())
	if err != nil {
		t.Fatal(err)
	}
	pdb := stdlib.OpenDB(*cfg)
	defer pdb.Close()
	stdlibQuery := func(q string) (*sql.Rows, error) { return pdb.QueryContext(ctx, q) }

	want := columnTypesOf(t, stdlibQuery, columnTypesQuery)
	// The comparison is only worth it if stdlib reports what the type
	// modifiers say: spot-check it.
	for i, w := range []struct {
		name             string
		precision, scale int64
		ok               bool
	}{{"ts", 0, 6, true}, {"ts3", 0, 3, true}, {"ivds3", 0, 3, true}, {"nu", 0, 0, false}, {"n", 9, 2, true}} {
		ct := want[indexOfColumn(t, want, w.name)]
		if ct.Precision != w.precision || ct.Scale != w.scale || ct.DecimalOK != w.ok {
			t.Errorf("stdlib %d %s: %+v, want precision %d scale %d ok %v", i, w.name, ct, w.precision, w.scale, w.ok)
		}
	}
	if ct := want[indexOfColumn(t, want, "vcu")]; ct.Length != math.MaxInt64 || !ct.LengthOK {
		t.Errorf("stdlib unconstrained varchar: %+v", ct)
	}

	same := func(what string, got, want []columnTypeOf) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d columns, stdlib %d", what, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: column %d: %+v, stdlib %+v", what, i, got[i], want[i])
			}
		}
	}
	// lastRoute is the route of the last statement that ran q.
	lastRoute := func(q string) pgrouted.RouteEvent {
		t.Helper()
		evs := rec.snapshot()
		for i := len(evs) - 1; i >= 0; i-- {
			if evs[i].Query == q {
				return evs[i]
			}
		}
		t.Fatalf("no route event for %s", q)
		return pgrouted.RouteEvent{}
	}

	t.Run("replica", func(t *testing.T) {
		q := columnTypesQuery + " -- coltypes replica"
		same("replica read", columnTypesOf(t, func(q string) (*sql.Rows, error) { return db.QueryContext(ctx, q) }, q), want)
		if e := lastRoute(q); e.Primary || e.Op != "read" {
			t.Errorf("the read ran as %s on the primary: %v (%s)", e.Op, e.Primary, e.Reason)
		}
	})
	t.Run("transaction", func(t *testing.T) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		same("read in a transaction", columnTypesOf(t, func(q string) (*sql.Rows, error) { return tx.QueryContext(ctx, q) }, columnTypesQuery), want)
	})
	// Last: a DDL holds reads back from the replicas until they replay it.
	t.Run("write", func(t *testing.T) {
		if _, err := db.ExecContext(ctx, `CREATE TABLE coltypes_w (id serial, ts timestamp(3), iv interval year to month,
			nu numeric, vcu varchar, vbu varbit)`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.ExecContext(context.Background(), "DROP TABLE coltypes_w") })
		q := "INSERT INTO coltypes_w DEFAULT VALUES RETURNING ts, iv, nu, vcu, vbu"
		want := columnTypesOf(t, stdlibQuery, q)
		got := columnTypesOf(t, func(q string) (*sql.Rows, error) { return db.QueryContext(ctx, q) }, q+" -- coltypes write")
		same("INSERT … RETURNING", got, want)
		if e := lastRoute(q + " -- coltypes write"); !e.Primary || e.Op != "write" {
			t.Errorf("the write ran as %s, on the primary: %v", e.Op, e.Primary)
		}
	})
}

// indexOfColumn returns the index of the column name in cts.
func indexOfColumn(t *testing.T, cts []columnTypeOf, name string) int {
	t.Helper()
	for i, ct := range cts {
		if ct.Name == name {
			return i
		}
	}
	t.Fatalf("no column %s", name)
	return -1
}
