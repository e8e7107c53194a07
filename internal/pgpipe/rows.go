package pgpipe

// This file provides a database/sql driver.Rows over a *pgconn.ResultReader,
// so that a query can be sent through a pgconn.Pipeline together with
// another one, or over pgx's rows of a query run on a pgx.Conn taken
// straight from a pgxpool.Pool (pgx's stdlib.Rows cannot be built from
// outside pgx, nor without stdlib's per-connection wrapper). It mirrors the
// conversions of stdlib.Rows in pgx v5.13.0 (stdlib/sql.go:
// databaseSQLResultFormats, Conn.QueryContext, Rows.initValueFuncs,
// Rows.Next and the ColumnType* methods) so that a query gives the same
// driver values and column types whichever route it takes.

import (
	"context"
	"database/sql/driver"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// ResultFormats returns the result format codes stdlib asks for, one per
// field: binary for the intrinsic types stdlib lists in
// databaseSQLResultFormats (bool, bytea, cid, date, float4, float8, int2,
// int4, int8, oid, timestamp, timestamptz, xid), text for the rest. Only the
// fields' DataTypeOID is read, so fields may be a statement description's
// Fields, whose Format is 0.
func ResultFormats(fields []pgconn.FieldDescription) []int16 {
	formats := make([]int16, len(fields))
	for i, fd := range fields {
		switch fd.DataTypeOID {
		case pgtype.BoolOID, pgtype.ByteaOID, pgtype.CIDOID, pgtype.DateOID,
			pgtype.Float4OID, pgtype.Float8OID, pgtype.Int2OID, pgtype.Int4OID,
			pgtype.Int8OID, pgtype.OIDOID, pgtype.TimestampOID,
			pgtype.TimestamptzOID, pgtype.XIDOID:
			formats[i] = pgtype.BinaryFormatCode
		default:
			formats[i] = pgtype.TextFormatCode
		}
	}
	return formats
}

// Rows is a driver.Rows over the rows of one query, with stdlib.Rows'
// conversions: read from a *pgconn.ResultReader ([NewRows], [Rows.Open]),
// or from pgx's rows of a query pgx ran ([Rows.Query]).
//
// A Rows holds its columns, their converters and Query's arguments itself
// up to inlineColumns columns and inlineArgs arguments (each value is
// converted as soon as it is scanned, through one scan target per Go
// type), so that the rows of a small query cost one allocation. A Rows in
// use must not be copied.
type Rows struct {
	m        *pgtype.Map
	rr       *pgconn.ResultReader // the source (NewRows), or
	pr       pgx.Rows             // pgx's rows (Query)
	cols     []column             // a copy of the field descriptions: rr's is the connection's, reused by its next result
	columns  []string
	done     func(error) error // nil: Close returns the query's error
	nextErr  func(error) error // what Next returns for the query's error; nil: the error as is
	loaded   bool              // the source holds a row Next has not returned yet
	rrClosed bool              // the source is closed (by Next at the end, or by Close)
	rrErr    error             // the error of closing the source
	closed   bool              // Close ran
	closeErr error             // what done returned
	doneRun  bool              // done ran (at the rows' end, or by Close)
	early    bool              // Close found rows the caller had not read (see Early)

	targets scanTargets
	colBuf  [inlineColumns]column
	nameBuf [inlineColumns]string
	argBuf  [inlineArgs]any // Query's arguments, which pgx's rows keep until closed
}

// inlineColumns is how many columns a Rows holds without another
// allocation, and inlineArgs how many arguments (stdlib's result formats
// included) Query passes to pgx without one.
const (
	inlineColumns = 4
	inlineArgs    = 4
)

var (
	_ driver.Rows                           = (*Rows)(nil)
	_ driver.RowsColumnTypeDatabaseTypeName = (*Rows)(nil)
	_ driver.RowsColumnTypeLength           = (*Rows)(nil)
	_ driver.RowsColumnTypePrecisionScale   = (*Rows)(nil)
	_ driver.RowsColumnTypeScanType         = (*Rows)(nil)
)

// NewRows returns rows over rr, whose values are in the formats of its
// field descriptions (rr.FieldDescriptions()). m is the connection's type
// map. done is called exactly once, by Close (Close is idempotent), with the
// error of closing rr (nil when fine, including after reading every row);
// what done returns is what Close returns. done is called even when rr
// reported an error.
//
// Like stdlib's QueryContext, it reads the first row at once, so that a
// statement failing before its first row (a unique violation of an
// INSERT … RETURNING, an error of the first row) fails here, not at the
// first Next: the rows are then closed (done has run) and the error is
// returned.
func NewRows(m *pgtype.Map, rr *pgconn.ResultReader, done func(error) error) (driver.Rows, error) {
	r := new(Rows)
	if err := r.Open(m, rr, done); err != nil {
		return nil, err
	}
	return r, nil
}

// Open is NewRows into r, a zero Rows that its owner keeps (and closes) as
// its own (one its owner allocates with what else its rows hold). done
// may be nil. On error r is closed (done has run).
func (r *Rows) Open(m *pgtype.Map, rr *pgconn.ResultReader, done func(error) error) error {
	r.m, r.rr, r.done = m, rr, done
	r.setColumns(rr.FieldDescriptions())
	return r.first()
}

// stdlibResultFormats are the result formats stdlib's QueryContext asks pgx
// for (databaseSQLResultFormats): binary for the intrinsic types of
// ResultFormats, text for the rest.
var stdlibResultFormats = pgx.QueryResultFormatsByOID{
	pgtype.BoolOID:        pgtype.BinaryFormatCode,
	pgtype.ByteaOID:       pgtype.BinaryFormatCode,
	pgtype.CIDOID:         pgtype.BinaryFormatCode,
	pgtype.DateOID:        pgtype.BinaryFormatCode,
	pgtype.Float4OID:      pgtype.BinaryFormatCode,
	pgtype.Float8OID:      pgtype.BinaryFormatCode,
	pgtype.Int2OID:        pgtype.BinaryFormatCode,
	pgtype.Int4OID:        pgtype.BinaryFormatCode,
	pgtype.Int8OID:        pgtype.BinaryFormatCode,
	pgtype.OIDOID:         pgtype.BinaryFormatCode,
	pgtype.TimestampOID:   pgtype.BinaryFormatCode,
	pgtype.TimestamptzOID: pgtype.BinaryFormatCode,
	pgtype.XIDOID:         pgtype.BinaryFormatCode,
}

// Query runs query with args on pc as stdlib's Conn.QueryContext does:
// pgx's Query with stdlib's result formats, driver.ErrBadConn when pc is
// closed or nothing was sent, and the first row read at once, so that a
// query failing before it fails here. On success r holds the rows: r is a
// zero Rows that its owner keeps (and closes) as its own. done is as in
// NewRows, and may be nil. On error r is closed, and done has run when
// the query was sent.
//
// It is stdlib's path without stdlib's per-connection wrapper, for a
// connection taken from a pgxpool.Pool directly.
func (r *Rows) Query(ctx context.Context, pc *pgx.Conn, query string, args []driver.NamedValue, done func(error) error) error {
	if pc.IsClosed() {
		return driver.ErrBadConn
	}
	var a []any
	if n := 1 + len(args); n <= len(r.argBuf) {
		a = r.argBuf[:n]
	} else {
		a = make([]any, n)
	}
	a[0] = stdlibResultFormats
	for i, v := range args {
		a[1+i] = v.Value // stdlib's convertNamedArguments
	}
	pr, err := pc.Query(ctx, query, a...)
	if err != nil {
		if pgconn.SafeToRetry(err) {
			return driver.ErrBadConn
		}
		return err
	}
	r.m, r.pr, r.done = pc.TypeMap(), pr, done
	r.setColumns(pr.FieldDescriptions())
	return r.first()
}

// Answered reports whether the server answered the query with anything of
// its own (a row, or a command tag), which a query that failed in Query
// (the error of its first row) may have done before its error.
func (r *Rows) Answered() bool {
	if r.loaded {
		return true
	}
	if r.pr != nil {
		return r.pr.CommandTag().String() != ""
	}
	return false
}

// setColumns copies fields and plans the conversion of each column, as
// stdlib's Rows.initValueFuncs does: the same Go type per OID, a string
// for every type it does not list.
func (r *Rows) setColumns(fields []pgconn.FieldDescription) {
	if n := len(fields); n <= inlineColumns {
		r.cols, r.columns = r.colBuf[:n], r.nameBuf[:n]
	} else {
		r.cols, r.columns = make([]column, n), make([]string, n)
	}
	for i, fd := range fields {
		c := &r.cols[i]
		c.fd, c.kind = fd, kindOf(fd.DataTypeOID)
		c.plan = r.m.PlanScan(fd.DataTypeOID, fd.Format, r.targets.target(c.kind))
		r.columns[i] = fd.Name
	}
}

// first reads the first row, as stdlib's QueryContext does; when the query
// failed before it, it closes r and returns the error.
func (r *Rows) first() error {
	if r.nextRow() {
		r.loaded = true
		return nil
	}
	r.closeReader()
	if r.rrErr != nil {
		err := r.rrErr
		if cerr := r.Close(); cerr != nil {
			err = cerr
		}
		return err
	}
	return nil
}

// nextRow reads the next row of the source.
func (r *Rows) nextRow() bool {
	if r.rr != nil {
		return r.rr.NextRow()
	}
	return r.pr.Next()
}

// values are the values of the row read last, as they came on the wire.
func (r *Rows) values() [][]byte {
	if r.rr != nil {
		return r.rr.Values()
	}
	return r.pr.RawValues()
}

// column is one column of the rows: its description, and how its values
// convert (its kind, and the scan plan into the scan target of the kind).
type column struct {
	fd   pgconn.FieldDescription
	kind valueKind
	plan pgtype.ScanPlan
}

// valueKind is the Go type a column's values are scanned into before they
// become driver values, as stdlib's Rows.initValueFuncs chooses it by OID.
type valueKind uint8

const (
	kindString      valueKind = iota // every type stdlib does not list
	kindBool                         // bool
	kindBytes                        // bytea, json, jsonb, xml: []byte (their scan plans into *[]byte copy src)
	kindUint32                       // cid, oid, xid: int64
	kindDate                         // time.Time, or "infinity", "-infinity"
	kindFloat4                       // float64
	kindFloat8                       // float64
	kindInt2                         // int64
	kindInt4                         // int64
	kindInt8                         // int64
	kindTimestamp                    // time.Time (UTC), or "infinity", "-infinity"
	kindTimestamptz                  // time.Time (Local), or "infinity", "-infinity"
)

// kindOf is the kind of a column of type oid.
func kindOf(oid uint32) valueKind {
	switch oid {
	case pgtype.BoolOID:
		return kindBool
	case pgtype.ByteaOID, pgtype.JSONOID, pgtype.JSONBOID, pgtype.XMLOID:
		return kindBytes
	case pgtype.CIDOID, pgtype.OIDOID, pgtype.XIDOID:
		return kindUint32
	case pgtype.DateOID:
		return kindDate
	case pgtype.Float4OID:
		return kindFloat4
	case pgtype.Float8OID:
		return kindFloat8
	case pgtype.Int2OID:
		return kindInt2
	case pgtype.Int4OID:
		return kindInt4
	case pgtype.Int8OID:
		return kindInt8
	case pgtype.TimestampOID:
		return kindTimestamp
	case pgtype.TimestamptzOID:
		return kindTimestamptz
	}
	return kindString
}

// scanTargets holds what a column's value is scanned into, one per kind.
// stdlib keeps one per column; one per kind gives the same values, since
// every scan plan sets the whole value, a value is converted before the
// next one is scanned, and no driver value refers to its target (the
// []byte ones are copies of src).
type scanTargets struct {
	b    bool
	by   []byte
	u32  pgtype.Uint32
	date pgtype.Date
	f4   float32
	f8   float64
	i2   int16
	i4   int32
	i8   int64
	ts   pgtype.Timestamp
	tstz pgtype.Timestamptz
	s    string
}

// target is the scan target of kind k.
func (s *scanTargets) target(k valueKind) any {
	switch k {
	case kindBool:
		return &s.b
	case kindBytes:
		return &s.by
	case kindUint32:
		return &s.u32
	case kindDate:
		return &s.date
	case kindFloat4:
		return &s.f4
	case kindFloat8:
		return &s.f8
	case kindInt2:
		return &s.i2
	case kindInt4:
		return &s.i4
	case kindInt8:
		return &s.i8
	case kindTimestamp:
		return &s.ts
	case kindTimestamptz:
		return &s.tstz
	}
	return &s.s
}

// convert converts one non-NULL value of column c, as read from the wire,
// to its driver.Value, as stdlib's value functions do. It never keeps src:
// the reader reuses that buffer for the next row.
func (r *Rows) convert(c *column, src []byte) (driver.Value, error) {
	s := &r.targets
	if err := c.plan.Scan(src, s.target(c.kind)); err != nil {
		return nil, err
	}
	switch c.kind {
	case kindBool:
		return s.b, nil
	case kindBytes:
		return s.by, nil
	case kindUint32:
		return s.u32.Value()
	case kindDate:
		return s.date.Value()
	case kindFloat4:
		return float64(s.f4), nil
	case kindFloat8:
		return s.f8, nil
	case kindInt2:
		return int64(s.i2), nil
	case kindInt4:
		return int64(s.i4), nil
	case kindInt8:
		return s.i8, nil
	case kindTimestamp:
		return s.ts.Value()
	case kindTimestamptz:
		return s.tstz.Value()
	}
	return s.s, nil
}

// Columns returns the names of the columns.
func (r *Rows) Columns() []string { return r.columns }

// ColumnTypeDatabaseTypeName returns the upper-case name of the column's type
// in the type map, or its OID in decimal when the map does not know it (an
// enum, for instance).
func (r *Rows) ColumnTypeDatabaseTypeName(index int) string {
	oid := r.cols[index].fd.DataTypeOID
	if dt, ok := r.m.TypeForOID(oid); ok {
		return strings.ToUpper(dt.Name)
	}
	return strconv.FormatInt(int64(oid), 10)
}

// varHeaderSize is the size of a varlena header, which the type modifiers of
// varchar, char and numeric include.
const varHeaderSize = 4

// noTypeModifier is the type modifier of a column whose type was used
// without a precision or length specifier.
const noTypeModifier = -1

// ColumnTypeLength returns the length of text, bytea, varchar, char and
// varbit columns, as stdlib does: from the type modifier, or
// math.MaxInt64 (unlimited) for text, bytea and an unconstrained varchar,
// char or varbit; ok is false for the other types.
func (r *Rows) ColumnTypeLength(index int) (length int64, ok bool) {
	fd := r.cols[index].fd
	switch fd.DataTypeOID {
	case pgtype.TextOID, pgtype.ByteaOID:
		return math.MaxInt64, true
	case pgtype.VarcharOID, pgtype.BPCharOID:
		if fd.TypeModifier == noTypeModifier {
			return math.MaxInt64, true
		}
		return int64(fd.TypeModifier - varHeaderSize), true
	case pgtype.VarbitOID:
		if fd.TypeModifier == noTypeModifier {
			return math.MaxInt64, true
		}
		return int64(fd.TypeModifier), true
	default:
		return 0, false
	}
}

// ColumnTypePrecisionScale returns what stdlib does: the precision and
// scale of a numeric column declared with a precision (decoded from its
// type modifier); for timestamp, timestamptz, time, timetz and interval,
// precision 0 and the fractional seconds precision as the scale (6 when
// none was declared; an interval's is the low 16 bits of its modifier, all
// set when only a field range was declared); ok is false for an
// unconstrained numeric and the other types.
func (r *Rows) ColumnTypePrecisionScale(index int) (precision, scale int64, ok bool) {
	fd := r.cols[index].fd
	switch fd.DataTypeOID {
	case pgtype.NumericOID:
		if fd.TypeModifier == noTypeModifier {
			return 0, 0, false
		}
		mod := fd.TypeModifier - varHeaderSize
		return int64((mod >> 16) & 0xffff), int64(mod & 0xffff), true
	case pgtype.TimestampOID, pgtype.TimestamptzOID, pgtype.TimeOID, pgtype.TimetzOID:
		if fd.TypeModifier == noTypeModifier {
			return 0, 6, true
		}
		return 0, int64(fd.TypeModifier), true
	case pgtype.IntervalOID:
		if fd.TypeModifier == noTypeModifier || fd.TypeModifier&0xffff == 0xffff {
			return 0, 6, true
		}
		return 0, int64(fd.TypeModifier & 0xffff), true
	default:
		return 0, 0, false
	}
}

// ColumnTypeScanType returns the Go type stdlib reports for the column: the
// natural one for the intrinsic types, float64 for numeric (whose values are
// strings nonetheless) and string for the rest.
func (r *Rows) ColumnTypeScanType(index int) reflect.Type {
	switch r.cols[index].fd.DataTypeOID {
	case pgtype.Float8OID:
		return reflect.TypeFor[float64]()
	case pgtype.Float4OID:
		return reflect.TypeFor[float32]()
	case pgtype.Int8OID:
		return reflect.TypeFor[int64]()
	case pgtype.Int4OID:
		return reflect.TypeFor[int32]()
	case pgtype.Int2OID:
		return reflect.TypeFor[int16]()
	case pgtype.BoolOID:
		return reflect.TypeFor[bool]()
	case pgtype.NumericOID:
		return reflect.TypeFor[float64]()
	case pgtype.DateOID, pgtype.TimestampOID, pgtype.TimestamptzOID:
		return reflect.TypeFor[time.Time]()
	case pgtype.ByteaOID:
		return reflect.TypeFor[[]byte]()
	default:
		return reflect.TypeFor[string]()
	}
}

// Next reads the next row into dest. After the last row it closes the
// source and returns the error of the query (as nextErr makes it); else
// it runs done, which reads what followed the query (a write's commit),
// and returns its error, or io.EOF. database/sql's Rows.Err reports what
// Next returned, not Close's error: a commit that failed after the rows
// (a deferred constraint) must fail Next, as it does for stdlib's rows.
func (r *Rows) Next(dest []driver.Value) error {
	if r.loaded {
		r.loaded = false // the first row, read by NewRows or Query
	} else if r.rrClosed || !r.nextRow() {
		r.closeReader()
		if r.rrErr != nil {
			if r.nextErr != nil {
				return r.nextErr(r.rrErr)
			}
			return r.rrErr
		}
		if err := r.runDone(); err != nil {
			return err
		}
		return io.EOF
	}
	for i, src := range r.values() {
		if src == nil {
			dest[i] = nil
			continue
		}
		v, err := r.convert(&r.cols[i], src)
		if err != nil {
			return fmt.Errorf("convert field %d failed: %w", i, err)
		}
		dest[i] = v
	}
	return nil
}

// Early reports, once the rows are closed, whether Close found the source
// still open: the caller stopped reading before Next returned the rows'
// end or an error (database/sql's Row.Scan does, after the first row).
// What the caller read is whole then, whatever closing the rest found.
func (r *Rows) Early() bool { return r.early }

// closeReader closes the source once, reading what is left of its rows,
// and keeps its error. A ResultReader is not used afterwards: it belongs
// to the connection, which reuses it for its next result.
func (r *Rows) closeReader() {
	if !r.rrClosed {
		r.rrClosed = true
		if r.rr != nil {
			_, r.rrErr = r.rr.Close()
		} else {
			r.pr.Close()
			r.rrErr = r.pr.Err()
		}
	}
}

// Close closes the source, if Next has not, and returns what done returns
// for its error (without done, the error itself). Later calls return the
// same without calling done again.
func (r *Rows) Close() error {
	if !r.closed {
		r.closed = true
		r.early = !r.rrClosed
		r.closeReader()
		r.runDone()
	}
	return r.closeErr
}

// runDone runs done once, with the source's error, once it is closed, and
// keeps what it returned (without done, the error itself) for Close.
func (r *Rows) runDone() error {
	if !r.doneRun {
		r.doneRun = true
		r.closeErr = r.rrErr
		if r.done != nil {
			r.closeErr = r.done(r.rrErr)
		}
	}
	return r.closeErr
}
