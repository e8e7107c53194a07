//go:build unix

package pgpipe_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgrouted/pgrouted/internal/pgpipe"
)

// resultRowsConn returns a stdlib connection straight to the primary.
func resultRowsConn(t *testing.T, ctx context.Context) *stdlib.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(cluster.Primary().DirectDSN())
	if err != nil {
		t.Fatal(err)
	}
	dc, err := stdlib.GetConnector(*cfg).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	return dc.(*stdlib.Conn)
}

// columnType is what a driver.Rows' ColumnType* methods say of a column.
type columnType struct {
	DatabaseTypeName string
	Length           int64
	LengthOK         bool
	Precision, Scale int64
	PrecisionScaleOK bool
	ScanType         reflect.Type
}

// columnTypes asks rows' ColumnType* methods about every column.
func columnTypes(t *testing.T, rows driver.Rows) []columnType {
	t.Helper()
	name, ok1 := rows.(driver.RowsColumnTypeDatabaseTypeName)
	length, ok2 := rows.(driver.RowsColumnTypeLength)
	ps, ok3 := rows.(driver.RowsColumnTypePrecisionScale)
	scan, ok4 := rows.(driver.RowsColumnTypeScanType)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		t.Fatalf("%T lacks a ColumnType* interface: %v %v %v %v", rows, ok1, ok2, ok3, ok4)
	}
	cts := make([]columnType, len(rows.Columns()))
	for i := range cts {
		ct := &cts[i]
		ct.DatabaseTypeName = name.ColumnTypeDatabaseTypeName(i)
		ct.Length, ct.LengthOK = length.ColumnTypeLength(i)
		ct.Precision, ct.Scale, ct.PrecisionScaleOK = ps.ColumnTypePrecisionScale(i)
		ct.ScanType = scan.ColumnTypeScanType(i)
	}
	return cts
}

// rowsSnapshot is everything a driver.Rows gave.
type rowsSnapshot struct {
	columns []string
	types   []columnType
	rows    [][]driver.Value
	end     error // what Next returned after the last row: io.EOF or the query's error
	again   error // what the next Next returned
	close   error // what Close returned
}

// snapshot reads rows to the end and closes them. Each row gets its own
// dest, so that values aliasing a reused buffer would show.
func snapshot(t *testing.T, rows driver.Rows) rowsSnapshot {
	t.Helper()
	s := rowsSnapshot{columns: rows.Columns(), types: columnTypes(t, rows)}
	for {
		dest := make([]driver.Value, len(s.columns))
		if err := rows.Next(dest); err != nil {
			s.end = err
			break
		}
		s.rows = append(s.rows, dest)
	}
	s.again = rows.Next(make([]driver.Value, len(s.columns)))
	s.close = rows.Close()
	return s
}

// stdlibRows runs q with args through stdlib's QueryContext.
func stdlibRows(t *testing.T, ctx context.Context, sc *stdlib.Conn, q string, args ...any) rowsSnapshot {
	t.Helper()
	named := make([]driver.NamedValue, len(args))
	for i, a := range args {
		named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	rows, err := sc.QueryContext(ctx, q, named)
	if err != nil {
		t.Fatalf("stdlib query: %v", err)
	}
	return snapshot(t, rows)
}

// doneRecord counts the calls of a done func and keeps their argument and
// the errors of finishing the pipeline.
type doneRecord struct {
	calls   int
	err     error // done's argument
	plErr   error // reading the PipelineSync and closing the pipeline
	returns error // what done returns; its argument when nil
}

// pipelineRows sends q with args in a pipeline, Parse-Bind-Describe-Execute
// then Sync, with stdlib's result formats, and returns NewRows over its
// result. Its done reads the PipelineSync and closes the pipeline.
// mustRows is the same for a query that does not fail before its first row.
func pipelineRows(t *testing.T, ctx context.Context, sc *stdlib.Conn, rec *doneRecord, q string, args ...any) (driver.Rows, error) {
	t.Helper()
	pgConn := sc.Conn().PgConn()
	m := sc.Conn().TypeMap()
	sd, err := pgConn.Prepare(ctx, "", q, nil)
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	params := make([][]byte, len(args))
	for i, a := range args {
		if params[i], err = m.Encode(sd.ParamOIDs[i], pgtype.TextFormatCode, a, nil); err != nil {
			t.Fatalf("encode $%d: %v", i+1, err)
		}
	}
	pl := pgConn.StartPipeline(ctx)
	pl.SendQueryParams(q, params, sd.ParamOIDs, nil, pgpipe.ResultFormats(sd.Fields))
	pl.SendPipelineSync()
	if err := pl.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	res, err := pl.GetResults()
	if err != nil {
		pl.Close()
		t.Fatalf("pipeline results: %v", err)
		return nil, err
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		pl.Close()
		t.Fatalf("pipeline results: %T, want *pgconn.ResultReader", res)
		return nil, err
	}
	return pgpipe.NewRows(m, rr, func(err error) error {
		rec.calls++
		rec.err = err
		res, serr := pl.GetResults()
		if _, ok := res.(*pgconn.PipelineSync); serr == nil && !ok {
			serr = fmt.Errorf("after the query: %T, want *pgconn.PipelineSync", res)
		}
		rec.plErr = errors.Join(serr, pl.Close())
		if rec.returns != nil {
			return rec.returns
		}
		return err
	})
}

// queryRows runs q with args through Rows.Query, pgx's Query on the
// connection under sc, with a done that records its calls.
func queryRows(t *testing.T, ctx context.Context, sc *stdlib.Conn, rec *doneRecord, q string, args ...any) (driver.Rows, error) {
	t.Helper()
	named := make([]driver.NamedValue, len(args))
	for i, a := range args {
		named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	r := new(pgpipe.Rows)
	err := r.Query(ctx, sc.Conn(), q, named, func(err error) error {
		rec.calls++
		rec.err = err
		if rec.returns != nil {
			return rec.returns
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// sameValue is reflect.DeepEqual, but NaN equals NaN.
func sameValue(a, b driver.Value) bool {
	if fa, ok := a.(float64); ok {
		if fb, ok := b.(float64); ok && math.IsNaN(fa) && math.IsNaN(fb) {
			return true
		}
	}
	return reflect.DeepEqual(a, b)
}

// compareSnapshots reports where got (the pipeline route) differs from want
// (stdlib's).
func mustRows(t *testing.T, ctx context.Context, sc *stdlib.Conn, rec *doneRecord, q string, args ...any) driver.Rows {
	t.Helper()
	rows, err := pipelineRows(t, ctx, sc, rec, q, args...)
	if err != nil {
		t.Fatalf("NewRows: %v", err)
	}
	return rows
}

func compareSnapshots(t *testing.T, got, want rowsSnapshot) {
	t.Helper()
	if !reflect.DeepEqual(got.columns, want.columns) {
		t.Fatalf("Columns() = %q, stdlib %q", got.columns, want.columns)
	}
	for i, c := range want.columns {
		if got.types[i] != want.types[i] {
			t.Errorf("column %d %s: types %+v, stdlib %+v", i, c, got.types[i], want.types[i])
		}
	}
	if len(got.rows) != len(want.rows) {
		t.Errorf("%d rows, stdlib %d", len(got.rows), len(want.rows))
	}
	for r := range min(len(got.rows), len(want.rows)) {
		for i, c := range want.columns {
			g, w := got.rows[r][i], want.rows[r][i]
			if !sameValue(g, w) {
				t.Errorf("row %d column %d %s: %T %#v, stdlib %T %#v", r, i, c, g, g, w, w)
			}
		}
	}
	sameErr := func(what string, g, w error) {
		t.Helper()
		var gpg, wpg *pgconn.PgError
		switch {
		case errors.As(w, &wpg):
			if !errors.As(g, &gpg) || gpg.Code != wpg.Code || gpg.Message != wpg.Message {
				t.Errorf("%s: %v, stdlib %v", what, g, w)
			}
		case g != w:
			t.Errorf("%s: %v, stdlib %v", what, g, w)
		}
	}
	sameErr("Next after the last row", got.end, want.end)
	sameErr("Next again", got.again, want.again)
	sameErr("Close", got.close, want.close)
}

// differential runs q through stdlib, through NewRows and through
// Rows.Query on one connection and compares what they give. It returns
// stdlib's snapshot.
func differential(t *testing.T, ctx context.Context, sc *stdlib.Conn, q string, args ...any) rowsSnapshot {
	t.Helper()
	want := stdlibRows(t, ctx, sc, q, args...)
	var rec doneRecord
	got := snapshot(t, mustRows(t, ctx, sc, &rec, q, args...))
	compareSnapshots(t, got, want)
	if rec.calls != 1 || rec.plErr != nil {
		t.Errorf("done: %d calls, pipeline error %v", rec.calls, rec.plErr)
	}
	if wantErr := want.end; wantErr == io.EOF && rec.err != nil {
		t.Errorf("done(%v), want done(nil)", rec.err)
	}
	rec = doneRecord{}
	rows, err := queryRows(t, ctx, sc, &rec, q, args...)
	if err != nil {
		t.Fatalf("Rows.Query: %v", err)
	}
	compareSnapshots(t, snapshot(t, rows), want)
	if rec.calls != 1 {
		t.Errorf("Rows.Query's done: %d calls", rec.calls)
	}
	if wantErr := want.end; wantErr == io.EOF && rec.err != nil {
		t.Errorf("Rows.Query's done(%v), want done(nil)", rec.err)
	}
	return want
}

// resultRowsWide creates, for the session, an enum, two domains and a table
// with a column of each of many types, and four rows: ordinary values, edge
// values (NaN, +Infinity, infinity dates, empty values), NULLs, and the
// opposite edges (-Infinity, -infinity, extreme integers).
const resultRowsWide = `
CREATE TYPE pg_temp.rr_mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN pg_temp.rr_posint AS int4 CHECK (VALUE > 0);
CREATE DOMAIN pg_temp.rr_code AS varchar(5);
CREATE TEMP TABLE rr_wide (
	id int4 PRIMARY KEY,
	b bool, by bytea, i2 int2, i4 int4, i8 int8, f4 float4, f8 float8,
	n numeric(10,2), nu numeric, tx text, vc varchar(12), vcu varchar, ch char(3), nm name,
	d date, ts timestamp, tstz timestamptz, tm time, tmtz timetz, iv interval,
	js json, jsb jsonb, u uuid, ine inet, ci cidr, mac macaddr, x xml,
	o oid, xi xid, cd cid, ia int4[], ta text[], tsa timestamptz[], mo money, lsn pg_lsn,
	bi bit(4), vb varbit(8), vbu varbit, tsv tsvector, pt point,
	e pg_temp.rr_mood, dm pg_temp.rr_posint, dc pg_temp.rr_code, rc regclass, ch1 "char"
);
INSERT INTO rr_wide VALUES
(1, true, '\xdeadbeef', 12, 1234, 1234567890123, 1.5, 2.25,
 12345678.91, 3.14159265358979323846264338327950288, 'héllo', 'varchar', 'unconstrained varchar', 'ab', 'aname',
 '1999-12-31', '1987-06-05 04:03:02.123456', '2024-02-29 23:59:59.999999+05:30', '13:14:15.5', '13:14:15+02', '1 year 2 mons 3 days 04:05:06.7',
 '{"a": [1, 2.5, "x"], "b": null}', '{"b": 1, "a": [true]}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '192.168.0.1/24', '10.0.0.0/8', '08:00:2b:01:02:03', '<a href="x">t</a>',
 4294967295, '42', '7', '{1,2,3}', '{"a b","c,d",NULL,"\"q\""}', '{"2001-02-03 04:05:06+00"}', 12.34, '16/B374D848',
 B'1010', B'101', B'1100110011', 'a fat cat sat on a mat', '(1.5,-2)',
 'happy', 5, 'abc', 'pg_class', 'x'),
(2, false, '', -32768, -2147483648, -9223372036854775808, 'NaN', 'Infinity',
 -0.01, 'NaN', '', '', '', '', '',
 'infinity', 'infinity', '-infinity', '00:00:00', '00:00:00-12', '-1 days -00:00:01',
 'null', '[]', '00000000-0000-0000-0000-000000000000', '::1', '2001:db8::/32', 'ff:ff:ff:ff:ff:ff', '',
 0, '0', '0', '{}', '{}', '{NULL}', -0.01, '0/0',
 B'0000', B'', B'', '', '(0,0)',
 'sad', 1, '', '-', ' '),
(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
 NULL, NULL, NULL, NULL, NULL),
(4, true, '\x00', 32767, 2147483647, 9223372036854775807, '-Infinity', '-Infinity',
 99999999.99, '-0.000000000000000000001', 'tab	and
newline', 'twelve chars', repeat('long ', 100), 'abc', 'zzz',
 '-infinity', '-infinity', 'infinity', '23:59:59.999999', '24:00:00+14', '-10000 years 00:00:00.000001',
 '"str"', '{"k": "ü\u00e9"}'::jsonb || '{"deep": {"x": [null]}}', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '0.0.0.0', '0.0.0.0/0', '00:00:00:00:00:00', '<?xml version="1.0"?><r/>',
 1, '4294967295', '4294967295', '{{1,2},{3,NULL}}', '{"ü","","NULL"}', '{infinity,-infinity}', '-92233720368547758.08', 'FFFFFFFF/FFFFFFFF',
 B'1111', B'11111111', B'1', '''quoted'':1A,2B', '(-1e300,1e-300)',
 'ok', 2147483647, 'zz', 'rr_wide', '\')
`

func TestResultRowsDifferential(t *testing.T) {
	ctx := testCtx(t)
	sc := resultRowsConn(t, ctx)
	if _, err := sc.Conn().Exec(ctx, resultRowsWide); err != nil {
		t.Fatal(err)
	}

	t.Run("wide", func(t *testing.T) {
		want := differential(t, ctx, sc, `SELECT t.*, t.xmin, t.cmin, t.tableoid, ROW(t.id, t.tx, t.ia) AS rec, t AS whole,
			'42'::xid AS xid_lit, '7'::cid AS cid_lit, (t.n * 2)::numeric(12,3) AS n2,
			CASE WHEN t.id = 3 THEN NULL ELSE 'pg_class'::regclass::oid END AS o2
			FROM rr_wide t ORDER BY t.id`)
		if len(want.rows) != 4 || want.end != io.EOF {
			t.Fatalf("stdlib: %d rows, end %v", len(want.rows), want.end)
		}
		// The comparison is only worth it if the values are what is meant:
		// spot-check stdlib's Go types.
		col := func(name string) int { return indexOf(t, want.columns, name) }
		for _, c := range []struct {
			name string
			row  int
			want driver.Value
		}{
			{"b", 0, true},
			{"by", 0, []byte{0xde, 0xad, 0xbe, 0xef}},
			{"by", 1, []byte{}},
			{"i2", 0, int64(12)},
			{"i4", 0, int64(1234)},
			{"f4", 0, float64(1.5)},
			{"f8", 1, math.Inf(1)},
			{"f8", 3, math.Inf(-1)},
			{"n", 0, "12345678.91"},
			{"d", 1, "infinity"},
			{"tstz", 1, "-infinity"},
			{"d", 0, time.Date(1999, 12, 31, 0, 0, 0, 0, time.UTC)},
			{"js", 1, []byte("null")},
			{"o", 0, int64(4294967295)},
			{"xi", 0, int64(42)},
			{"cd", 0, int64(7)},
			{"ia", 0, "{1,2,3}"},
			{"e", 0, "happy"},
			{"dm", 0, int64(5)}, // a domain has its base type in RowDescription
			{"x", 0, []byte(`<a href="x">t</a>`)},
			{"tx", 2, nil},
		} {
			if got := want.rows[c.row][col(c.name)]; !sameValue(got, c.want) {
				t.Errorf("stdlib row %d %s: %T %#v, want %T %#v", c.row, c.name, got, got, c.want, c.want)
			}
		}
		if ct := want.types[col("n")]; ct.Precision != 10 || ct.Scale != 2 || !ct.PrecisionScaleOK {
			t.Errorf("numeric(10,2): %+v", ct)
		}
		if ct := want.types[col("vc")]; ct.Length != 12 || !ct.LengthOK {
			t.Errorf("varchar(12): %+v", ct)
		}
		if v := want.rows[0][col("f4")]; reflect.TypeOf(v) != reflect.TypeFor[float64]() {
			t.Errorf("float4: %T", v)
		}
		if v := want.rows[1][col("f4")].(float64); !math.IsNaN(v) {
			t.Errorf("float4 NaN: %v", v)
		}
	})

	// The type modifiers ColumnType* decode (pgx v5.13.0 reports the
	// fractional seconds precision of the temporal types, none for an
	// unconstrained numeric, unlimited lengths for unconstrained varchar,
	// bpchar and varbit).
	t.Run("type modifiers", func(t *testing.T) {
		if _, err := sc.Conn().Exec(ctx, `CREATE TEMP TABLE rr_typmods (
			ts0 timestamp(0), ts3 timestamp(3), tstz3 timestamptz(3), tm2 time(2), tmtz4 timetz(4),
			iv3 interval(3), ivds3 interval day to second(3), ivym interval year to month, ivds interval day to second,
			n50 numeric(5,0), n380 numeric(38,10), bpc bpchar, ch char(3), vc1 varchar(1), vb1 varbit(1), bt bit(4),
			i4 int4)`); err != nil {
			t.Fatal(err)
		}
		want := differential(t, ctx, sc, `SELECT * FROM rr_typmods`)
		col := func(name string) int { return indexOf(t, want.columns, name) }
		// Spot-check stdlib, so that the comparison covers what is meant.
		for _, c := range []struct {
			name             string
			precision, scale int64
			ok               bool
		}{
			{"ts0", 0, 0, true},
			{"ts3", 0, 3, true},
			{"tmtz4", 0, 4, true},
			{"ivds3", 0, 3, true},
			{"ivym", 0, 6, true},
			{"n380", 38, 10, true},
			{"i4", 0, 0, false},
		} {
			if ct := want.types[col(c.name)]; ct.Precision != c.precision || ct.Scale != c.scale || ct.PrecisionScaleOK != c.ok {
				t.Errorf("stdlib %s: %+v, want precision %d scale %d ok %v", c.name, ct, c.precision, c.scale, c.ok)
			}
		}
		if ct := want.types[col("bpc")]; ct.Length != math.MaxInt64 || !ct.LengthOK {
			t.Errorf("stdlib bpchar: %+v", ct)
		}
	})

	t.Run("params", func(t *testing.T) {
		differential(t, ctx, sc, `SELECT $1::int8 + 1 AS a, $2::text AS b, $3::timestamptz AS c, $4::bytea AS d, $5::int4 AS e`,
			int64(41), "hé", time.Date(2020, 1, 2, 3, 4, 5, 6000, time.UTC), []byte("\x00\x01"), nil)
	})

	t.Run("zero rows", func(t *testing.T) {
		want := differential(t, ctx, sc, `SELECT 1::int4 AS a, 'x'::text AS b, now() AS c WHERE false`)
		if len(want.rows) != 0 || want.end != io.EOF || len(want.columns) != 3 {
			t.Fatalf("stdlib: %d rows, %d columns, end %v", len(want.rows), len(want.columns), want.end)
		}
	})

	t.Run("error mid-stream", func(t *testing.T) {
		want := differential(t, ctx, sc, `SELECT 1/(3-i) AS q FROM generate_series(1,5) i`)
		var pgErr *pgconn.PgError
		if len(want.rows) != 2 || !errors.As(want.end, &pgErr) || pgErr.Code != "22012" {
			t.Fatalf("stdlib: %d rows, end %v", len(want.rows), want.end)
		}
	})

	if err := sc.Conn().Ping(ctx); err != nil {
		t.Fatalf("the connection after the tests: %v", err)
	}
}

// indexOf returns the index of the column name.
func indexOf(t *testing.T, columns []string, name string) int {
	t.Helper()
	for i, c := range columns {
		if c == name {
			return i
		}
	}
	t.Fatalf("no column %s in %q", name, columns)
	return -1
}

// TestResultRowsNoAliasing checks that the bytea, json, jsonb and xml values
// of a row, kept by the caller, are not changed by reading the next rows: the
// reader reuses its buffer (20 rows of 2.5 kB go through its 8 kB).
func TestResultRowsNoAliasing(t *testing.T) {
	ctx := testCtx(t)
	sc := resultRowsConn(t, ctx)
	var rec doneRecord
	rows := mustRows(t, ctx, sc, &rec, `SELECT convert_to(repeat(chr(64+i), 500), 'UTF8') AS by,
		json_build_object('k', repeat(chr(64+i), 500)) AS js, jsonb_build_object('k', repeat(chr(64+i), 500)) AS jsb,
		xmlelement(name x, repeat(chr(64+i), 500)) AS x, repeat(chr(64+i), 500) AS tx
		FROM generate_series(1,20) i`)
	want := func(i int) []driver.Value {
		s := strings.Repeat(string(rune(64+i)), 500)
		return []driver.Value{[]byte(s), []byte(`{"k" : "` + s + `"}`), []byte(`{"k": "` + s + `"}`), []byte("<x>" + s + "</x>"), s}
	}
	first := make([]driver.Value, 5)
	if err := rows.Next(first); err != nil {
		t.Fatal(err)
	}
	if c := differentColumn(first, want(1)); c >= 0 {
		t.Fatalf("row 1 column %d: %.40q, want %.40q", c, first[c], want(1)[c])
	}
	for i := 2; i <= 20; i++ {
		dest := make([]driver.Value, 5)
		if err := rows.Next(dest); err != nil {
			t.Fatal(err)
		}
		if c := differentColumn(dest, want(i)); c >= 0 {
			t.Fatalf("row %d column %d: %.40q, want %.40q", i, c, dest[c], want(i)[c])
		}
		if c := differentColumn(first, want(1)); c >= 0 {
			t.Fatalf("row 1 column %d after reading row %d: %.40q, want %.40q", c, i, first[c], want(1)[c])
		}
	}
	if err := rows.Close(); err != nil || rec.calls != 1 || rec.plErr != nil {
		t.Fatalf("Close: %v; done: %d calls, pipeline error %v", err, rec.calls, rec.plErr)
	}
}

// differentColumn returns the first column where got and want differ, or -1.
func differentColumn(got, want []driver.Value) int {
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			return i
		}
	}
	return -1
}

// TestResultRowsClose checks that done is called exactly once, with the
// reader's error: by Next at the rows' end (whose error, if any, Next
// returns instead of io.EOF: what followed the statement, a write's
// commit, failed), else by Close; and that Close returns what done
// returns.
func TestResultRowsClose(t *testing.T) {
	ctx := testCtx(t)
	sc := resultRowsConn(t, ctx)
	next := func(rows driver.Rows) error { return rows.Next(make([]driver.Value, len(rows.Columns()))) }
	closeTwice := func(t *testing.T, rows driver.Rows, rec *doneRecord, want error) {
		t.Helper()
		for i := range 2 {
			if err := rows.Close(); !errors.Is(err, want) && !sameCode(err, want) {
				t.Errorf("Close #%d: %v, want %v", i+1, err, want)
			}
		}
		if rec.calls != 1 || rec.plErr != nil {
			t.Errorf("done: %d calls, pipeline error %v", rec.calls, rec.plErr)
		}
		if err := sc.Conn().Ping(ctx); err != nil {
			t.Fatalf("the connection after Close: %v", err)
		}
	}

	t.Run("after the last row", func(t *testing.T) {
		var rec doneRecord
		rows := mustRows(t, ctx, sc, &rec, `SELECT i, i::text AS s FROM generate_series(1,3) i`)
		for range 3 {
			if err := next(rows); err != nil {
				t.Fatal(err)
			}
		}
		if err := next(rows); err != io.EOF {
			t.Fatalf("Next after the last row: %v, want io.EOF", err)
		}
		if rec.calls != 1 {
			t.Fatalf("done called %d times at the rows' end, want once", rec.calls)
		}
		closeTwice(t, rows, &rec, nil)
		if rec.err != nil {
			t.Errorf("done(%v), want done(nil)", rec.err)
		}
		// The columns were copied: the connection's field descriptions
		// are overwritten by the next query.
		if _, err := sc.Conn().Exec(ctx, `SELECT 'x'::bytea AS other, 1.5::numeric AS other2`); err != nil {
			t.Fatal(err)
		}
		if got := rows.Columns(); !reflect.DeepEqual(got, []string{"i", "s"}) {
			t.Errorf("Columns() after Close: %q", got)
		}
		if got := rows.(driver.RowsColumnTypeDatabaseTypeName).ColumnTypeDatabaseTypeName(1); got != "TEXT" {
			t.Errorf("type of s after Close: %s", got)
		}
	})

	t.Run("done fails at the end", func(t *testing.T) {
		failed := errors.New("the commit failed")
		rec := doneRecord{returns: failed}
		rows := mustRows(t, ctx, sc, &rec, `SELECT 1`)
		if err := next(rows); err != nil {
			t.Fatal(err)
		}
		if err := next(rows); !errors.Is(err, failed) {
			t.Fatalf("Next after the last row, when done fails: %v, want done's error", err)
		}
		closeTwice(t, rows, &rec, failed)
	})

	t.Run("before the last row", func(t *testing.T) {
		var rec doneRecord
		rows := mustRows(t, ctx, sc, &rec, `SELECT i FROM generate_series(1,1000) i`)
		if err := next(rows); err != nil {
			t.Fatal(err)
		}
		closeTwice(t, rows, &rec, nil)
		if rec.err != nil {
			t.Errorf("done(%v), want done(nil)", rec.err)
		}
		if err := next(rows); err != io.EOF {
			t.Errorf("Next after Close: %v, want io.EOF", err)
		}
	})

	t.Run("unread", func(t *testing.T) {
		var rec doneRecord
		rows := mustRows(t, ctx, sc, &rec, `SELECT i FROM generate_series(1,10) i`)
		closeTwice(t, rows, &rec, nil)
	})

	t.Run("done's error", func(t *testing.T) {
		boom := errors.New("boom")
		rec := doneRecord{returns: boom}
		rows := mustRows(t, ctx, sc, &rec, `SELECT 1`)
		closeTwice(t, rows, &rec, boom)
		if rec.err != nil {
			t.Errorf("done(%v), want done(nil)", rec.err)
		}
	})

	// A query failing before its first row fails at once, as through
	// stdlib's QueryContext, with its rows closed.
	t.Run("error before the first row", func(t *testing.T) {
		const q = `SELECT 1/(i-1) AS q FROM generate_series(1,5) i`
		_, want := sc.QueryContext(ctx, q, nil)
		var rec doneRecord
		rows, err := pipelineRows(t, ctx, sc, &rec, q)
		var pgErr *pgconn.PgError
		if rows != nil || !errors.As(err, &pgErr) || pgErr.Code != "22012" || !sameCode(err, want) {
			t.Fatalf("NewRows: %v, %v; want division by zero, as stdlib's %v", rows, err, want)
		}
		if rec.calls != 1 || rec.err != pgErr || rec.plErr != nil {
			t.Fatalf("done: %d calls with %v (pipeline %v), want 1 with the error", rec.calls, rec.err, rec.plErr)
		}
		rec = doneRecord{}
		rows, err = queryRows(t, ctx, sc, &rec, q)
		if rows != nil || !errors.As(err, &pgErr) || pgErr.Code != "22012" || !sameCode(err, want) {
			t.Fatalf("Rows.Query: %v, %v; want division by zero, as stdlib's %v", rows, err, want)
		}
		if rec.calls != 1 || rec.err != pgErr {
			t.Fatalf("Rows.Query's done: %d calls with %v, want 1 with the error", rec.calls, rec.err)
		}
		if err := sc.Conn().Ping(ctx); err != nil {
			t.Fatalf("the connection after the error: %v", err)
		}
	})

	// As stdlib's QueryContext: a closed connection, or a query that
	// could not be sent, is driver.ErrBadConn.
	t.Run("closed connection", func(t *testing.T) {
		own := resultRowsConn(t, ctx)
		own.Conn().Close(ctx)
		var rec doneRecord
		rows, err := queryRows(t, ctx, own, &rec, `SELECT 1`)
		if rows != nil || err != driver.ErrBadConn || rec.calls != 0 {
			t.Fatalf("Rows.Query on a closed connection: %v, %v, %d calls of done; want driver.ErrBadConn", rows, err, rec.calls)
		}
	})

	for _, c := range []struct{ name, q string }{
		{"error mid-stream", `SELECT 1/(3-i) AS q FROM generate_series(1,5) i`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rec doneRecord
			rows := mustRows(t, ctx, sc, &rec, c.q)
			var err error
			n := 0
			for ; ; n++ {
				if err = next(rows); err != nil {
					break
				}
			}
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "22012" {
				t.Fatalf("Next after %d rows: %v, want division by zero", n, err)
			}
			if rec.calls != 0 {
				t.Fatalf("done called %d times before Close", rec.calls)
			}
			closeTwice(t, rows, &rec, pgErr)
			if rec.err != pgErr {
				t.Errorf("done(%v), want done(%v)", rec.err, pgErr)
			}
		})
	}
}

// sameCode reports whether a and b are both *pgconn.PgError with one code.
func sameCode(a, b error) bool {
	var pa, pb *pgconn.PgError
	return errors.As(a, &pa) && errors.As(b, &pb) && pa.Code == pb.Code
}

// TestResultRowsFormats checks ResultFormats against the list of stdlib.
func TestResultRowsFormats(t *testing.T) {
	binary := map[uint32]bool{
		pgtype.BoolOID: true, pgtype.ByteaOID: true, pgtype.CIDOID: true, pgtype.DateOID: true,
		pgtype.Float4OID: true, pgtype.Float8OID: true, pgtype.Int2OID: true, pgtype.Int4OID: true,
		pgtype.Int8OID: true, pgtype.OIDOID: true, pgtype.TimestampOID: true, pgtype.TimestamptzOID: true,
		pgtype.XIDOID: true,
	}
	var fields []pgconn.FieldDescription
	for oid := range uint32(5000) {
		fields = append(fields, pgconn.FieldDescription{DataTypeOID: oid, Format: pgtype.BinaryFormatCode})
	}
	for i, f := range pgpipe.ResultFormats(fields) {
		want := pgtype.TextFormatCode
		if binary[uint32(i)] {
			want = pgtype.BinaryFormatCode
		}
		if f != int16(want) {
			t.Errorf("OID %d: format %d, want %d", i, f, want)
		}
	}
	if got := pgpipe.ResultFormats(nil); len(got) != 0 {
		t.Errorf("no fields: %v", got)
	}
}

// TestResultRowsQueryAllocs checks that Rows.Query's rows of a small query
// (columns and arguments up to the inline sizes) take no allocation of
// their own beyond pgx's: a query through Rows.Query allocates no more
// than the same query through pgx's Query and Next.
func TestResultRowsQueryAllocs(t *testing.T) {
	ctx := testCtx(t)
	sc := resultRowsConn(t, ctx)
	const q = `SELECT $1::int4 AS a, 'x'::text AS b, true AS c, $2::int8 AS d`
	named := []driver.NamedValue{{Ordinal: 1, Value: 7}, {Ordinal: 2, Value: 8}}
	dest := make([]driver.Value, 4)
	r := new(pgpipe.Rows)
	ours := testing.AllocsPerRun(200, func() {
		*r = pgpipe.Rows{}
		if err := r.Query(ctx, sc.Conn(), q, named, nil); err != nil {
			t.Fatal(err)
		}
		for r.Next(dest) == nil {
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	})
	args := []any{pgx.QueryResultFormatsByOID{}, 7, 8}
	pgxs := testing.AllocsPerRun(200, func() {
		rows, err := sc.Conn().Query(ctx, q, args...)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			_ = rows.RawValues()
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	})
	// Converting "x" to a driver value (a string in an interface) is
	// Rows' only allocation of its own: the Rows is reused here.
	if ours > pgxs+1 {
		t.Errorf("Rows.Query: %.0f allocations per query, pgx's Query %.0f: want at most one more", ours, pgxs)
	}
}
